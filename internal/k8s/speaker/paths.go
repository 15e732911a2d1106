package speaker

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/herald-lb/herald/internal/bgp"
)

// Retry bounds of pathApplier after a failed SetPaths.
const (
	minPathRetry = 100 * time.Millisecond
	maxPathRetry = 10 * time.Second
)

// pathApplier owns the BGP paths this speaker announces and applies them in
// its own goroutine (run), apart from the reconcile worker:
//
//   - an announcement never waits for API writes (status objects, events)
//     that the worker does after deciding a Service;
//   - a burst of Service changes (start-up, a pool of 10,000 Services, a
//     node joining) is coalesced: while one SetPaths runs, further changes
//     only mark the state dirty, and the next pass merges and applies them
//     all at once, so the cost of a burst is a few O(n) merges, not one per
//     Service.
//
// A failed SetPaths is retried with exponential backoff (100 ms to 10 s);
// onFailure is called once per run of failures, with the Services changed
// since the last success.
type pathApplier struct {
	speaker   bgp.Speaker
	log       *slog.Logger
	onFailure func(ctx context.Context, services []string, err error)
	wake      chan struct{} // capacity 1: a pending pass

	mu        sync.Mutex
	byService map[string][]bgp.Path // "namespace/name" -> its unmerged paths
	dirty     map[string]bool       // Services changed since the last successful pass
	applying  bool                  // a pass is merging or applying paths
	lastOK    bool                  // the last pass succeeded (false before the first)

	// Touched only by run's goroutine.
	applied   []bgp.Path
	isApplied bool
	failing   bool // onFailure was called for the current run of failures
}

func newPathApplier(sp bgp.Speaker, log *slog.Logger, onFailure func(context.Context, []string, error)) *pathApplier {
	return &pathApplier{
		speaker:   sp,
		log:       log,
		onFailure: onFailure,
		wake:      make(chan struct{}, 1),
		byService: map[string][]bgp.Path{},
		dirty:     map[string]bool{},
	}
}

// set records the paths of one Service (nil withdraws them) and schedules a
// pass when they changed. It keeps paths (no copy): the caller must not
// modify them afterwards. It does not block.
func (a *pathApplier) set(service string, paths []bgp.Path) {
	a.mu.Lock()
	old, had := a.byService[service]
	if slices.EqualFunc(old, paths, bgp.Path.Equal) && (had || len(paths) == 0) {
		a.mu.Unlock()
		return
	}
	if len(paths) == 0 {
		delete(a.byService, service)
	} else {
		a.byService[service] = paths
	}
	a.dirty[service] = true
	a.mu.Unlock()
	a.kick()
}

// kick schedules a pass without blocking.
func (a *pathApplier) kick() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// run applies the paths until ctx ends. It makes one pass at start, so
// that an empty set is applied too.
func (a *pathApplier) run(ctx context.Context) error {
	a.kick()
	backoff := minPathRetry
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-a.wake:
		case <-retry:
		}
		retry = nil
		if err := a.pass(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			a.log.Error("applying BGP paths failed, retrying", "error", err, "retryIn", backoff)
			retry = time.After(backoff)
			backoff = min(2*backoff, maxPathRetry)
			continue
		}
		backoff = minPathRetry
	}
}

// idle reports whether no SetPaths call is due: a pass has succeeded, no
// pass is running or scheduled and no Service changed since (a failed pass
// keeps the applier busy until a retry succeeds). The tests wait on it
// before checking that nothing more happened.
func (a *pathApplier) idle() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return !a.applying && a.lastOK && len(a.dirty) == 0 && len(a.wake) == 0
}

// pass merges every Service's paths and applies the result if it differs
// from what was last applied.
func (a *pathApplier) pass(ctx context.Context) (err error) {
	a.mu.Lock()
	a.applying = true
	defer func() {
		a.mu.Lock()
		a.applying, a.lastOK = false, err == nil
		a.mu.Unlock()
	}()
	n := 0
	for _, ps := range a.byService {
		n += len(ps)
	}
	all := make([]bgp.Path, 0, n)
	for _, ps := range a.byService {
		all = append(all, ps...)
	}
	dirty := a.dirty
	a.dirty = map[string]bool{}
	a.mu.Unlock()

	merged, conflicts := bgp.MergePaths(all)
	if len(conflicts) > 0 {
		a.log.Warn("BGP paths with conflicting LOCAL_PREF merged, highest wins", "prefixes", conflicts)
	}
	if a.isApplied && bgp.DiffPaths(merged, a.applied).Empty() {
		return nil
	}
	start := time.Now()
	err = a.speaker.SetPaths(ctx, merged)
	var refused *bgp.InvalidPathsError
	if errors.As(err, &refused) && !errors.Is(err, bgp.ErrNotApplied) {
		// Applied except the refused paths: a retry with the same paths
		// would refuse them again, so this is success; the Services whose
		// paths were refused are told once (the refusal is in err).
		a.applied, a.isApplied, a.failing = merged, true, false
		if a.onFailure != nil && ctx.Err() == nil {
			a.onFailure(ctx, a.servicesOf(refused), err)
		}
		return nil
	}
	if err != nil {
		a.isApplied = false
		a.mu.Lock()
		for k := range dirty {
			a.dirty[k] = true
		}
		a.mu.Unlock()
		if a.onFailure != nil && !a.failing && ctx.Err() == nil {
			keys := make([]string, 0, len(dirty))
			for k := range dirty {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			a.onFailure(ctx, keys, err)
		}
		a.failing = true
		return err
	}
	a.applied, a.isApplied, a.failing = merged, true, false
	a.log.Debug("BGP paths applied", "prefixes", len(merged), "services", len(dirty), "took", time.Since(start))
	return nil
}

// servicesOf returns the Services (sorted) that asked for a refused prefix.
func (a *pathApplier) servicesOf(refused *bgp.InvalidPathsError) []string {
	bad := make(map[netip.Prefix]bool, len(refused.Refused))
	for _, r := range refused.Refused {
		bad[r.Prefix.Masked()] = true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for svc, ps := range a.byService {
		for _, p := range ps {
			if bad[p.Prefix.Masked()] {
				out = append(out, svc)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

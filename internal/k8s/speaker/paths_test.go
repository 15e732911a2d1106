package speaker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/bgp"
	"github.com/herald-lb/herald/internal/poll"
)

// gatedSpeaker is a bgp.Fake whose SetPaths can be held (gate) or made to
// fail (failing), and counts its SetPaths calls.
type gatedSpeaker struct {
	*bgp.Fake
	entered chan struct{} // receives once per SetPaths call when gated
	gate    chan struct{} // when non-nil, SetPaths waits for a receive
	failing atomic.Bool
	calls   atomic.Int32
}

func (g *gatedSpeaker) SetPaths(ctx context.Context, paths []bgp.Path) error {
	g.calls.Add(1)
	if g.gate != nil {
		g.entered <- struct{}{}
		<-g.gate
	}
	if g.failing.Load() {
		return errors.New("gobgp refused")
	}
	return g.Fake.SetPaths(ctx, paths)
}

func hostPath(s string) bgp.Path {
	a := netip.MustParseAddr(s)
	return bgp.Path{Prefix: netip.PrefixFrom(a, a.BitLen())}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startApplier(t *testing.T, a *pathApplier) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestPathApplierSetSchedulesOnlyChanges(t *testing.T) {
	a := newPathApplier(&bgp.Fake{}, quietLog(), nil)
	pending := func() bool {
		select {
		case <-a.wake:
			return true
		default:
			return false
		}
	}
	p1 := []bgp.Path{hostPath("198.51.100.10")}
	steps := []struct {
		name    string
		service string
		paths   []bgp.Path
		want    bool // a pass is scheduled
	}{
		{"new paths", "ns/a", p1, true},
		{"same paths again", "ns/a", []bgp.Path{hostPath("198.51.100.10")}, false},
		{"nil for a Service that never had paths", "ns/b", nil, false},
		{"changed community", "ns/a", []bgp.Path{{Prefix: p1[0].Prefix, Communities: []uint32{65000<<16 | 1}}}, true},
		{"withdrawn", "ns/a", nil, true},
		{"withdrawn again", "ns/a", nil, false},
	}
	for _, st := range steps {
		a.set(st.service, st.paths)
		if got := pending(); got != st.want {
			t.Errorf("%s: pass scheduled = %v, want %v", st.name, got, st.want)
		}
	}
	if len(a.byService) != 0 {
		t.Errorf("paths left after withdrawal: %v", a.byService)
	}
}

func TestPathApplierCoalescesABurst(t *testing.T) {
	g := &gatedSpeaker{Fake: &bgp.Fake{}, entered: make(chan struct{}), gate: make(chan struct{})}
	a := newPathApplier(g, quietLog(), nil)
	startApplier(t, a)
	<-g.entered // the start-up pass is inside SetPaths
	const n = 1000
	for i := range n {
		a.set(fmt.Sprintf("ns/svc-%d", i), []bgp.Path{hostPath(fmt.Sprintf("2001:db8::%x", i+1))})
	}
	g.gate <- struct{}{} // finish the start-up pass
	<-g.entered          // one more pass ...
	g.gate <- struct{}{}
	poll.Until(t, 10*time.Second, "all paths applied", func() bool { return len(g.Paths()) == n })
	// ... and only one: everything set during the first pass is applied by
	// the second. A third call would block on the gate, keeping the
	// applier busy: wait until it is idle, failing on a third call.
	poll.Until(t, 10*time.Second, "applier idle", func() error {
		select {
		case <-g.entered:
			go func() { // let it and later calls return, so the applier can stop
				for range g.entered {
				}
			}()
			close(g.gate)
			return poll.Stop(errors.New("a third SetPaths call for a burst applied already"))
		default:
		}
		if !a.idle() {
			return errors.New("applier busy")
		}
		return nil
	})
	if c := g.calls.Load(); c != 2 {
		t.Errorf("SetPaths called %d times for a burst of %d Services, want 2", c, n)
	}
}

func TestPathApplierIdle(t *testing.T) {
	g := &gatedSpeaker{Fake: &bgp.Fake{}, entered: make(chan struct{}), gate: make(chan struct{})}
	a := newPathApplier(g, quietLog(), nil)
	if a.idle() {
		t.Error("idle before the first pass")
	}
	g.failing.Store(true)
	a.set("ns/a", []bgp.Path{hostPath("198.51.100.10")})
	startApplier(t, a)
	<-g.entered // the first pass is inside SetPaths
	if a.idle() {
		t.Error("idle during a pass")
	}
	g.gate <- struct{}{} // it fails
	<-g.entered          // the retry
	if a.idle() {
		t.Error("idle while retrying a failed pass")
	}
	g.failing.Store(false)
	g.gate <- struct{}{} // the retry succeeds
	poll.Until(t, 10*time.Second, "applier idle after the retry", a.idle)
	if ps := g.Paths(); len(ps) != 1 {
		t.Errorf("paths when idle = %v, want ns/a's", ps)
	}
	a.set("ns/b", []bgp.Path{hostPath("198.51.100.11")})
	if a.idle() {
		t.Error("idle with a change not yet applied")
	}
	<-g.entered
	g.gate <- struct{}{}
	poll.Until(t, 10*time.Second, "applier idle after the change", a.idle)
}

func TestPathApplierRetriesAndReportsOncePerFailure(t *testing.T) {
	g := &gatedSpeaker{Fake: &bgp.Fake{}}
	var mu sync.Mutex
	var reports [][]string
	a := newPathApplier(g, quietLog(), func(_ context.Context, services []string, err error) {
		mu.Lock()
		defer mu.Unlock()
		reports = append(reports, services)
	})
	// Both are set before the first pass, so it reports both.
	g.failing.Store(true)
	a.set("ns/b", []bgp.Path{hostPath("198.51.100.11")})
	a.set("ns/a", []bgp.Path{hostPath("198.51.100.10")})
	startApplier(t, a)
	poll.Until(t, 10*time.Second, "three failed attempts", func() bool { return g.calls.Load() >= 3 })
	mu.Lock()
	if len(reports) != 1 || !slices.Equal(reports[0], []string{"ns/a", "ns/b"}) {
		t.Errorf("reports while failing = %v, want one naming ns/a and ns/b", reports)
	}
	mu.Unlock()

	g.failing.Store(false)
	poll.Until(t, 10*time.Second, "paths applied after recovery", func() bool { return len(g.Paths()) == 2 })

	g.failing.Store(true)
	a.set("ns/b", nil)
	poll.Until(t, 10*time.Second, "a second report", func() bool { mu.Lock(); defer mu.Unlock(); return len(reports) == 2 })
	mu.Lock()
	if !slices.Equal(reports[1], []string{"ns/b"}) {
		t.Errorf("second report = %v, want only the Service changed since the last success", reports[1])
	}
	mu.Unlock()
	g.failing.Store(false)
	poll.Until(t, 10*time.Second, "withdrawal applied", func() bool {
		ps := g.Paths()
		return len(ps) == 1 && ps[0].Prefix == hostPath("198.51.100.10").Prefix
	})
}

// TestPathApplierRefusedPathIsNotRetried: a path the speaker refuses (a
// reserved large community) does not hold back the other Services' paths,
// is reported once naming only its Service, and is not retried: a retry
// would refuse it again. Before, the whole pass failed and was retried
// forever, and every later change (withdrawals too) failed with it.
func TestPathApplierRefusedPathIsNotRetried(t *testing.T) {
	f := &bgp.Fake{}
	var reports [][]string
	a := newPathApplier(f, quietLog(), func(_ context.Context, services []string, err error) {
		if !errors.Is(err, bgp.ErrReservedCommunity) {
			t.Errorf("report error = %v, want the refusal", err)
		}
		reports = append(reports, services)
	})
	ctx := context.Background()
	bad := hostPath("198.51.100.10")
	bad.LargeCommunities = [][3]uint32{{bgp.ReservedLargeCommunityASN, 0, 0}}
	a.set("ns/bad", []bgp.Path{bad})
	a.set("ns/good", []bgp.Path{hostPath("198.51.100.11")})
	a.set("ns/gone", []bgp.Path{hostPath("198.51.100.12")})
	if err := a.pass(ctx); err != nil {
		t.Fatalf("pass with one refused path = %v, want nil (nothing to retry)", err)
	}
	a.set("ns/gone", nil)
	if err := a.pass(ctx); err != nil {
		t.Fatalf("pass withdrawing = %v", err)
	}
	if ps := f.Paths(); len(ps) != 1 || ps[0].Prefix != hostPath("198.51.100.11").Prefix {
		t.Errorf("speaker paths = %v, want only ns/good's", ps)
	}
	calls := f.Calls()
	if err := a.pass(ctx); err != nil || f.Calls() != calls {
		t.Errorf("pass without changes = %v with %d new SetPaths calls, want no call", err, f.Calls()-calls)
	}
	if len(reports) != 2 || !slices.Equal(reports[0], []string{"ns/bad"}) || !slices.Equal(reports[1], []string{"ns/bad"}) {
		t.Errorf("reports = %v, want ns/bad once per applied change", reports)
	}
}

// TestHeraldAnnotationsChanged: a changed herald.io/weighted-ecmp on a
// BGPAdvertisement reloads the configuration (it does not change the
// generation); other annotation changes do not.
func TestHeraldAnnotationsChanged(t *testing.T) {
	ad := func(ann map[string]string) *v1beta1.BGPAdvertisement {
		return &v1beta1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "a", Annotations: ann}}
	}
	for _, tc := range []struct {
		old, new map[string]string
		want     bool
	}{
		{old: nil, new: map[string]string{"herald.io/weighted-ecmp": "true"}, want: true},
		{old: map[string]string{"herald.io/weighted-ecmp": "true"}, new: nil, want: true},
		{old: map[string]string{"herald.io/weighted-ecmp": "true"}, new: map[string]string{"herald.io/weighted-ecmp": "false"}, want: true},
		{old: map[string]string{"herald.io/weighted-ecmp": "true"}, new: map[string]string{"herald.io/weighted-ecmp": "true", "x": "1"}},
		{old: nil, new: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
	} {
		if got := heraldAnnotationsChanged(event.UpdateEvent{ObjectOld: ad(tc.old), ObjectNew: ad(tc.new)}); got != tc.want {
			t.Errorf("%v -> %v: %v, want %v", tc.old, tc.new, got, tc.want)
		}
	}
}

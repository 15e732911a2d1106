package speaker

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/herald-lb/herald/internal/announce"
	"github.com/herald-lb/herald/internal/config"
)

// keyBalance is the special key of the balanced layer 2 election's
// debounced recompute (Options.BalancedL2).
const keyBalance = "l2balance"

// DefaultBalanceDelay is how long a Service or EndpointSlice event waits,
// with Options.BalancedL2, for others before the winners are recomputed
// (Options.BalanceDelay): a burst of events costs one recompute per delay,
// not one per event.
const DefaultBalanceDelay = 100 * time.Millisecond

// balancedState is the glue of the balanced layer 2 election
// (announce.ElectBalancedServices). With it, Service and EndpointSlice
// events do not decide their Service at once: they record its key in
// pending and schedule keyBalance after the delay. That pass recomputes
// the winners over every Service, then decides the pending Services and
// those holding an address whose winner changed (announce
// BalancedElection.Redecide), and no other: an address whose winner stayed
// is neither re-announced nor has its status rewritten. Node, liveness,
// interface and configuration changes go through reconcileAll, which
// recomputes first and decides every Service, without delay (a failover
// is not debounced).
type balancedState struct {
	delay time.Duration

	mu      sync.Mutex
	pending map[string]bool // Service keys whose own inputs changed
	// known: the keys of the Services holding an address at the last
	// recompute (a Service that changes from LoadBalancer to another type
	// must still be decided, to withdraw).
	known map[string]bool

	// Touched only by the reconcile worker.
	election *announce.BalancedElection // last run, nil before the first
	lastCost time.Duration              // of the last recompute

	// recomputes counts completed recomputes (tests wait on it).
	recomputes atomic.Uint64
}

func newBalancedState(delay time.Duration) *balancedState {
	if delay <= 0 {
		delay = DefaultBalanceDelay
	}
	return &balancedState{delay: delay, pending: map[string]bool{}}
}

// eventHandler returns the handler of a watch whose events map to Service
// keys with mapFn: without the balanced election, mapFn's requests are
// queued (each Service decided on its own); with it, they are recorded as
// pending and one recompute is scheduled.
func (s *Controller) eventHandler(mapFn handler.MapFunc) handler.EventHandler {
	if s.balanced == nil {
		return handler.EnqueueRequestsFromMapFunc(mapFn)
	}
	b := s.balanced
	add := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], objs ...client.Object) {
		var keys []string
		for _, o := range objs {
			for _, r := range mapFn(ctx, o) {
				if s.mayAnnounce(ctx, r.NamespacedName) {
					keys = append(keys, r.String())
				}
			}
		}
		if len(keys) == 0 {
			return // no Service that can hold a layer 2 address: no recompute
		}
		b.addPending(keys...)
		// A key already waiting keeps its earlier time: the delay bounds
		// the latency of the first event of a burst.
		q.AddAfter(special(keyBalance), b.delay)
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q, e.Object)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q, e.ObjectOld, e.ObjectNew)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q, e.Object)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q, e.Object)
		},
	}
}

// mayAnnounce reports whether the Service key may hold an announced
// address or did: it is not in the cache (deleted: what it announced is
// withdrawn), it is of type LoadBalancer, or this speaker has state for it.
// Events of other Services (ClusterIP Services and their EndpointSlices,
// most of a cluster's churn) then cost no recompute.
func (s *Controller) mayAnnounce(_ context.Context, key types.NamespacedName) bool {
	svc, err := s.service(key.String())
	if err != nil || svc == nil || svc.svc.LoadBalancer {
		return true
	}
	s.balanced.mu.Lock()
	defer s.balanced.mu.Unlock()
	return s.balanced.known[key.String()]
}

// takePending returns and clears the pending Service keys.
func (b *balancedState) takePending() map[string]bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.pending
	b.pending = map[string]bool{}
	return p
}

func (b *balancedState) addPending(keys ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range keys {
		b.pending[k] = true
	}
}

// l2Winners is Input.L2Winners: the last balanced winners, nil without the
// balanced election. Before the first recompute it is empty (not nil), so
// Decide's fallback, the plain ranking's first, applies to every address.
func (s *Controller) l2Winners() map[netip.Addr]string {
	if s.balanced == nil {
		return nil
	}
	if s.balanced.election == nil {
		return map[netip.Addr]string{}
	}
	return s.balanced.election.Winners
}

// recomputeBalanced runs the balanced election over svcs (every Service in
// the cache) with the inputs every speaker shares (configuration, Nodes,
// live members, endpoints), stores it, and returns the keys whose Services
// hold an address whose winner changed. Only LoadBalancer Services of our
// class are read further (their EndpointSlices, from the cache index).
func (s *Controller) recomputeBalanced(ctx context.Context, snap *config.Snapshot, view *clusterView, svcs []*serviceRecord) ([]string, error) {
	b := s.balanced
	start := time.Now()
	services := make([]announce.SharedService, 0, len(svcs))
	for _, o := range svcs {
		sv := o.svc
		if !sv.LoadBalancer || sv.LoadBalancerClass != s.opts.Announce.LoadBalancerClass || len(sv.IPs) == 0 {
			continue
		}
		eps, err := s.endpoints(ctx, o.namespace, o.name)
		if err != nil {
			return nil, err
		}
		services = append(services, announce.SharedService{Service: sv, Endpoints: eps})
	}
	base := announce.Input{Config: snap, Node: s.opts.NodeName, Nodes: view.nodes, Live: view.live, Options: s.opts.Announce}
	next, err := announce.ElectBalancedServices(base, services)
	if err != nil {
		return nil, fmt.Errorf("balanced layer 2 election: %w", err)
	}
	redo := next.Redecide(b.election)
	var moved []netip.Addr
	if b.election != nil {
		moved = announce.WinnerChanges(b.election.Winners, next.Winners)
	}
	b.election = &next
	known := map[string]bool{}
	for _, hs := range next.Holders {
		for _, k := range hs {
			known[k] = true
		}
	}
	b.mu.Lock()
	b.known = known
	b.mu.Unlock()
	b.recomputes.Add(1)
	b.lastCost = time.Since(start)
	mine := next.Loads()[s.opts.NodeName]
	s.log.Debug("balanced layer 2 election recomputed", "addresses", len(next.Winners), "services", len(services),
		"moved", len(moved), "redecide", len(redo), "ownAddresses", mine,
		"capacity", announce.BalancedCapacity(len(next.Winners), len(next.Loads())), "duration", b.lastCost)
	return redo, nil
}

// reconcileBalanced is the debounced pass of the balanced election: it
// recomputes the winners, then decides the pending Services and those whose
// address changed winner. A Service that fails is pending again, and the
// error requeues the pass (with the controller's backoff).
func (s *Controller) reconcileBalanced(ctx context.Context) (reconcile.Result, error) {
	snap := s.tracker.Current()
	if snap == nil {
		return reconcile.Result{}, nil // the first configuration's reconcileAll decides everything
	}
	pending := s.balanced.takePending()
	view, err := s.clusterView(ctx)
	if err != nil {
		s.balanced.addPending(keysOf(pending)...)
		return reconcile.Result{}, err
	}
	// The cached records, read only: no copy of every Service per pass.
	redo, err := s.recomputeBalanced(ctx, snap, view, s.allServices())
	if err != nil {
		s.balanced.addPending(keysOf(pending)...)
		return reconcile.Result{}, err
	}
	for _, k := range redo {
		pending[k] = true
	}
	var res reconcile.Result
	var errs []error
	for _, k := range keysOf(pending) {
		r, err := s.reconcileService(ctx, snap, view, k, nil)
		if err != nil {
			s.balanced.addPending(k)
			errs = append(errs, err)
			continue
		}
		if r.RequeueAfter > 0 {
			s.balanced.addPending(k)
			if res.RequeueAfter == 0 || r.RequeueAfter < res.RequeueAfter {
				res.RequeueAfter = r.RequeueAfter
			}
		}
	}
	return res, errors.Join(errs...)
}

func keysOf(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

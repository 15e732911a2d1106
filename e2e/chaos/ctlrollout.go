package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/e2e/lab"
)

// ControllerRolloutOptions shapes the controller rollout scenario.
type ControllerRolloutOptions struct {
	// Rounds of two rollouts each (first replica to second, then back);
	// 0 means 3.
	Rounds int
	// Services is the size of the burst, spread over the rollouts; 0
	// means 1000.
	Services int
	// Workers create Services in parallel; 0 means 4.
	Workers int
	// Pool is the scenario pool's prefix (no advertisement); zero means
	// 2001:db8:c4a1::/116.
	Pool string
	// SurgeNode is the node of the second replica's Pod; "" means the
	// lab's second node.
	SurgeNode string
	// Timeout bounds the wait for every Service's address at the end; 0
	// means 5 min.
	Timeout time.Duration
}

func (o *ControllerRolloutOptions) defaults() {
	if o.Rounds == 0 {
		o.Rounds = 3
	}
	if o.Services == 0 {
		o.Services = 1000
	}
	if o.Workers == 0 {
		o.Workers = 4
	}
	if o.Pool == "" {
		o.Pool = "2001:db8:c4a1::/116"
	}
	if o.SurgeNode == "" {
		o.SurgeNode = lab.NodeName(2)
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
}

// ScenarioControllerRollout names the controller rollout scenario in the
// table.
const ScenarioControllerRollout = "controller rollout overlapping a burst"

// ControllerRollout plays surge rollouts of the controller Deployment
// during a burst of IPv6 LoadBalancer Services: a new replica starts
// beside the running one (lab.Herald.StartSurgeController: same template,
// ports of its own), Services are created while both run, then the old
// one is stopped (SIGTERM) while more are created. Each round does it
// twice: to the second replica, then back to the first. Leader election
// decides which of the two allocates. A watch on the Services from before
// the first create counts, as in ControllerKills:
//
//   - duplicates: addresses held by two Services at one moment;
//   - flaps: Services whose address, once assigned, was ever different
//     or removed.
//
// Both targets are 0. The first replica runs again at the end.
func ControllerRollout(ctx context.Context, e *Env, o ControllerRolloutOptions) (res Result, err error) {
	o.defaults()
	res = Result{Scenario: ScenarioControllerRollout, Form: fmt.Sprintf("%d rollouts, %d Services", 2*o.Rounds, o.Services)}
	c := e.Herald.Client()
	k := e.Lab.Client()
	pool := &v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: burstNS, Namespace: lab.HeraldNamespace},
		Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{o.Pool}, AutoAssign: ptr.To(false)}}
	if err := c.Create(ctx, pool); err != nil && !apierrors.IsAlreadyExists(err) {
		return res, fmt.Errorf("%s: create pool: %w", ScenarioControllerRollout, err)
	}
	if err := e.Lab.EnsureNamespace(ctx, burstNS); err != nil {
		return res, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
		defer cancel()
		// Whatever happened, leave the first replica running alone.
		if e.Herald.Controller() == nil {
			if derr := e.Herald.StartController(dctx); derr != nil {
				err = errors.Join(err, derr)
			}
		}
		if derr := e.Herald.StopSurgeController(dctx, o.SurgeNode); derr != nil && !apierrors.IsNotFound(errors.Unwrap(derr)) {
			err = errors.Join(err, derr)
		}
		if derr := deleteServices(dctx, e, burstNS, o.Workers); derr != nil {
			err = errors.Join(err, derr)
		}
		if derr := c.Delete(dctx, pool); derr != nil && !apierrors.IsNotFound(derr) {
			err = errors.Join(err, derr)
		}
	}()
	list, err := k.CoreV1().Services(burstNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return res, err
	}
	if len(list.Items) > 0 {
		return res, fmt.Errorf("%s: namespace %s is not empty", ScenarioControllerRollout, burstNS)
	}
	aw, err := watchAllocations(ctx, e, burstNS, list.ResourceVersion)
	if err != nil {
		return res, err
	}
	defer aw.stop()

	names := make([]string, o.Services)
	for i := range names {
		names[i] = fmt.Sprintf("r%04d", i)
	}
	// Two chunks per rollout: one while both replicas run, one during
	// which the old replica stops.
	chunks := 4 * o.Rounds
	chunk := (o.Services + chunks - 1) / chunks
	next := 0
	bounds := func() (lo, hi int) { return min(next*chunk, o.Services), min((next+1)*chunk, o.Services) }
	create := func() error {
		lo, hi := bounds()
		next++
		return createServices(ctx, e, names[lo:hi], o.Workers)
	}
	var stoppedAt []int // Services of the chunk with an address at each stop
	// during creates the next chunk and runs action while it is being
	// allocated: once the watch has seen a quarter of it get an address.
	during := func(action func() error) error {
		lo, hi := bounds()
		created := make(chan error, 1)
		go func() { created <- create() }()
		at, werr := waitAssigned(ctx, &aw.mu, aw.tr.assigned, midChunk(lo, hi), fmt.Sprintf("chunk %d-%d being allocated", lo, hi))
		if werr != nil {
			return errors.Join(werr, <-created)
		}
		stoppedAt = append(stoppedAt, at-lo)
		aerr := action()
		return errors.Join(aerr, <-created)
	}
	lease := func() string {
		l, err := k.CoordinationV1().Leases(lab.HeraldNamespace).Get(ctx, "herald-controller", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return fmt.Sprintf("none (%v)", err)
		}
		return *l.Spec.HolderIdentity
	}
	for round := range o.Rounds {
		// First replica -> second.
		if _, err := e.Herald.StartSurgeController(ctx, o.SurgeNode); err != nil {
			return res, fmt.Errorf("%s: round %d: %w", ScenarioControllerRollout, round+1, err)
		}
		if err := create(); err != nil {
			return res, fmt.Errorf("%s: %w", ScenarioControllerRollout, err)
		}
		holder := lease()
		if err := during(e.Herald.StopController); err != nil {
			return res, fmt.Errorf("%s: round %d: stop the first replica: %w", ScenarioControllerRollout, round+1, err)
		}
		after := lease()
		// Second replica -> first.
		if err := e.Herald.StartController(ctx); err != nil {
			return res, fmt.Errorf("%s: round %d: %w", ScenarioControllerRollout, round+1, err)
		}
		if err := create(); err != nil {
			return res, fmt.Errorf("%s: %w", ScenarioControllerRollout, err)
		}
		holder2 := lease()
		if err := during(func() error { return e.Herald.StopSurgeController(ctx, o.SurgeNode) }); err != nil {
			return res, fmt.Errorf("%s: round %d: stop the second replica: %w", ScenarioControllerRollout, round+1, err)
		}
		after2 := lease()
		res.Notes = append(res.Notes, fmt.Sprintf("round %d: Lease holder with both running %s, once the old one stopped %s; on the way back %s, then %s",
			round+1, holder, after, holder2, after2))
		e.log().Info("controller rolled out and back", "round", round+1, "services", min(next*chunk, o.Services))
	}
	start := time.Now()
	if err := waitAllAllocated(ctx, e, o.Services, o.Timeout); err != nil {
		return res, fmt.Errorf("%s: %w", ScenarioControllerRollout, err)
	}
	res.Notes = append(res.Notes, fmt.Sprintf("Services of the chunk with an address at each stop (chunk of %d): %v", chunk, stoppedAt))
	res.Notes = append(res.Notes, fmt.Sprintf("every Service had its address %.1f s after the last rollout", time.Since(start).Seconds()))
	// Watch a little longer: a late rewrite by a stale writer would show
	// now (observation window, not a wait for a condition).
	time.Sleep(3 * time.Second)
	dups, changed := aw.stop()
	if len(dups) > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("duplicated: %v", firstN(dups)))
	}
	if len(changed) > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("flapped: %v", firstN(changed)))
	}
	res.Rows = []Row{
		countRow(ScenarioControllerRollout, "addresses held by two Services at once (seen by a watch)", len(dups), 0),
		countRow(ScenarioControllerRollout, "Services whose address changed after its first assignment (flaps)", len(changed), o.Services),
	}
	return res, nil
}

// allocWatch follows the Services of one namespace with a watch (see
// watchAllocations).
type allocWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	tr     *allocTracker
	once   sync.Once
	dups   []string
	chg    []string
}

// watchAllocations starts a retrying watch on namespace ns's Services
// from resourceVersion rv, feeding an allocTracker; stop ends it.
func watchAllocations(ctx context.Context, e *Env, ns, rv string) (*allocWatch, error) {
	k := e.Lab.Client()
	wctx, cancel := context.WithCancel(ctx)
	rw, err := watchtools.NewRetryWatcherWithContext(wctx, rv, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return k.CoreV1().Services(ns).Watch(ctx, opts)
		}})
	if err != nil {
		cancel()
		return nil, err
	}
	aw := &allocWatch{cancel: cancel, done: make(chan struct{}), tr: newAllocTracker()}
	go func() {
		defer close(aw.done)
		defer rw.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case ev, ok := <-rw.ResultChan():
				if !ok {
					return
				}
				svc, ok := ev.Object.(*corev1.Service)
				if !ok {
					continue
				}
				key := svc.Namespace + "/" + svc.Name
				aw.mu.Lock()
				if ev.Type == watch.Deleted {
					aw.tr.remove(key)
				} else {
					aw.tr.observe(key, ingressIPs(svc))
				}
				aw.mu.Unlock()
			}
		}
	}()
	return aw, nil
}

// stop ends the watch (once) and returns the duplicated addresses and
// the changed Services it saw.
func (aw *allocWatch) stop() (dups, changed []string) {
	aw.once.Do(func() {
		aw.cancel()
		<-aw.done
		aw.mu.Lock()
		aw.dups, aw.chg = aw.tr.duplicates(), aw.tr.changedServices()
		aw.mu.Unlock()
	})
	return aw.dups, aw.chg
}

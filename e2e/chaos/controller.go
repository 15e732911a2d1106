package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/e2e/lab"
	"github.com/herald-lb/herald/internal/poll"
)

// BurstOptions shapes the controller-kill scenario.
type BurstOptions struct {
	// Services is the size of the burst; 0 means 1000.
	Services int
	// Kills is the number of controller SIGKILLs during it; 0 means 20.
	Kills int
	// Workers create Services in parallel; 0 means 4.
	Workers int
	// Pool is the scenario pool's prefix (no advertisement: nothing is
	// announced); zero means 2001:db8:c4a0::/116 (4096 addresses).
	Pool string
	// Timeout bounds the wait for every Service's address after the last
	// kill; 0 means 5 min.
	Timeout time.Duration
}

func (o *BurstOptions) defaults() {
	if o.Services == 0 {
		o.Services = 1000
	}
	if o.Kills == 0 {
		o.Kills = 20
	}
	if o.Workers == 0 {
		o.Workers = 4
	}
	if o.Pool == "" {
		o.Pool = "2001:db8:c4a0::/116"
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
}

// ScenarioBurst names the controller-kill scenario in the table.
const ScenarioBurst = "controller kills during a burst"

const burstNS = "chaos-burst"

// ControllerKills creates o.Services IPv6 LoadBalancer Services in o.Kills
// chunks and SIGKILLs the controller while each chunk is being created
// (then starts it again and waits until its webhook answers), then waits
// until every Service has an address. A watch on the Services from before
// the first create sees every state the API server stored; it counts:
//
//   - duplicate addresses: addresses held by two Services at one moment;
//   - changed addresses: Services whose addresses, once assigned, were
//     ever different (another address, or none).
//
// Both targets are 0.
func ControllerKills(ctx context.Context, e *Env, o BurstOptions) (res Result, err error) {
	o.defaults()
	res = Result{Scenario: ScenarioBurst, Form: fmt.Sprintf("%d kills, %d Services", o.Kills, o.Services)}
	c := e.Herald.Client()
	k := e.Lab.Client()
	pool := &v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: burstNS, Namespace: lab.HeraldNamespace},
		Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{o.Pool}, AutoAssign: ptr.To(false)}}
	if err := c.Create(ctx, pool); err != nil && !apierrors.IsAlreadyExists(err) {
		return res, fmt.Errorf("%s: create pool: %w", ScenarioBurst, err)
	}
	if err := e.Lab.EnsureNamespace(ctx, burstNS); err != nil {
		return res, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
		defer cancel()
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
		return res, fmt.Errorf("%s: namespace %s is not empty", ScenarioBurst, burstNS)
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	rw, err := watchtools.NewRetryWatcherWithContext(wctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return k.CoreV1().Services(burstNS).Watch(ctx, opts)
		}})
	if err != nil {
		return res, err
	}
	tr := newAllocTracker()
	watched := make(chan struct{})
	var trMu sync.Mutex
	go func() {
		defer close(watched)
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
				trMu.Lock()
				if ev.Type == watch.Deleted {
					tr.remove(key)
				} else {
					tr.observe(key, ingressIPs(svc))
				}
				trMu.Unlock()
			}
		}
	}()

	names := make([]string, o.Services)
	for i := range names {
		names[i] = fmt.Sprintf("b%04d", i)
	}
	chunk := (o.Services + o.Kills - 1) / o.Kills
	killedAt := make([]int, o.Kills) // Services of the chunk with an address at the kill
	for kill := range o.Kills {
		lo, hi := min(kill*chunk, o.Services), min((kill+1)*chunk, o.Services)
		created := make(chan error, 1)
		go func() { created <- createServices(ctx, e, names[lo:hi], o.Workers) }()
		// Kill while the chunk is being allocated: once the watch has seen
		// a quarter of it get an address.
		at, werr := waitAssigned(ctx, &trMu, tr.assigned, midChunk(lo, hi), fmt.Sprintf("kill %d: chunk %d-%d being allocated", kill+1, lo, hi))
		if werr != nil {
			<-created
			return res, fmt.Errorf("%s: %w", ScenarioBurst, werr)
		}
		killedAt[kill] = at - lo
		if err := e.Herald.KillController(); err != nil {
			<-created
			return res, fmt.Errorf("%s: kill %d: %w", ScenarioBurst, kill+1, err)
		}
		if err := <-created; err != nil {
			return res, fmt.Errorf("%s: %w", ScenarioBurst, err)
		}
		if err := e.Herald.StartController(ctx); err != nil {
			return res, fmt.Errorf("%s: restart %d: %w", ScenarioBurst, kill+1, err)
		}
		e.log().Info("controller killed and back", "kill", kill+1, "services", hi)
	}
	start := time.Now()
	if err := waitAllAllocated(ctx, e, o.Services, o.Timeout); err != nil {
		return res, fmt.Errorf("%s: %w", ScenarioBurst, err)
	}
	res.Notes = append(res.Notes, fmt.Sprintf("Services of the chunk with an address at each kill (chunk of %d): %v", chunk, killedAt))
	res.Notes = append(res.Notes, fmt.Sprintf("every Service had its address %.1f s after the last restart", time.Since(start).Seconds()))
	// Watch a little longer: a late rewrite by a stale writer would show
	// now (observation window, not a wait for a condition).
	time.Sleep(3 * time.Second)
	stopWatch()
	<-watched
	trMu.Lock()
	dups, changed := tr.duplicates(), tr.changedServices()
	trMu.Unlock()
	if len(dups) > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("duplicated: %v", firstN(dups)))
	}
	if len(changed) > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("changed: %v", firstN(changed)))
	}
	res.Rows = []Row{
		countRow(ScenarioBurst, "addresses held by two Services at once (seen by a watch)", len(dups), 0),
		countRow(ScenarioBurst, "Services whose address changed after its first assignment", len(changed), o.Services),
	}
	return res, nil
}

// firstN shortens a list for a result note to its first n entries and a
// count of the rest.
func firstN(ss []string) []string {
	const n = 10
	if len(ss) > n {
		return append(ss[:n:n], fmt.Sprintf("... (%d more)", len(ss)-n))
	}
	return ss
}

func ingressIPs(svc *corev1.Service) []string {
	var ips []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP != "" {
			ips = append(ips, in.IP)
		}
	}
	sort.Strings(ips)
	return ips
}

// createServices creates IPv6 single-stack LoadBalancer Services in
// burstNS asking for the burst pool, with workers in parallel.
func createServices(ctx context.Context, e *Env, names []string, workers int) error {
	k := e.Lab.Client()
	work := make(chan string)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range workers {
		wg.Go(func() {
			for n := range work {
				svc := lbService(burstNS, n, burstNS)
				svc.Spec.Selector = nil
				svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
				if _, err := k.CoreV1().Services(burstNS).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					mu.Lock()
					errs = append(errs, fmt.Errorf("create service %s/%s: %w", burstNS, n, err))
					mu.Unlock()
				}
			}
		})
	}
	for _, n := range names {
		work <- n
	}
	close(work)
	wg.Wait()
	return errors.Join(errs...)
}

// deleteServices deletes every Service of namespace ns.
func deleteServices(ctx context.Context, e *Env, ns string, workers int) error {
	k := e.Lab.Client()
	list, err := k.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	work := make(chan string)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range workers {
		wg.Go(func() {
			for n := range work {
				if err := k.CoreV1().Services(ns).Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, s := range list.Items {
		work <- s.Name
	}
	close(work)
	wg.Wait()
	return errors.Join(errs...)
}

// waitAllAllocated waits until n Services of burstNS have an address.
func waitAllAllocated(ctx context.Context, e *Env, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var l corev1.ServiceList
		err := e.Herald.Client().List(ctx, &l, client.InNamespace(burstNS))
		have := 0
		if err == nil {
			for _, s := range l.Items {
				if len(ingressIPs(&s)) > 0 {
					have++
				}
			}
			if have >= n {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%d of %d Services have an address after %s (%v)", have, n, timeout, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// allocTracker follows the addresses of Services through a watch's events
// (in the order the API server stored them).
type allocTracker struct {
	current map[string][]string        // Service -> its addresses now
	first   map[string][]string        // Service -> its first non-empty addresses
	holders map[string]map[string]bool // address -> Services holding it now
	dup     map[string]bool            // addresses ever held by two Services at once
	changed map[string]bool            // Services whose addresses left their first assignment
}

func newAllocTracker() *allocTracker {
	return &allocTracker{current: map[string][]string{}, first: map[string][]string{},
		holders: map[string]map[string]bool{}, dup: map[string]bool{}, changed: map[string]bool{}}
}

// observe records that Service svc now holds ips (sorted).
func (t *allocTracker) observe(svc string, ips []string) {
	for _, a := range t.current[svc] {
		delete(t.holders[a], svc)
	}
	t.current[svc] = ips
	for _, a := range ips {
		if t.holders[a] == nil {
			t.holders[a] = map[string]bool{}
		}
		t.holders[a][svc] = true
		if len(t.holders[a]) > 1 {
			t.dup[a] = true
		}
	}
	if f, ok := t.first[svc]; ok {
		if !slices.Equal(f, ips) {
			t.changed[svc] = true
		}
	} else if len(ips) > 0 {
		t.first[svc] = ips
	}
}

// remove records that Service svc is gone.
func (t *allocTracker) remove(svc string) {
	for _, a := range t.current[svc] {
		delete(t.holders[a], svc)
	}
	delete(t.current, svc)
}

func (t *allocTracker) duplicates() []string { return sortedKeys(t.dup) }

// assigned is the number of Services that ever had an address.
func (t *allocTracker) assigned() int { return len(t.first) }

// midChunkTimeout bounds the wait for the first addresses of a chunk
// before a scenario's kill or stop.
const midChunkTimeout = time.Minute

// midChunk is how many Services, counted from the scenario's start, have
// an address once a chunk [lo, hi) is being allocated: lo and a quarter of
// the chunk (at least one). A scenario acts (kills or stops the allocating
// controller) when the watch has seen that many, so that the action falls
// while the chunk is being allocated and not before or after it, whatever
// the machine's load.
func midChunk(lo, hi int) int { return lo + max(1, (hi-lo)/4) }

// waitAssigned waits until assigned() reaches n (a wait on the watch, the
// signal the scenario acts on) and returns how many were assigned then.
func waitAssigned(ctx context.Context, mu *sync.Mutex, assigned func() int, n int, what string) (int, error) {
	got := 0
	_, err := poll.Wait(ctx, midChunkTimeout, what, func() error {
		mu.Lock()
		got = assigned()
		mu.Unlock()
		if got < n {
			return fmt.Errorf("%d Services with an address, want %d", got, n)
		}
		return nil
	})
	return got, err
}

func (t *allocTracker) changedServices() []string { return sortedKeys(t.changed) }

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

package allocation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/annotations"
	"github.com/herald-lb/herald/internal/config"
	"github.com/herald-lb/herald/internal/ipam"
	"github.com/herald-lb/herald/internal/k8s/apiretry"
	"github.com/herald-lb/herald/internal/k8s/configload"
	"github.com/herald-lb/herald/internal/k8s/eventrec"
	"github.com/herald-lb/herald/internal/svcstate"
)

// DefaultWorkers is the number of concurrent Service workers when
// Options.Workers is 0.
const DefaultWorkers = 8

// configItem is the only item of the configuration queue: every
// configuration event collapses into one reload. retryItem is the only item
// of the retry queue: every wake-up collapses into one ordered pass.
const (
	configItem = "config"
	retryItem  = "retry"
)

// Options configure a Controller. Client, Cache and Namespace are required.
type Options struct {
	// Client writes Service status and annotations (and ConfigurationState
	// through Reporter). Reads go to Cache.
	Client client.Client
	// Cache is the manager's informer cache: Services, Namespaces and Nodes
	// cluster-wide, Herald's CRs and Secrets in Namespace.
	Cache cache.Cache
	// APIReader reads from the API server itself (the manager's
	// GetAPIReader): the import of every existing assignment when the
	// controller starts (so a new leader sees every write of the previous
	// one, also those its cache has not delivered yet) and the re-read
	// after a status write lost a resourceVersion conflict. nil reads
	// from Cache.
	APIReader client.Reader
	// Recorder emits Service and configuration events (eventrec.For):
	// those of the low-priority queue wait for room in its queue, the
	// others are dropped and counted when it is full. nil emits none.
	Recorder *eventrec.Recorder
	// Log receives the controller's logs; nil discards them. The caller
	// names the part (logging.KeySubsystem "serviceip"): the package adds
	// no identity key.
	Log *slog.Logger
	// PoolStatusLog receives the pool status writer's logs (the caller
	// names it, logging.KeySubsystem "poolstatus"); nil: Log.
	PoolStatusLog *slog.Logger
	// Namespace is Herald's namespace (configuration objects).
	Namespace string
	// LBClass is --lb-class: only Services of this loadBalancerClass are
	// handled ("" = only Services without a class).
	LBClass string
	// Workers is the number of concurrent Service workers (DefaultWorkers
	// when 0).
	Workers int
	// Reporter writes the ConfigurationState "controller"; nil writes none.
	// Its Client must read from the API server, not from the cache: it
	// creates the object and reads it back at once.
	Reporter *configload.Reporter
	// ConfigMetrics are the metallb_k8s_client_* metrics; nil records none.
	ConfigMetrics *configload.Metrics
	// ConfigMetricsRegisterer, when set, receives ConfigMetrics when the
	// controller starts (on the leader only: see NeedLeaderElection), so a
	// standby exports none of them. Nil: ConfigMetrics are registered by
	// the caller.
	ConfigMetricsRegisterer prometheus.Registerer
	// Registerer receives herald_allocation_duration_seconds,
	// herald_services_pending, herald_service_status_write_errors_total and
	// the metallb_allocator_* pool gauges; nil registers nothing.
	Registerer prometheus.Registerer
	// PoolStatusDelay is the debounce delay of the pool counters' writes
	// (IPAddressPool status, metallb_allocator_*): at most one per delay
	// (DefaultPoolStatusDelay when 0).
	PoolStatusDelay time.Duration
}

// Controller is the Service IP reconcile loop. Create it with New and run it
// with Start (it is a controller-runtime manager.Runnable).
type Controller struct {
	opts    Options
	log     *slog.Logger
	alloc   *ipam.Allocator
	tracker *configload.Tracker
	metrics *metrics
	// pools publishes alloc's per-pool counters while the loop runs.
	pools *poolStatusWriter

	svcQueue  workqueue.TypedRateLimitingInterface[string]
	annQueue  workqueue.TypedRateLimitingInterface[string]
	confQueue workqueue.TypedRateLimitingInterface[string]
	// retryQueue serialises re-allocation of Services competing for
	// freed addresses, in key order, so the outcome never depends on which
	// worker runs first (MetalLB issue 8).
	retryQueue workqueue.TypedRateLimitingInterface[string]

	initialized atomic.Bool
	// busy counts items being processed, across all queues.
	busy atomic.Int64

	// book is the per-Service state and its decisions (pending,
	// reassess, import conflicts, clear reasons, retry order).
	book *svcstate.Book

	// lastAdd is when the last Service was created (UnixNano), to detect
	// bursts.
	lastAdd atomic.Int64
	// svcDrained is signalled when a worker takes the last queued
	// Service (yield waits for it).
	svcDrained signal

	// mu guards deferred, annSince and lastRej.
	mu sync.Mutex
	// deferred are Service events waiting for the low-priority queue, by
	// key, in the order they were decided.
	deferred map[string][]dueEvent
	// annSince: when a key entered the low-priority queue.
	annSince map[string]time.Time
	lastRej  string // text of the last rejected configuration reported by event
}

// New builds a Controller. It registers its metrics on opts.Registerer.
func New(opts Options) (*Controller, error) {
	if opts.Client == nil || opts.Cache == nil {
		return nil, errors.New("allocation: Client and Cache are required")
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	c := &Controller{
		opts:  opts,
		log:   log,
		alloc: ipam.New(),
	}
	poolLog := opts.PoolStatusLog
	if poolLog == nil {
		poolLog = log
	}
	if c.pools, err = newPoolStatus(poolStatusOptions{
		Client: opts.Client, Reader: opts.Cache, Namespace: opts.Namespace, Stats: c.alloc.Stats,
		Delay: opts.PoolStatusDelay, Log: poolLog, Registerer: opts.Registerer,
	}); err != nil {
		return nil, err
	}
	rl := apiretry.NewWriteRateLimiter[string]
	// DropTransient: a BGPPeer or BGPAdvertisement with a transient
	// reference (a missing password Secret) is left out and reported,
	// never blocking allocation, which does not depend on either.
	c.tracker = configload.NewTracker(config.Options{Namespace: opts.Namespace, DropTransient: true}, false)
	c.metrics = m
	c.svcQueue = workqueue.NewTypedRateLimitingQueueWithConfig(rl(), workqueue.TypedRateLimitingQueueConfig[string]{Name: "serviceip"})
	c.annQueue = workqueue.NewTypedRateLimitingQueueWithConfig(rl(), workqueue.TypedRateLimitingQueueConfig[string]{Name: "serviceip_annotation"})
	c.confQueue = workqueue.NewTypedRateLimitingQueueWithConfig(rl(), workqueue.TypedRateLimitingQueueConfig[string]{Name: "serviceip_config"})
	c.retryQueue = workqueue.NewTypedRateLimitingQueueWithConfig(rl(), workqueue.TypedRateLimitingQueueConfig[string]{Name: "serviceip_retry"})
	c.book = svcstate.New()
	c.deferred = map[string][]dueEvent{}
	c.annSince = map[string]time.Time{}
	return c, nil
}

// NeedLeaderElection makes the manager start the loop only on the leader.
func (c *Controller) NeedLeaderElection() bool { return true }

// Start runs the loop until ctx ends: it installs the event handlers, waits
// for the cache to sync, loads the configuration, imports every existing
// assignment and then serves Service events; the pool status writer runs
// alongside. It returns nil on shutdown.
func (c *Controller) Start(ctx context.Context) error {
	defer c.svcQueue.ShutDown()
	defer c.annQueue.ShutDown()
	defer c.confQueue.ShutDown()
	defer c.retryQueue.ShutDown()
	if m, reg := c.opts.ConfigMetrics, c.opts.ConfigMetricsRegisterer; m != nil && reg != nil {
		if err := m.Register(reg); err != nil {
			return fmt.Errorf("register metallb_k8s_client metrics: %w", err)
		}
	}
	if err := c.installHandlers(ctx); err != nil {
		return err
	}
	if !c.opts.Cache.WaitForCacheSync(ctx) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("allocation: cache did not sync")
	}
	c.confQueue.Add(configItem)

	var wg sync.WaitGroup
	wg.Go(func() { c.pools.start(ctx) })
	wg.Go(func() { c.run(ctx, c.confQueue, c.syncConfig, nil) })
	wg.Go(func() { c.run(ctx, c.retryQueue, c.retryPass, nil) })
	for range c.opts.Workers {
		wg.Go(func() { c.run(ctx, c.svcQueue, c.reconcile, nil) })
	}
	for range 2 {
		wg.Go(func() { c.run(ctx, c.annQueue, c.syncSecondary, c.yield) })
	}
	<-ctx.Done()
	c.svcQueue.ShutDown()
	c.annQueue.ShutDown()
	c.confQueue.ShutDown()
	c.retryQueue.ShutDown()
	wg.Wait()
	return nil
}

// run processes q until it shuts down. A failed item is retried with
// exponential backoff.
func (c *Controller) run(ctx context.Context, q workqueue.TypedRateLimitingInterface[string],
	fn func(context.Context, string) error, before func(context.Context, string)) {
	for {
		key, shutdown := q.Get()
		if shutdown {
			return
		}
		if q == c.svcQueue && q.Len() == 0 {
			c.svcDrained.broadcast() // low-priority work may go (yield)
		}
		c.busy.Add(1)
		if before != nil {
			before(ctx, key)
		}
		err := fn(ctx, key)
		switch {
		case err == nil:
			q.Forget(key)
		case ctx.Err() != nil:
		case apierrors.IsConflict(err):
			// A concurrent change: re-read and decided again.
			c.log.Debug("retrying after a write conflict", "key", key, "error", err)
			q.AddRateLimited(key)
		default:
			c.log.Warn("retrying", "key", key, "error", err)
			q.AddRateLimited(key)
		}
		q.Done(key)
		c.busy.Add(-1)
	}
}

// idle reports whether the controller is initialised and has no work queued
// or in progress (events not yet delivered by the informers aside).
func (c *Controller) idle() bool {
	return c.initialized.Load() && c.drained()
}

// drained reports whether no work is queued or in progress, initialised or
// not (a controller that never had a valid configuration is drained once it
// has looked at every event, and never idle). Items waiting for a
// rate-limited retry are not counted.
func (c *Controller) drained() bool {
	return c.busy.Load() == 0 && c.svcQueue.Len() == 0 &&
		c.annQueue.Len() == 0 && c.confQueue.Len() == 0 && c.retryQueue.Len() == 0
}

// installHandlers registers the informer event handlers.
func (c *Controller) installHandlers(ctx context.Context) error {
	svcInf, err := c.opts.Cache.GetInformer(ctx, &corev1.Service{})
	if err != nil {
		return fmt.Errorf("allocation: Service informer: %w", err)
	}
	if _, err := svcInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if s, ok := obj.(*corev1.Service); ok {
				c.markSince(Key(s), len(s.Status.LoadBalancer.Ingress) == 0)
				if c.initialized.Load() {
					c.lastAdd.Store(time.Now().UnixNano())
				}
				c.svcQueue.Add(Key(s))
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*corev1.Service)
			n, ok2 := newObj.(*corev1.Service)
			if ok1 && ok2 {
				c.serviceUpdated(o, n)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if s, ok := obj.(*corev1.Service); ok {
				c.svcQueue.Add(Key(s))
			}
		},
	}); err != nil {
		return fmt.Errorf("allocation: Service handler: %w", err)
	}

	nsInf, err := c.opts.Cache.GetInformer(ctx, &corev1.Namespace{})
	if err != nil {
		return fmt.Errorf("allocation: Namespace informer: %w", err)
	}
	if _, err := nsInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*corev1.Namespace)
			n, ok2 := newObj.(*corev1.Namespace)
			if ok1 && ok2 && !equalMaps(o.Labels, n.Labels) {
				c.enqueueNamespace(ctx, n.Name)
			}
		},
	}); err != nil {
		return fmt.Errorf("allocation: Namespace handler: %w", err)
	}

	nodeInf, err := c.opts.Cache.GetInformer(ctx, &corev1.Node{})
	if err != nil {
		return fmt.Errorf("allocation: Node informer: %w", err)
	}
	// Nodes matter to the configuration only through their labels (peer
	// node selectors); status heartbeats must not reload it (metallb#1606).
	if _, err := nodeInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.confQueue.Add(configItem) },
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*corev1.Node)
			n, ok2 := newObj.(*corev1.Node)
			if ok1 && ok2 && !equalMaps(o.Labels, n.Labels) {
				c.confQueue.Add(configItem)
			}
		},
		DeleteFunc: func(any) { c.confQueue.Add(configItem) },
	}); err != nil {
		return fmt.Errorf("allocation: Node handler: %w", err)
	}

	confHandler := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.confQueue.Add(configItem) },
		UpdateFunc: func(o, n any) { c.confQueue.Add(configItem) },
		DeleteFunc: func(any) { c.confQueue.Add(configItem) },
	}
	for _, obj := range []client.Object{
		&v1beta1.IPAddressPool{}, &v1beta1.L2Advertisement{}, &v1beta1.BGPAdvertisement{},
		&v1beta1.Community{}, &v1beta1.BFDProfile{}, &v1beta2.BGPPeer{}, &corev1.Secret{},
	} {
		inf, err := c.opts.Cache.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("allocation: %T informer: %w", obj, err)
		}
		h := confHandler
		if _, ok := obj.(*v1beta1.IPAddressPool); ok {
			// Status writes (pool counters) do not change the
			// configuration.
			h.UpdateFunc = func(o, n any) {
				op, ok1 := o.(*v1beta1.IPAddressPool)
				np, ok2 := n.(*v1beta1.IPAddressPool)
				if !ok1 || !ok2 || op.Generation != np.Generation || !equalMaps(op.Labels, np.Labels) {
					c.confQueue.Add(configItem)
				}
			}
		}
		if _, err := inf.AddEventHandler(h); err != nil {
			return fmt.Errorf("allocation: %T handler: %w", obj, err)
		}
	}
	return nil
}

// serviceUpdated queues a Service whose update (o to n) may change what
// the controller decides for it: a new spec, user annotations or labels
// (it then waits for an address again), or a status or pool annotation
// that disagrees with the allocator.
func (c *Controller) serviceUpdated(o, n *corev1.Service) {
	if !equality.Semantic.DeepEqual(o.Spec, n.Spec) || !equalUserAnnotations(o.Annotations, n.Annotations) || !equalMaps(o.Labels, n.Labels) {
		c.markSince(Key(n), true)
		c.svcQueue.Add(Key(n))
		return
	}
	// Only status or the pool annotation changed: most often the echo of
	// the controller's own write. Reconcile only when it disagrees with
	// the allocator.
	if !c.agrees(n) {
		c.svcQueue.Add(Key(n))
	}
}

// enqueueNamespace re-queues every Service of namespace ns (its labels
// changed, so serviceAllocation namespaceSelectors may match differently).
func (c *Controller) enqueueNamespace(ctx context.Context, ns string) {
	var list corev1.ServiceList
	if err := c.opts.Cache.List(ctx, &list, client.InNamespace(ns)); err != nil {
		c.log.Warn("list Services of namespace", "namespace", ns, "error", err)
		return
	}
	for i := range list.Items {
		c.svcQueue.Add(Key(&list.Items[i]))
	}
}

// markSince records when a Service started waiting for an address (created,
// or its request changed), unless it already waits.
func (c *Controller) markSince(key string, waiting bool) {
	if waiting {
		c.book.MarkWaiting(key, time.Now())
	}
}

// wakePending schedules a retry pass: an address may have become free.
func (c *Controller) wakePending() {
	c.retryQueue.Add(retryItem)
}

// retryPass re-allocates, one at a time and in key order, first the Services
// a configuration change took addresses from, then the pending ones, and
// queues each for its status write. Doing the allocation here rather than
// in the concurrent workers makes the winner of a freed address a function
// of the state alone.
func (c *Controller) retryPass(ctx context.Context, _ string) error {
	if !c.initialized.Load() {
		return nil
	}
	for _, key := range c.book.RetryOrder() {
		c.preallocate(ctx, key)
		c.svcQueue.Add(key)
	}
	return nil
}

// preallocate gives key its addresses if it holds none and can get some.
// Its reconcile then finds them held and writes them.
func (c *Controller) preallocate(ctx context.Context, key string) {
	if asg, ok := c.alloc.Lookup(key); ok && len(asg.IPs) > 0 {
		return
	}
	if !c.book.MayPreallocate(key) {
		return
	}
	var svc corev1.Service
	if err := c.opts.Cache.Get(ctx, splitKey(key), &svc, readOnly); err != nil || !Handled(&svc, c.opts.LBClass) {
		return
	}
	var nsLabels map[string]string
	var ns corev1.Namespace
	if err := c.opts.Cache.Get(ctx, client.ObjectKey{Name: svc.Namespace}, &ns, readOnly); err == nil {
		nsLabels = ns.Labels
	}
	req, err := RequestFor(&svc, nsLabels)
	if err != nil {
		return
	}
	_, _ = c.alloc.Allocate(req) // failures are reported by the reconcile
}

// setPending records whether key waits for an address and wakes a retry
// pass when it becomes pending (svcstate.Book.SetPending says why).
func (c *Controller) setPending(key string, p bool) {
	wake, n := c.book.SetPending(key, p)
	c.metrics.pending.Set(float64(n))
	if wake {
		c.wakePending()
	}
}

// statsChanged tells the pool status writer that pool counters may have
// changed.
func (c *Controller) statsChanged() { c.pools.notify() }

// agrees reports whether s shows exactly what the allocator holds for it:
// its ingress IPs and pool annotation (nothing when it holds nothing).
func (c *Controller) agrees(s *corev1.Service) bool {
	if !c.initialized.Load() {
		return false
	}
	asg, _ := c.alloc.Lookup(Key(s))
	return slices.Equal(IngressIPs(s), asg.IPs) && len(s.Status.LoadBalancer.Ingress) == len(asg.IPs) &&
		s.Annotations[annotations.AllocatedFromPool] == asg.Pool
}

// equalUserAnnotations compares annotations, ignoring the one the
// controller writes.
func equalUserAnnotations(a, b map[string]string) bool {
	if len(a) == len(b) && equalMaps(a, b) {
		return true
	}
	for k, v := range a {
		if k != annotations.AllocatedFromPool && b[k] != v {
			return false
		}
	}
	for k, v := range b {
		if k != annotations.AllocatedFromPool && a[k] != v {
			return false
		}
	}
	return true
}

func equalMaps(a, b map[string]string) bool {
	return labels.Equals(a, b)
}

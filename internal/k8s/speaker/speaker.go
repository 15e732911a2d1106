package speaker

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/announce"
	"github.com/herald-lb/herald/internal/bgp"
	"github.com/herald-lb/herald/internal/config"
	"github.com/herald-lb/herald/internal/k8s/configload"
	"github.com/herald-lb/herald/internal/k8s/fieldmanager"
)

// Keys with an empty namespace are not Services (every Service has one).
const (
	keyConfig = "config"
	keyAll    = "all"
	keyPods   = "pods"
)

func special(name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Name: name}}
}

// Index names of the informers' indexers (setupIndexes).
const (
	indexSliceService = "herald.speaker/service"    // EndpointSlice -> "ns/service"
	indexServiceIP    = "herald.speaker/ingress-ip" // Service -> each ingress IP (netip.Addr.String)
)

// Controller is the speaker's reconcile loop (one controller-runtime
// controller and the goroutines it feeds). Create it with Setup.
type Controller struct {
	opts      Options
	log       *slog.Logger
	client    client.Client // cache-backed reads, API writes
	apiReader client.Reader // uncached reads
	// slices is the EndpointSlice informer's store of sliceRecords,
	// indexed by indexSliceService (setupIndexes). Read only.
	slices toolscache.Indexer
	// svcs is the Service informer's store of serviceRecords, indexed by
	// indexServiceIP (setupIndexes). Read only.
	svcs      toolscache.Indexer
	tracker   *configload.Tracker
	cfgMetric *configload.Metrics
	reporter  *configload.Reporter
	announced *announcedMetric
	triggers  chan event.TypedGenericEvent[string]
	// l2Changes: the layer 2 announcer's eligible interfaces changed
	// (L2InterfacesChanged); coalesced.
	l2Changes chan struct{}
	notAnn    *notAnnouncedMetric

	// State below is touched only by the single reconcile worker.
	services     map[string]*serviceState
	paths        *pathApplier // nil without BGP; runs in its own goroutine
	appliedPeers []bgp.PeerConfig
	peersApplied bool
	peerErrors   map[string]string // BGPPeer name -> last translation error reported
	bfd          bfdState
	// statusListed: reconcileAll has listed every status object of this
	// node, so a Service first seen later has none (an object someone
	// else creates reaches the status writer's watch) and its first
	// decision costs no List request.
	statusListed bool
	status       *statusWriter  // runs in its own goroutines
	sessions     *sessionStates // BGPSessionState writer, its own goroutine
	// rejoinsHandled: Members.Rejoins when layer 2 was last re-announced.
	rejoinsHandled uint64

	ownerMu sync.Mutex
	owner   *metav1.OwnerReference // the speaker Pod, once read

	// configured: a configuration snapshot is in force (see Ready); set
	// once, never reset (a later rejection keeps the last one in force).
	configured atomic.Bool

	// handover: the layer 2 hand-over (handover.go).
	handover *handoverState
	// balanced: the balanced layer 2 election's state (Options.BalancedL2);
	// nil with the plain election.
	balanced *balancedState

	// sessionChecks counts completed warnSessionsDown passes (the tests
	// wait on it to know that further checks found nothing to report).
	sessionChecks atomic.Uint64
	// shared: the Services holding each shared address (sharedview.go).
	shared sharedViews
	// endpointReads counts the EndpointSlice reads of endpoints (tests).
	endpointReads atomic.Uint64
}

// ReadyCheckName is the name under which Setup registers [Controller.Ready]
// as a readiness check on the manager (/readyz, /readyz/configuration).
const ReadyCheckName = "configuration"

// Ready is the speaker's readiness check (a controller-runtime
// healthz.Checker; Setup registers it as [ReadyCheckName]). It returns an
// error until this node has its first configuration snapshot, and nil from
// then on: a later rejected configuration keeps the last valid one in
// force, so the speaker still announces and stays ready.
//
// Without a snapshot the speaker announces nothing and is no memberlist
// member (Members.Activate), so it serves nothing. Reporting that as not
// ready makes a DaemonSet rolling update (maxUnavailable 1) stop at the
// first node whose new speaker cannot load its configuration (an invalid
// object stored with the webhook off) instead of restarting every speaker
// into the same state and blacking out layer 2 and BGP on every node. An
// empty configuration (no objects) is valid and is a snapshot.
//
// Readiness does not wait for Members.Joined (the layer 2 start-up gate):
// Joined always follows the snapshot within a bounded time (a state
// exchange with a member, or Timings.AloneAfter when no join succeeds), so
// it could only delay a rollout, never halt one, and BGP is announced
// before it. Liveness (/healthz) is not tied to the configuration either:
// restarting the container cannot fix a stored invalid object.
func (s *Controller) Ready(*http.Request) error {
	if !s.configured.Load() {
		return fmt.Errorf("no configuration snapshot on node %s yet (see ConfigurationState speaker-%s in namespace %s)",
			s.opts.NodeName, s.opts.NodeName, s.opts.Namespace)
	}
	return nil
}

// Setup creates the speaker's controller on mgr. mgr's cache should be
// built with CacheOptions and its client with UncachedObjects disabled from
// the cache. The controller starts with the manager; the announcers and
// memberlist are run by the caller.
func Setup(mgr manager.Manager, opts Options) (*Controller, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.DiscoveryResync == 0 {
		opts.DiscoveryResync = DefaultDiscoveryResync
	}
	if opts.SessionWarnAfter == 0 {
		opts.SessionWarnAfter = DefaultSessionWarnAfter
	}
	s := &Controller{
		opts: opts,
		log:  opts.Logger,
		// Every write names the speaker in managedFields.
		client:     client.WithFieldOwner(mgr.GetClient(), fieldmanager.Speaker),
		apiReader:  mgr.GetAPIReader(),
		tracker:    configload.NewTracker(config.Options{Namespace: opts.Namespace, NodeName: opts.NodeName, DropTransient: true}, true),
		triggers:   make(chan event.TypedGenericEvent[string], 16),
		l2Changes:  make(chan struct{}, 1),
		services:   map[string]*serviceState{},
		peerErrors: map[string]string{},
		bfd:        bfdState{down: map[string]time.Time{}},
	}
	var err error
	if s.announced, err = newAnnouncedMetric(opts.Registerer, opts.NodeName); err != nil {
		return nil, fmt.Errorf("register metallb_speaker_announced and herald_layer2_announcer_changes_total: %w", err)
	}
	if s.notAnn, err = newNotAnnouncedMetric(opts.Registerer, opts.NodeName); err != nil {
		return nil, fmt.Errorf("register herald_speaker_not_announced: %w", err)
	}
	if s.handover, err = newHandoverState(opts.HandoverTimeout, opts.NodeName, opts.Registerer); err != nil {
		return nil, fmt.Errorf("register herald_layer2_handovers_total: %w", err)
	}
	if opts.Registerer != nil {
		s.cfgMetric = configload.NewMetrics(opts.Registerer)
	}
	s.reporter = &configload.Reporter{
		Client: s.client, Namespace: opts.Namespace, Name: "speaker-" + opts.NodeName,
		Labels: map[string]string{v1beta1.LabelComponentType: "speaker", v1beta1.LabelNodeName: opts.NodeName},
	}
	if err := mgr.AddReadyzCheck(ReadyCheckName, s.Ready); err != nil {
		return nil, fmt.Errorf("add readiness check: %w", err)
	}
	if opts.BalancedL2 {
		s.balanced = newBalancedState(opts.BalanceDelay)
	}
	if s.slices, s.svcs, err = setupIndexes(mgr); err != nil {
		return nil, err
	}
	s.status = newStatusWriter(s) // before the controller: it watches for the writer
	if err := s.setupController(mgr); err != nil {
		return nil, err
	}
	if err := mgr.Add(manager.RunnableFunc(s.status.run)); err != nil {
		return nil, fmt.Errorf("add status writer: %w", err)
	}
	s.sessions = newSessionStates(s.client, s.apiReader, s.client, s.log, opts.NodeName, opts.Namespace, opts.SessionStateInterval)
	if opts.BGP == nil {
		s.sessions.setPeers(nil, nil) // BGP off: delete what an earlier speaker wrote
	}
	if err := mgr.Add(manager.RunnableFunc(s.sessions.run)); err != nil {
		return nil, fmt.Errorf("add BGPSessionState writer: %w", err)
	}
	if opts.BGP != nil {
		s.paths = newPathApplier(opts.BGP, s.log, func(ctx context.Context, services []string, err error) {
			for _, key := range services {
				s.announceFailed(ctx, key, protoBGP, err)
			}
		})
		if err := mgr.Add(manager.RunnableFunc(s.paths.run)); err != nil {
			return nil, fmt.Errorf("add BGP path applier: %w", err)
		}
	}
	if err := mgr.Add(manager.RunnableFunc(s.runTriggers)); err != nil {
		return nil, fmt.Errorf("add speaker triggers: %w", err)
	}
	if err := mgr.Add(manager.RunnableFunc(s.runHandover)); err != nil {
		return nil, fmt.Errorf("add layer 2 hand-over: %w", err)
	}
	return s, nil
}

// setupIndexes adds the EndpointSlice index by Service
// (indexSliceService) and the Service index by ingress IP
// (indexServiceIP), both on the informers themselves: the cache holds
// sliceRecords and serviceRecords, which controller-runtime's field
// indexes and reader cannot take. It returns the EndpointSlice and the
// Service informers' stores.
func setupIndexes(mgr manager.Manager) (sliceIdx, svcIdx toolscache.Indexer, err error) {
	if sliceIdx, err = informerIndex(mgr, &discoveryv1.EndpointSlice{}, toolscache.Indexers{indexSliceService: sliceService}); err != nil {
		return nil, nil, fmt.Errorf("index EndpointSlices by Service: %w", err)
	}
	if svcIdx, err = informerIndex(mgr, &corev1.Service{}, toolscache.Indexers{indexServiceIP: serviceIPs}); err != nil {
		return nil, nil, fmt.Errorf("index Services by ingress IP: %w", err)
	}
	return sliceIdx, svcIdx, nil
}

// informerIndex adds indexers to the informer of obj's kind and returns its
// store.
func informerIndex(mgr manager.Manager, obj client.Object, indexers toolscache.Indexers) (toolscache.Indexer, error) {
	inf, err := mgr.GetCache().GetInformer(context.Background(), obj)
	if err != nil {
		return nil, fmt.Errorf("%T informer: %w", obj, err)
	}
	shared, ok := inf.(toolscache.SharedIndexInformer)
	if !ok {
		return nil, fmt.Errorf("%T informer is a %T, not a client-go SharedIndexInformer", obj, inf)
	}
	if err := shared.AddIndexers(indexers); err != nil {
		return nil, err
	}
	return shared.GetIndexer(), nil
}

// serviceIPs is the indexServiceIP index function: a serviceRecord's
// ingress IPs (netip.Addr.String).
func serviceIPs(obj any) ([]string, error) {
	r, ok := obj.(*serviceRecord)
	if !ok || len(r.svc.IPs) == 0 {
		return nil, nil
	}
	ips := make([]string, len(r.svc.IPs))
	for i, ip := range r.svc.IPs {
		ips[i] = ip.String()
	}
	return ips, nil
}

// service returns the cached record of the Service key ("namespace/name"),
// nil when the cache has none (deleted, or not yet seen). Read only.
func (s *Controller) service(key string) (*serviceRecord, error) {
	o, ok, err := s.svcs.GetByKey(key)
	if err != nil || !ok {
		return nil, err
	}
	r, ok := o.(*serviceRecord)
	if !ok {
		return nil, fmt.Errorf("the cache holds Service %s as a %T, not a record", key, o)
	}
	return r, nil
}

// servicesWithIP returns the cached records of the Services holding ip
// (indexServiceIP). Read only.
func (s *Controller) servicesWithIP(ip netip.Addr) ([]*serviceRecord, error) {
	objs, err := s.svcs.ByIndex(indexServiceIP, ip.String())
	if err != nil {
		return nil, err
	}
	return records(objs), nil
}

// allServices returns the records of every cached Service. Read only.
func (s *Controller) allServices() []*serviceRecord {
	return records(s.svcs.List())
}

func records(objs []any) []*serviceRecord {
	out := make([]*serviceRecord, 0, len(objs))
	for _, o := range objs {
		if r, ok := o.(*serviceRecord); ok {
			out = append(out, r)
		}
	}
	return out
}

// sliceService is the indexSliceService index function: a sliceRecord's
// Service as "namespace/name", none for a slice of no Service.
func sliceService(obj any) ([]string, error) {
	r, ok := obj.(*sliceRecord)
	if !ok || r.service == "" {
		return nil, nil
	}
	return []string{r.namespace + "/" + r.service}, nil
}

func (s *Controller) setupController(mgr manager.Manager) error {
	toKey := func(name string) handler.EventHandler {
		return handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
			return []reconcile.Request{special(name)}
		})
	}
	b := builder.ControllerManagedBy(mgr).
		Named("speaker").
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Watches(&corev1.Service{}, s.eventHandler(s.mapService),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: serviceChanged})).
		Watches(&discoveryv1.EndpointSlice{}, s.eventHandler(s.mapSlice),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: sliceChanged})).
		Watches(&corev1.Node{}, toKey(keyAll),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: nodeChanged})).
		Watches(&corev1.Secret{}, toKey(keyConfig),
			builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
				return o.GetNamespace() == s.opts.Namespace
			}))).
		// This node's status objects: the status writer restores them
		// when someone else changes them (statuswatch.go).
		Watches(&v1beta1.ServiceL2Status{}, s.status.eventHandler(kindL2)).
		Watches(&v1beta1.ServiceBGPStatus{}, s.status.eventHandler(kindBGP)).
		WatchesRawSource(source.TypedChannel(s.triggers,
			handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, key string) []reconcile.Request {
				return []reconcile.Request{special(key)}
			})))
	for _, obj := range []client.Object{
		&v1beta1.IPAddressPool{}, &v1beta1.L2Advertisement{}, &v1beta1.BGPAdvertisement{},
		&v1beta2.BGPPeer{}, &v1beta1.Community{}, &v1beta1.BFDProfile{},
	} {
		b = b.Watches(obj, toKey(keyConfig), builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{},
			predicate.Funcs{UpdateFunc: heraldAnnotationsChanged})))
	}
	if s.opts.Members != nil {
		b = b.Watches(&corev1.Pod{}, toKey(keyPods), builder.WithPredicates(predicate.Funcs{UpdateFunc: podChanged}))
	}
	b = s.watchHandover(b)
	return b.Complete(s)
}

// runTriggers queues the initial configuration load and Pod discovery, then
// forwards memberlist changes and BGP session states until ctx ends.
func (s *Controller) runTriggers(ctx context.Context) error {
	s.trigger(ctx, keyConfig)
	if s.opts.Members != nil {
		s.trigger(ctx, keyPods)
	}
	var changes <-chan struct{}
	if s.opts.Members != nil {
		changes = s.opts.Members.Changes()
	}
	var peerStates <-chan struct{}
	if s.opts.PeerStates != nil {
		peerStates = s.opts.PeerStates.Ready()
	}
	bfdChanges := s.opts.BFDChanges
	sessions := map[string]*session{}
	check := time.NewTicker(max(s.opts.SessionWarnAfter/4, 10*time.Millisecond))
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
			s.log.Debug("live speakers changed", "live", s.opts.Members.Live())
			s.trigger(ctx, keyAll)
		case <-s.l2Changes:
			s.log.Debug("layer 2 interfaces changed", "interfaces", s.opts.L2.EligibleInterfaces())
			s.trigger(ctx, keyAll)
		case <-peerStates:
			for _, st := range s.opts.PeerStates.Take() {
				s.peerState(ctx, st, sessions)
			}
		case c, ok := <-bfdChanges:
			if !ok {
				bfdChanges = nil
				continue
			}
			s.bfdChange(ctx, c)
		case <-check.C:
			var states []bgp.PeerState
			if s.opts.BGP != nil {
				states = s.opts.BGP.PeerStates()
			}
			s.sessions.refresh(states)
			s.warnSessionsDown(ctx, sessions, states)
			s.sessionChecks.Add(1)
		}
	}
}

// L2InterfacesChanged tells the speaker that the layer 2 announcer's
// EligibleInterfaces changed (wire it to layer2.Options.OnInterfaces): every
// Service is decided again with the new interfaces. It never blocks and may
// be called from any goroutine.
func (s *Controller) L2InterfacesChanged() {
	select {
	case s.l2Changes <- struct{}{}:
	default:
	}
}

func (s *Controller) trigger(ctx context.Context, key string) {
	select {
	case s.triggers <- event.TypedGenericEvent[string]{Object: key}:
	case <-ctx.Done():
	}
}

// Reconcile implements reconcile.Reconciler.
func (s *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if req.Namespace == "" {
		switch req.Name {
		case keyConfig:
			return reconcile.Result{}, s.reconcileConfig(ctx, false)
		case keyAll:
			return reconcile.Result{}, s.reconcileConfig(ctx, true)
		case keyPods:
			return reconcile.Result{RequeueAfter: s.opts.DiscoveryResync}, s.syncPods(ctx)
		case keyBalance:
			return s.reconcileBalanced(ctx)
		}
		return reconcile.Result{}, nil
	}
	snap := s.tracker.Current()
	if snap == nil {
		return reconcile.Result{}, nil // decided once the first configuration loads
	}
	view, err := s.clusterView(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	return s.reconcileService(ctx, snap, view, req.String(), nil)
}

// mapService queues a Service and every Service sharing one of its IPs.
func (s *Controller) mapService(ctx context.Context, o client.Object) []reconcile.Request {
	reqs := []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(o)}}
	if r, ok := o.(*serviceRecord); ok {
		reqs = append(reqs, s.sharers(r)...)
	}
	return reqs
}

// mapSlice queues the Service of an EndpointSlice and the Services sharing
// its IPs.
func (s *Controller) mapSlice(ctx context.Context, o client.Object) []reconcile.Request {
	r, ok := o.(*sliceRecord)
	if !ok || r.service == "" {
		return nil
	}
	name := r.service
	key := types.NamespacedName{Namespace: o.GetNamespace(), Name: name}
	reqs := []reconcile.Request{{NamespacedName: key}}
	if r, err := s.service(key.String()); r != nil && err == nil {
		reqs = append(reqs, s.sharers(r)...)
	}
	return reqs
}

// sharers returns the other Services holding one of svc's IPs. svc changed
// (or its endpoints did): the views of its IPs are invalidated first.
func (s *Controller) sharers(svc *serviceRecord) []reconcile.Request {
	var reqs []reconcile.Request
	ips := svc.svc.IPs
	s.shared.invalidate(ips)
	for _, ip := range ips {
		list, err := s.servicesWithIP(ip)
		if err != nil {
			continue
		}
		for _, r := range list {
			if r.svc.Key != svc.svc.Key {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(r)})
			}
		}
	}
	return reqs
}

func serviceChanged(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*serviceRecord)
	n, ok2 := e.ObjectNew.(*serviceRecord)
	return !ok1 || !ok2 || !reflect.DeepEqual(o.svc, n.svc)
}

// heraldAnnotationsChanged reports a change of a configuration object's
// herald.io/* annotations (herald.io/weighted-ecmp on a BGPAdvertisement):
// part of the configuration, although they do not change the generation.
func heraldAnnotationsChanged(e event.UpdateEvent) bool {
	if e.ObjectOld == nil || e.ObjectNew == nil {
		return true
	}
	o, n := e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations()
	for _, m := range []map[string]string{o, n} {
		for k := range m {
			if strings.HasPrefix(k, heraldAnnotationPrefix) && o[k] != n[k] {
				return true
			}
		}
	}
	return false
}

// heraldAnnotationPrefix starts the annotations Herald reads from MetalLB's
// configuration objects (internal/annotations).
const heraldAnnotationPrefix = "herald.io/"

// sliceChanged reports an EndpointSlice change that can change a
// decision: its endpoints (as the decision reads them) or the Service it
// belongs to (its kubernetes.io/service-name label: the slice moved, and
// both Services' decisions change).
func sliceChanged(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*sliceRecord)
	n, ok2 := e.ObjectNew.(*sliceRecord)
	return !ok1 || !ok2 || o.service != n.service || !slices.Equal(o.endpoints, n.endpoints)
}

// nodeChanged reports a Node change that can change a decision: labels
// (selectors, exclusion), NetworkUnavailable, readiness and the
// out-of-service taint (liveness without memberlist), all in
// announce.NodeFromK8s, and addresses (router ID).
func nodeChanged(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*corev1.Node)
	n, ok2 := e.ObjectNew.(*corev1.Node)
	if !ok1 || !ok2 {
		return true
	}
	return !reflect.DeepEqual(announce.NodeFromK8s(o), announce.NodeFromK8s(n)) ||
		!reflect.DeepEqual(o.Status.Addresses, n.Status.Addresses)
}

func podChanged(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*corev1.Pod)
	n, ok2 := e.ObjectNew.(*corev1.Pod)
	return !ok1 || !ok2 || o.Status.PodIP != n.Status.PodIP || o.Status.Phase != n.Status.Phase ||
		(o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil)
}

// requeueSoon is used when status depends on something that settles by
// itself (the announcer opening its interfaces).
const requeueSoon = 10 * time.Second

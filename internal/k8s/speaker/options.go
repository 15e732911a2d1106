package speaker

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1alpha1"
	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/announce"
	"github.com/herald-lb/herald/internal/bgp"
	"github.com/herald-lb/herald/internal/k8s/apiretry"
)

// L2Announcer is what the speaker needs from the layer 2 announcer
// (*layer2.Announcer implements it).
type L2Announcer interface {
	// SetOwner declares every IP owner (a Service key) announces; an empty
	// targets withdraws all of them.
	SetOwner(owner string, targets []announce.L2Target) error
	// Interfaces returns the interfaces ip is answered on now.
	Interfaces(ip netip.Addr) []string
	// EligibleInterfaces returns the interfaces IPs can be answered on
	// (open ARP and NDP responders), nil until the announcer has listed
	// the interfaces once. Layer 2 takes over nothing until then; call
	// Controller.L2InterfacesChanged when it changes.
	EligibleInterfaces() *announce.NodeInterfaces
}

// L2ProbeFunc asks the segment whether another host still answers the
// layer 2 address ip on the named interfaces (empty: every eligible one):
// it probes (ARP requests, neighbor solicitations) until consecutive
// probes go unanswered and then returns a nil error; it returns ctx's
// error when ctx ends first, and another error when it cannot probe.
// answers counts the answers it heard from other hosts, answeredBy is the
// MAC address of the last one ("" when none); both are for logs.
// speaker/main.go wires layer2.Announcer.Probe.
type L2ProbeFunc func(ctx context.Context, ip netip.Addr, interfaces []string) (answers int, answeredBy string, err error)

// Members is what the speaker needs from memberlist (*members.List
// implements it).
type Members interface {
	// Live returns node name -> alive.
	Live() map[string]bool
	// Changes signals (coalesced) that Live or Joined changed.
	Changes() <-chan struct{}
	// SetPeers replaces the speaker addresses to stay joined with.
	SetPeers(addrs []netip.AddrPort)
	// Joined reports that Live can be trusted for election: this speaker
	// has exchanged state with another speaker or learned it is alone
	// (members.List.Joined). Until then the speaker takes over no layer 2
	// address.
	Joined() bool
	// Rejoins counts members that had been declared failed and are live
	// again (a healed partition); when it grows, the speaker re-announces
	// the layer 2 addresses it owns.
	Rejoins() uint64
	// ReleaseSenders are the other members whose speakers advertise that
	// they send layer 2 hand-over releases (members.List.ReleaseSenders):
	// a won address is waited for only when its previous holder is one.
	ReleaseSenders() map[string]bool
	// Activate makes this speaker a member (bind, join). The speaker calls
	// it once it has its first configuration snapshot, so a speaker that
	// cannot load its configuration is never elected (members.List.Activate).
	Activate()
}

// reannouncer is implemented by a layer 2 announcer that can re-send one
// gratuitous ARP / unsolicited NA burst for every address it owns
// (*layer2.Announcer). Optional: without it a healed partition is not
// re-announced.
type reannouncer interface{ Reannounce() }

// EventRecorder emits Kubernetes events without waiting (an
// *eventrec.Recorder from eventrec.For(mgr, eventrec.Speaker): an event that
// does not fit its queue is dropped and counted).
type EventRecorder interface {
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any)
}

// DefaultDiscoveryResync is how often the speaker Pods are listed again and
// handed to Members.SetPeers even without a Pod event.
const DefaultDiscoveryResync = time.Minute

// DefaultSessionWarnAfter is how long a BGP session may stay down (or never
// come up) before the speaker emits sessionNotEstablished on its BGPPeer.
const DefaultSessionWarnAfter = time.Minute

// Options configure the speaker glue.
type Options struct {
	// NodeName is this speaker's node (spec.nodeName). Required.
	NodeName string
	// Namespace is Herald's namespace: configuration objects, Secrets,
	// speaker Pods, status objects and the ConfigurationState live there.
	// Required.
	Namespace string
	// PodName is the speaker's own Pod, the owner of the objects it writes;
	// "" or a missing Pod means no owner reference.
	PodName string
	// Logger is required; callers usually add the node name to it.
	Logger *slog.Logger
	// Registerer receives metallb_speaker_announced and the
	// metallb_k8s_client_* metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Recorder emits Service and BGPPeer events; nil emits none.
	Recorder EventRecorder
	// L2 announces in layer 2; nil disables layer 2 (--enable-l2=false).
	L2 L2Announcer
	// L2Probe probes a layer 2 address before this node takes it over from
	// a previous holder that sends no hand-over release (a MetalLB
	// speaker; announce.Handover): the taker answers once the probe finds
	// the address silent, at most after HandoverTimeout. nil: no probing,
	// such an address is answered at once.
	L2Probe L2ProbeFunc
	// BGP announces over BGP; nil disables BGP (--enable-bgp=false).
	BGP bgp.Speaker
	// PeerStates, if set, delivers BGP session state changes (put by the
	// gobgp speaker's OnPeerState) for events, logs and the
	// BGPSessionState objects. It keeps the latest change of each session
	// until the speaker takes it, so the state a session settles in is
	// never lost, however fast it flaps.
	PeerStates *bgp.StateChanges
	// BFD runs the BFD sessions of the peers that name a BFDProfile; nil
	// runs none (such peers then have BGP without BFD). Needs BGP.
	BFD BFDSessions
	// BFDChanges, if set, delivers the BFD sessions' state changes: Up to
	// Down holds the BGP session to that peer down until BFD is Up again.
	BFDChanges <-chan BFDChange
	// Members is memberlist; nil means memberlist is off and liveness comes
	// from Node conditions.
	Members Members
	// MemberPort is the memberlist port of every speaker (--ml-bindport).
	MemberPort int
	// MemberSelector selects the speaker Pods in Namespace (--ml-labels).
	// Required when Members is set.
	MemberSelector labels.Selector
	// SessionWarnAfter is how long a configured BGP session may be
	// anything but Established before a sessionNotEstablished event (once
	// per stretch); 0 selects DefaultSessionWarnAfter.
	SessionWarnAfter time.Duration
	// SessionStateInterval is the shortest time between two writes of one
	// BGPSessionState; 0 selects DefaultSessionStateInterval.
	SessionStateInterval time.Duration
	// DiscoveryResync is the period of the speaker Pod resync;
	// 0 selects DefaultDiscoveryResync.
	DiscoveryResync time.Duration
	// Announce are the decision options (--ignore-exclude-lb, --lb-class).
	Announce announce.Options
	// HandoverTimeout bounds how long a layer 2 address this node won waits
	// for the release of the live node that answered it before
	// (--l2-handover-timeout; see announce.Handover): 0 selects
	// announce.DefaultHandoverTimeout, a negative value answers at once
	// (no hand-over). Wire Controller.L2Released to the memberlist's
	// received releases, and the layer 2 announcer's released addresses to
	// members.List.Released.
	HandoverTimeout time.Duration
	// BalancedL2 runs the balanced layer 2 election
	// (--l2-election=balanced, announce.ElectBalancedServices): the winners
	// of every layer 2 address are computed at once over every Service,
	// recomputed after Service and EndpointSlice events (debounced by
	// BalanceDelay) and at once after node, liveness and configuration
	// changes. Every speaker of the group must set it alike. Not with
	// Announce.ElectByServiceFirstIP.
	BalancedL2 bool
	// BalanceDelay is how long a Service or EndpointSlice event waits for
	// others before the balanced winners are recomputed; 0 selects
	// DefaultBalanceDelay. Only with BalancedL2.
	BalanceDelay time.Duration
}

func (o *Options) validate() error {
	var errs []error
	if o.NodeName == "" {
		errs = append(errs, errors.New("speaker options: NodeName is required"))
	}
	if o.Namespace == "" {
		errs = append(errs, errors.New("speaker options: Namespace is required"))
	}
	if o.Logger == nil {
		errs = append(errs, errors.New("speaker options: Logger is required"))
	}
	if o.BalancedL2 && o.Announce.ElectByServiceFirstIP {
		errs = append(errs, errors.New("speaker options: BalancedL2 and Announce.ElectByServiceFirstIP exclude each other"))
	}
	if o.Members != nil && o.MemberSelector == nil {
		errs = append(errs, errors.New("speaker options: MemberSelector is required with Members"))
	}
	return errors.Join(errs...)
}

// CacheOptions returns the manager cache settings the speaker needs: Herald's
// objects, Secrets and Pods only from namespace (Pods only those matching
// podSelector; nil when memberlist is off: Pods are then not watched),
// the status objects only of node (labelled metallb.io/node=node; the
// status writer watches them), Services, EndpointSlices, Nodes, Pods and
// status objects reduced to the fields the speaker reads (transform.go),
// managed fields stripped from everything else; informers retry an
// unreachable API server with a short capped backoff (apiretry), so a
// change made right after an outage reaches the speaker within seconds.
func CacheOptions(namespace, node string, podSelector labels.Selector) cache.Options {
	inNS := map[string]cache.Config{namespace: {}}
	ofNode := labels.SelectorFromSet(labels.Set{v1beta1.LabelNode: node})
	by := map[client.Object]cache.ByObject{
		&corev1.Secret{}:            {Namespaces: inNS, Transform: transformSecret},
		&v1beta1.IPAddressPool{}:    {Namespaces: inNS},
		&v1beta1.L2Advertisement{}:  {Namespaces: inNS},
		&v1beta1.BGPAdvertisement{}: {Namespaces: inNS},
		&v1beta2.BGPPeer{}:          {Namespaces: inNS},
		&v1beta1.Community{}:        {Namespaces: inNS},
		&v1beta1.BFDProfile{}:       {Namespaces: inNS},
		// The kinds the speaker holds many of keep only what it reads
		// (transform.go).
		&discoveryv1.EndpointSlice{}: {Transform: transformEndpointSlice},
		&corev1.Service{}:            {Transform: transformService},
		&corev1.Node{}:               {Transform: transformNode},
		// This node's status objects, for the status writer's watch.
		&v1beta1.ServiceL2Status{}:  {Namespaces: inNS, Label: ofNode, Transform: transformStatus},
		&v1beta1.ServiceBGPStatus{}: {Namespaces: inNS, Label: ofNode, Transform: transformStatus},
	}
	if podSelector != nil {
		by[&corev1.Pod{}] = cache.ByObject{Namespaces: inNS, Label: podSelector, Transform: transformPod}
	}
	return cache.Options{ByObject: by, DefaultTransform: cache.TransformStripManagedFields(), NewInformer: apiretry.NewInformer}
}

// UncachedObjects are the kinds the speaker reads straight from the API
// server (set them as the manager's client.CacheOptions.DisableFor): its own
// status objects (ServiceL2Status, ServiceBGPStatus, BGPSessionState) and
// ConfigurationState, which it lists rarely and must not read stale. The
// cache holds this node's ServiceL2Status and ServiceBGPStatus only as
// statusRefs (transformStatus), for the status writer's watch.
func UncachedObjects() []client.Object {
	return []client.Object{
		&v1beta1.ServiceL2Status{}, &v1beta1.ServiceBGPStatus{}, &v1beta1.ConfigurationState{},
		&v1alpha1.BGPSessionState{},
	}
}

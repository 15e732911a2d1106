package announce

import (
	"net/netip"
	"slices"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/herald-lb/herald/internal/bgp"
	"github.com/herald-lb/herald/internal/config"
)

// ExcludeFromLBLabel is the well-known node label that removes a node from
// the layer 2 candidates and stops BGP announcements on it, whatever its
// value (Kubernetes node.kubernetes.io/exclude-from-external-load-balancers).
const ExcludeFromLBLabel = "node.kubernetes.io/exclude-from-external-load-balancers"

// TrafficPolicy is a Service's spec.externalTrafficPolicy.
type TrafficPolicy string

// Traffic policies. The empty value behaves as Cluster, the Kubernetes
// default.
const (
	TrafficPolicyCluster TrafficPolicy = "Cluster"
	TrafficPolicyLocal   TrafficPolicy = "Local"
)

// Service is the speaker's view of one Service. Build it with
// ServiceFromK8s.
type Service struct {
	// Key is "namespace/name".
	Key string
	// LoadBalancer is true when spec.type is LoadBalancer.
	LoadBalancer bool
	// IPs are the status.loadBalancer.ingress IPs, in order, unmapped and
	// without zone; at most one per family in practice.
	IPs []netip.Addr
	// InvalidIPs are ingress ip fields that do not parse; any makes the
	// whole Service ReasonInvalidIP.
	InvalidIPs []string
	// Labels are metadata.labels, matched by serviceSelectors (a
	// labels.Set from ServiceFromK8s; the speaker's cache keeps a more
	// compact form). nil matches as no labels.
	Labels labels.Labels
	// ExternalTrafficPolicy; "" means Cluster.
	ExternalTrafficPolicy TrafficPolicy
	// SharingKey is the metallb.io/allow-shared-ip annotation (or its
	// deprecated metallb.universe.tf form), "" when absent.
	SharingKey string
	// LoadBalancerClass is spec.loadBalancerClass, "" when unset.
	LoadBalancerClass string
}

// Local reports whether externalTrafficPolicy is Local.
func (s *Service) Local() bool { return s.ExternalTrafficPolicy == TrafficPolicyLocal }

// Endpoint is one endpoint of a Service's EndpointSlices (from
// EndpointsFromSlices). It is 40 bytes on a 64-bit platform and holds no
// pointer but NodeName's: a speaker keeps one per endpoint of every
// Service (issue #16).
type Endpoint struct {
	// NodeName is the node the endpoint runs on, "" if unknown.
	NodeName string
	// Target identifies what the endpoint runs (its targetRef: TargetOf),
	// the zero Target when the slice gives no targetRef. The weight of
	// weighted ECMP counts a target listed in two slices of one family
	// (while the EndpointSlice controller moves it) once.
	Target Target
	// Family is the address family of the endpoint's EndpointSlice: 4
	// (IPv4), 6 (IPv6), 0 (FQDN or unknown). Only the weight of weighted
	// ECMP uses it (endpoints of the announced IP's family).
	Family uint8
	// Ready is conditions.ready, with nil read as true (EndpointSlice API:
	// "nil should be interpreted as true").
	Ready bool
	// Serving is conditions.serving (nil read as false).
	Serving bool
}

// Target identifies what an endpoint runs, for telling two endpoints of
// one target apart from two targets: only its equality is read. It is
// built from an endpoint's targetRef by TargetOf; the zero Target is "no
// targetRef".
type Target [16]byte

// CanServe reports whether the endpoint can take traffic: ready, or serving
// while terminating (MetalLB's EndpointCanServe).
func (e Endpoint) CanServe() bool { return e.Ready || e.Serving }

// Node is the speaker's view of one Node. Build it with NodeFromK8s.
type Node struct {
	Name   string
	Labels labels.Set
	// NetworkUnavailable is true when the NetworkUnavailable condition is
	// "True".
	NetworkUnavailable bool
	// Ready is true when the Ready condition is "True" (False and Unknown,
	// the latter set when the kubelet stops reporting, are not ready).
	// Used only by LiveFromNodeConditions.
	Ready bool
	// OutOfService is true when the node carries OutOfServiceTaint (any
	// value, any effect). Used only by LiveFromNodeConditions.
	OutOfService bool
}

// OutOfServiceTaint is the taint key an operator sets on a node that is shut
// down or unreachable (non-graceful node shutdown, KEP-2268); such a node is
// dead whatever its conditions say.
const OutOfServiceTaint = "node.kubernetes.io/out-of-service"

// ExcludedFromLB reports whether the node carries ExcludeFromLBLabel (any
// value).
func (n *Node) ExcludedFromLB() bool { return n.Labels.Has(ExcludeFromLBLabel) }

// SharedService is another Service holding one of the decided Service's IPs
// (same allow-shared-ip key), with its endpoints. Decide uses it only for
// the layer 2 election of the shared IP, so that every Service holding the
// IP elects the same node.
type SharedService struct {
	Service Service
	// Endpoints: of a shared Service, Decide reads only which nodes have
	// an endpoint that can serve (CanServe, NodeName), so SharingEndpoints
	// of them decides the same.
	Endpoints []Endpoint
}

// SharingEndpoints returns what Decide reads of a SharedService's
// endpoints: one ready endpoint per distinct NodeName ("" included) of the
// endpoints of eps that can serve, in their first order; nil when none
// can. A caller that keeps the Services sharing an address between
// decisions (the speaker) keeps this instead of every endpoint.
func SharingEndpoints(eps []Endpoint) []Endpoint {
	var out []Endpoint
	for _, ep := range eps {
		if ep.CanServe() && !slices.ContainsFunc(out, func(o Endpoint) bool { return o.NodeName == ep.NodeName }) {
			out = append(out, Endpoint{NodeName: ep.NodeName, Ready: true})
		}
	}
	return out
}

// Options are speaker-wide settings.
type Options struct {
	// IgnoreExcludeLB disregards ExcludeFromLBLabel (flag
	// --ignore-exclude-lb).
	IgnoreExcludeLB bool
	// LoadBalancerClass is the class this speaker handles (flag
	// --lb-class). "" handles only Services without a class; otherwise
	// only Services of exactly this class.
	LoadBalancerClass string
	// ElectByServiceFirstIP elects every layer 2 address of a Service on
	// the node that wins the election of the Service's first address
	// (Service.IPs[0]), as MetalLB does, instead of one election per
	// address. A dual-stack Service's IPv6 address then goes to the node of
	// its IPv4 one (when the IPv4 address comes first). It is for a group
	// that mixes MetalLB and Herald speakers (--ml-key-derivation=metallb,
	// the migration window): both sides elect the same node. Off by
	// default, where each address is elected on its own (metallb#968).
	ElectByServiceFirstIP bool
}

// Input is everything one decision depends on. Decide does not modify it.
type Input struct {
	// Config is the current configuration snapshot (for a speaker, built
	// with config.Options.NodeName = Node, so BGP advertisements and peers
	// are already those of this node). Required.
	Config *config.Snapshot
	// Node is this speaker's node name; it must be in Nodes.
	Node string
	// Nodes are every node of the cluster (including this one), from the
	// node informer. Only nodes listed here can win an election.
	Nodes []Node
	// Live are the node names whose speaker is alive (memberlist's live
	// members, or LiveFromNodeConditions when memberlist is off). A nil map
	// means "no liveness information": every node counts as live, as in
	// MetalLB without memberlist.
	Live map[string]bool
	// Service is the Service decided on and Endpoints its endpoints (from
	// EndpointsFromSlices).
	Service   Service
	Endpoints []Endpoint
	// Sharing are the other Services that hold at least one of
	// Service.IPs, with their endpoints. Optional: without it, Services
	// sharing an IP still elect the same node as long as their candidate
	// sets agree, which holds except for externalTrafficPolicy Local
	// Services whose endpoints run on different nodes. A caller that passes
	// it must re-decide every Service of a shared IP when any of them (or
	// its endpoints) changes.
	Sharing []SharedService
	// Options are the speaker-wide settings.
	Options Options
	// L2Winners, when non-nil, are the layer 2 winners of the balanced
	// election (ElectBalanced over L2Ballots of every Service, computed
	// from the same Config, Nodes, Live and Options): an address listed
	// here goes to its listed node instead of the first of Elect's ranking,
	// as long as that node is still one of its candidates (else, stale
	// input, the ranking's first). nil: the plain election.
	L2Winners map[netip.Addr]string
	// Interfaces are this node's interfaces the layer 2 announcer can
	// answer on (from the announcer's last interface scan). nil means
	// unknown: the interface check is skipped (callers gate layer 2 until
	// the announcer has listed its interfaces). See NodeInterfaces.
	Interfaces *NodeInterfaces
}

// NodeInterfaces are the interface names (sorted) of this node on which the
// layer 2 announcer has an open responder: ARP (RFC 826) for IPv4, NDP
// (RFC 4861) for IPv6. An interface is in a list only while it is eligible
// (up, not enslaved, not excluded, with a broadcast Ethernet address; NDP
// also needs a usable link-local address); see internal/layer2.
type NodeInterfaces struct {
	ARP []string
	NDP []string
}

// For returns the interfaces answering for ip's family.
func (n *NodeInterfaces) For(ip netip.Addr) []string {
	if ip.Is4() || ip.Is4In6() {
		return n.ARP
	}
	return n.NDP
}

// Answering returns the interfaces (sorted) t.IP is answered on once the
// announcer has applied t: those of n for the IP's family that t names, or
// all of them when t names none. Decide only announces a target for which
// this is not empty (noMatchingInterface otherwise). n nil returns nil.
func (n *NodeInterfaces) Answering(t L2Target) []string {
	if n == nil {
		return nil
	}
	var out []string
	for _, name := range n.For(t.IP) {
		if len(t.Interfaces) == 0 || slices.Contains(t.Interfaces, name) {
			out = append(out, name)
		}
	}
	return out
}

// Equal reports whether n and o list the same interfaces (nil equals nil
// only).
func (n *NodeInterfaces) Equal(o *NodeInterfaces) bool {
	if n == nil || o == nil {
		return n == o
	}
	return slices.Equal(n.ARP, o.ARP) && slices.Equal(n.NDP, o.NDP)
}

// Decision is the outcome of Decide for one Service.
type Decision struct {
	// Service is Input.Service.Key.
	Service string
	// Reason is set when the Service as a whole is not announced before any
	// IP is looked at (notLoadBalancer, otherLoadBalancerClass,
	// noIPAllocated, invalidIP); IPs is then empty.
	Reason Reason
	// IPs holds one entry per distinct Service IP, in Service order.
	IPs []IPDecision
}

// IPDecision is the decision for one Service IP.
type IPDecision struct {
	IP netip.Addr
	// Pool is the name of the pool containing IP, "" when none
	// (both modes then report ReasonIPNotAllowed).
	Pool string
	L2   L2Decision
	BGP  BGPDecision
}

// L2Decision is the layer 2 part of an IPDecision.
type L2Decision struct {
	// Announce is true when this node answers ARP (RFC 826) / NDP
	// (RFC 4861) for the IP and sends gratuitous announcements.
	Announce bool
	// Reason is why not, when Announce is false.
	Reason Reason
	// Detail is a human-readable explanation for logs ("" when announcing).
	Detail string
	// Interfaces to announce on, sorted; nil means every eligible
	// interface. Set only when Announce is true.
	Interfaces []string
	// Winner is the elected node for the IP, "" when the election did not
	// run or had no candidate. It is set also when this node loses.
	Winner string
}

// BGPDecision is the BGP part of an IPDecision.
type BGPDecision struct {
	// Announce is true when this node advertises at least one path.
	Announce bool
	// Reason is why not, when Announce is false.
	Reason Reason
	// Detail is a human-readable explanation for logs.
	Detail string
	// Paths holds one path per matching advertisement (not merged; see
	// bgp.MergePaths). Path.Peers is the advertisement's peers list (nil:
	// every peer).
	Paths []bgp.Path
	// Advertisements names the BGPAdvertisement of each entry of Paths
	// (same length and order).
	Advertisements []string
	// Peers are the names of this node's BGP peers that receive at least
	// one of Paths, sorted (for ServiceBGPStatus).
	Peers []string
	// Weight is this node's weighted-ECMP weight for the IP (see
	// LocalWeight) when at least one of Paths carries it (an advertisement
	// with herald.io/weighted-ecmp and externalTrafficPolicy Local), else 0.
	Weight uint32
}

// Announced reports whether this node announces at least one IP in any
// mode.
func (d *Decision) Announced() bool {
	for i := range d.IPs {
		if d.IPs[i].L2.Announce || d.IPs[i].BGP.Announce {
			return true
		}
	}
	return false
}

// L2Target is one IP to announce in layer 2 with its interfaces (nil: all).
type L2Target struct {
	IP         netip.Addr
	Interfaces []string
}

// L2Targets returns the IPs this node announces in layer 2.
func (d *Decision) L2Targets() []L2Target {
	var out []L2Target
	for i := range d.IPs {
		if l2 := &d.IPs[i].L2; l2.Announce {
			out = append(out, L2Target{IP: d.IPs[i].IP, Interfaces: l2.Interfaces})
		}
	}
	return out
}

// BGPPaths returns every path this node advertises for the Service
// (unmerged; feed the paths of every Service to bgp.MergePaths).
func (d *Decision) BGPPaths() []bgp.Path {
	var out []bgp.Path
	for i := range d.IPs {
		out = append(out, d.IPs[i].BGP.Paths...)
	}
	return out
}

package announce

import (
	"fmt"
	"net/netip"
)

// Decide returns what this node (in.Node) announces for in.Service. It is
// deterministic: every speaker given the same Input (apart from Node)
// elects the same layer 2 winner. Complexity: O(N·A) label matches for N
// nodes and A advertisements of the IP's pool, plus N SHA-256 digests and
// an O(N log N) sort per layer 2 IP.
//
// Service-level checks come first: type LoadBalancer (notLoadBalancer),
// loadBalancerClass (otherLoadBalancerClass), parsable ingress IPs
// (invalidIP), at least one IP (noIPAllocated). Then each distinct IP is
// decided on its own: it must lie in a pool (ipNotAllowed), and layer 2 and
// BGP are decided independently, since a pool may be announced in both
// modes at once.
//
// Layer 2, in order: an L2Advertisement of the pool covers the Service
// (noMatchingAdvertisement); a Service with allow-shared-ip matches none with
// serviceSelectors (sharedIPWithServiceSelector); one of them selects this
// node (noMatchingAdvertisement); this node is not NetworkUnavailable
// (nodeNetworkUnavailable) or excluded (nodeLabeledExcludeBalancers); for
// Local, a serving endpoint runs here (noLocalEndpoints); a serving endpoint
// exists (noEndpoints); this speaker is live and wins the election for the
// IP (notOwner; see the package doc and Elect).
//
// BGP, in order: a BGPAdvertisement of the pool covers the Service and this
// node (noMatchingAdvertisement); the same node and endpoint rules as layer
// 2; no two of those advertisements set different LOCAL_PREF for the same
// prefix and peers (conflictingAdvertisements, config.LocalPrefCompatible).
// There is no election and no liveness check: every eligible node
// announces one path per matching advertisement.
func Decide(in Input) Decision {
	svc := &in.Service
	d := Decision{Service: svc.Key}
	switch {
	case !svc.LoadBalancer:
		d.Reason = ReasonNotLoadBalancer
		return d
	case svc.LoadBalancerClass != in.Options.LoadBalancerClass:
		d.Reason = ReasonOtherLoadBalancerClass
		return d
	case len(svc.InvalidIPs) > 0:
		d.Reason = ReasonInvalidIP
		return d
	case len(svc.IPs) == 0:
		d.Reason = ReasonNoIPAllocated
		return d
	}
	e := newEnv(&in)
	seen := make(map[netip.Addr]bool, len(svc.IPs))
	for _, raw := range svc.IPs {
		ip := raw.Unmap().WithZone("")
		if seen[ip] {
			continue
		}
		seen[ip] = true
		ipd := IPDecision{IP: ip}
		pool, ok := in.Config.PoolFor(ip)
		if !ok {
			detail := fmt.Sprintf("%s is in no IPAddressPool", ip)
			ipd.L2 = L2Decision{Reason: ReasonIPNotAllowed, Detail: detail}
			ipd.BGP = BGPDecision{Reason: ReasonIPNotAllowed, Detail: detail}
			d.IPs = append(d.IPs, ipd)
			continue
		}
		ipd.Pool = pool.Name
		ipd.L2 = e.decideL2(ip, pool)
		ipd.BGP = e.decideBGP(ip, pool)
		d.IPs = append(d.IPs, ipd)
	}
	return d
}

// env holds the per-call indexes shared by both modes.
type env struct {
	in   *Input
	self *Node // nil when in.Node is not in in.Nodes
	// selfEndpoint: the Service has a serving endpoint on this node;
	// anyEndpoint: anywhere.
	selfEndpoint, anyEndpoint bool
}

func newEnv(in *Input) *env {
	e := &env{in: in}
	for i := range in.Nodes {
		if in.Nodes[i].Name == in.Node {
			e.self = &in.Nodes[i]
			break
		}
	}
	for _, ep := range in.Endpoints {
		if !ep.CanServe() {
			continue
		}
		e.anyEndpoint = true
		if ep.NodeName == in.Node {
			e.selfEndpoint = true
		}
	}
	return e
}

// live reports whether the speaker on node is alive.
func (e *env) live(node string) bool { return e.in.Live == nil || e.in.Live[node] }

// excluded reports whether node must never announce whatever the
// advertisements say, and why.
func (e *env) excluded(n *Node) (Reason, string) {
	if n.NetworkUnavailable {
		return ReasonNodeNetworkUnavailable, fmt.Sprintf("node %s has the NetworkUnavailable condition", n.Name)
	}
	if !e.in.Options.IgnoreExcludeLB && n.ExcludedFromLB() {
		return ReasonNodeLabeledExcludeBalancers, fmt.Sprintf("node %s is labeled %s", n.Name, ExcludeFromLBLabel)
	}
	return ReasonNone, ""
}

// checkSelfAndEndpoints applies the node and endpoint rules common to both
// modes to this node. It returns ReasonNone when this node may announce the
// Service as far as those rules go.
func (e *env) checkSelfAndEndpoints() (Reason, string) {
	if e.self == nil {
		return ReasonNotOwner, fmt.Sprintf("this node %q is not in the node list", e.in.Node)
	}
	if r, detail := e.excluded(e.self); r != ReasonNone {
		return r, detail
	}
	if e.in.Service.Local() && !e.selfEndpoint {
		return ReasonNoLocalEndpoints, fmt.Sprintf("externalTrafficPolicy is Local and no serving endpoint runs on node %s", e.in.Node)
	}
	if !e.anyEndpoint {
		return ReasonNoEndpoints, "the Service has no serving endpoint"
	}
	return ReasonNone, ""
}

// hasServingEndpoint reports whether eps has a serving endpoint, on node if
// node != "".
func hasServingEndpoint(eps []Endpoint, node string) bool {
	for _, ep := range eps {
		if ep.CanServe() && (node == "" || ep.NodeName == node) {
			return true
		}
	}
	return false
}

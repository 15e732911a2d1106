package announce

// Reason says why a Service IP is not announced in one mode. The zero value,
// ReasonNone, means it is announced. String returns MetalLB's name for the
// reason (the "reason" log field of MetalLB's speaker), so logs and events
// read the same as MetalLB's.
type Reason uint8

// Reasons. The first group is produced by Decide; the second by callers that
// track state across calls (a deleted Service, a changed IP), kept here so
// that every withdrawal uses one vocabulary.
const (
	// ReasonNone: the IP is announced.
	ReasonNone Reason = iota
	// ReasonNotOwner: another node won the layer 2 election, no node is
	// eligible, or this node's speaker is not live.
	ReasonNotOwner
	// ReasonNoMatchingAdvertisement: no advertisement of this mode covers
	// the IP's pool, the Service (serviceSelectors) and this node
	// (nodeSelectors).
	ReasonNoMatchingAdvertisement
	// ReasonSharedIPWithServiceSelector: the Service carries allow-shared-ip
	// and matches an L2Advertisement with serviceSelectors; Services sharing
	// an IP could then be covered by different advertisements and elect
	// different nodes, so MetalLB refuses to announce it.
	ReasonSharedIPWithServiceSelector
	// ReasonConflictingAdvertisements: two BGPAdvertisements covering the
	// Service on this node set different LOCAL_PREF for the same prefix and
	// peers (see config.LocalPrefCompatible).
	ReasonConflictingAdvertisements
	// ReasonNodeNetworkUnavailable: this node has the NetworkUnavailable
	// condition.
	ReasonNodeNetworkUnavailable
	// ReasonNodeLabeledExcludeBalancers: this node carries the
	// node.kubernetes.io/exclude-from-external-load-balancers label.
	ReasonNodeLabeledExcludeBalancers
	// ReasonNoLocalEndpoints: externalTrafficPolicy is Local and no serving
	// endpoint runs on this node.
	ReasonNoLocalEndpoints
	// ReasonNoEndpoints: the Service has no serving endpoint anywhere.
	ReasonNoEndpoints
	// ReasonNoIPAllocated: the Service has no ingress IP yet.
	ReasonNoIPAllocated
	// ReasonInvalidIP: an ingress IP does not parse.
	ReasonInvalidIP
	// ReasonIPNotAllowed: the IP belongs to no configured pool.
	ReasonIPNotAllowed
	// ReasonNotLoadBalancer: the Service is not of type LoadBalancer.
	ReasonNotLoadBalancer
	// ReasonOtherLoadBalancerClass: the Service's spec.loadBalancerClass is
	// not the one this speaker handles (Options.LoadBalancerClass). Herald
	// addition; MetalLB filters such Services before its handler.
	ReasonOtherLoadBalancerClass
	// ReasonNoMatchingInterface: this node won the layer 2 election for the
	// IP but none of the interfaces its L2Advertisements name (or, when
	// they name none, no interface at all) can answer for the IP's family
	// here (Input.Interfaces). The IP is then announced by no node, as in
	// MetalLB, which emits announceFailed for it. Herald addition (MetalLB
	// has no reason name for it).
	ReasonNoMatchingInterface

	// ReasonLoadBalancerIPChanged: the Service's IPs changed; the old ones
	// are withdrawn first. Produced by callers.
	ReasonLoadBalancerIPChanged
	// ReasonServiceDeleted: the Service is gone. Produced by callers.
	ReasonServiceDeleted

	reasonCount
)

var reasonNames = [reasonCount]string{
	ReasonNone:                        "",
	ReasonNotOwner:                    "notOwner",
	ReasonNoMatchingAdvertisement:     "noMatchingAdvertisement",
	ReasonSharedIPWithServiceSelector: "sharedIPWithServiceSelector",
	ReasonConflictingAdvertisements:   "conflictingAdvertisements",
	ReasonNodeNetworkUnavailable:      "nodeNetworkUnavailable",
	ReasonNodeLabeledExcludeBalancers: "nodeLabeledExcludeBalancers",
	ReasonNoLocalEndpoints:            "noLocalEndpoints",
	ReasonNoEndpoints:                 "noEndpoints",
	ReasonNoIPAllocated:               "noIPAllocated",
	ReasonInvalidIP:                   "invalidIP",
	ReasonIPNotAllowed:                "ipNotAllowed",
	ReasonNotLoadBalancer:             "notLoadBalancer",
	ReasonOtherLoadBalancerClass:      "otherLoadBalancerClass",
	ReasonNoMatchingInterface:         "noMatchingInterface",
	ReasonLoadBalancerIPChanged:       "loadBalancerIPChanged",
	ReasonServiceDeleted:              "serviceDeleted",
}

// String returns MetalLB's name for r ("" for ReasonNone).
func (r Reason) String() string {
	if r >= reasonCount {
		return "unknown"
	}
	return reasonNames[r]
}

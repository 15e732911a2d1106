package ipam

import (
	"fmt"
	"math"
	"net/netip"

	"k8s.io/apimachinery/pkg/labels"
)

// Family is an IP address family.
type Family int

const (
	// IPv4 is the IPv4 family (Kubernetes ipFamilies "IPv4").
	IPv4 Family = iota
	// IPv6 is the IPv6 family (Kubernetes ipFamilies "IPv6").
	IPv6
)

func (f Family) String() string {
	switch f {
	case IPv4:
		return "IPv4"
	case IPv6:
		return "IPv6"
	}
	return fmt.Sprintf("Family(%d)", int(f))
}

func familyOf(a netip.Addr) Family {
	if a.Is4() {
		return IPv4
	}
	return IPv6
}

// FamilyPolicy is the Service's spec.ipFamilyPolicy.
type FamilyPolicy int

const (
	// SingleStack allocates one IP of Request.Families[0].
	SingleStack FamilyPolicy = iota
	// PreferDualStack allocates one IP per family from one pool when a pool
	// offers both, else one IP of Families[0], else one of Families[1]. With
	// a single entry in Families it behaves like SingleStack.
	PreferDualStack
	// RequireDualStack allocates one IP of each family, both from one pool;
	// Families must list both.
	RequireDualStack
)

func (p FamilyPolicy) String() string {
	switch p {
	case SingleStack:
		return "SingleStack"
	case PreferDualStack:
		return "PreferDualStack"
	case RequireDualStack:
		return "RequireDualStack"
	}
	return fmt.Sprintf("FamilyPolicy(%d)", int(p))
}

// Pool is the allocator's view of one IPAddressPool.
type Pool struct {
	// Name is the IPAddressPool name; unique and non-empty.
	Name string
	// Prefixes are spec.addresses in configured order (ranges "a-b" already
	// summarised into prefixes). Allocation walks them in this order. They
	// must not overlap, within the pool or with other pools.
	Prefixes []netip.Prefix
	// AutoAssign is spec.autoAssign (default true). A pool with AutoAssign
	// false serves only Services that name it or request one of its IPs.
	AutoAssign bool
	// AvoidBuggyIPs is spec.avoidBuggyIPs: IPv4 addresses ending in .0 or
	// .255 are never allocated, not even when requested.
	AvoidBuggyIPs bool
	// ServiceAllocation is spec.serviceAllocation; nil when absent.
	ServiceAllocation *ServiceAllocation
}

// ServiceAllocation restricts a pool to some Services and ranks it.
//
// A Service matches when its namespace matches (Namespaces and
// NamespaceSelectors both empty, or the namespace is listed, or one
// NamespaceSelector matches Request.NamespaceLabels) AND its labels match
// (ServiceSelectors empty, or one of them matches Request.Labels). With all
// three lists empty every Service matches, as in MetalLB.
type ServiceAllocation struct {
	// Priority orders matching pools: lower first, 0 (unset) after every
	// positive priority. Ties are broken by pool name.
	Priority int
	// Namespaces lists namespaces the pool serves.
	Namespaces []string
	// NamespaceSelectors select namespaces by their labels; nil entries
	// match nothing.
	NamespaceSelectors []labels.Selector
	// ServiceSelectors select Services by their labels; nil entries match
	// nothing.
	ServiceSelectors []labels.Selector
}

// Port is one Service port as used by the IP-sharing rules.
type Port struct {
	// Protocol is "TCP", "UDP" or "SCTP".
	Protocol string
	// Port is the Service port number.
	Port int32
}

func (p Port) String() string { return fmt.Sprintf("%s/%d", p.Protocol, p.Port) }

// Request is the allocator's own view of one LoadBalancer Service.
//
// The allocator keeps a Request's maps and slices (Labels,
// NamespaceLabels, Families, Ports) as given, without a copy: the caller
// must not modify them after passing them to Allocate or Import (a
// controller passes its informer cache's maps, which are replaced, never
// modified, and Services of one namespace then share one label map).
type Request struct {
	// Key is "namespace/name"; it identifies the Service.
	Key string
	// Namespace of the Service.
	Namespace string
	// NamespaceLabels are the labels of the Service's namespace, for
	// serviceAllocation.namespaceSelectors.
	NamespaceLabels map[string]string
	// Labels are the Service's labels, for serviceAllocation.serviceSelectors.
	Labels map[string]string
	// Families is spec.ipFamilies: one or two distinct families, primary
	// first.
	Families []Family
	// Policy is spec.ipFamilyPolicy.
	Policy FamilyPolicy
	// RequestedIPs come from metallb.io/loadBalancerIPs or
	// spec.loadBalancerIP: at most one per family, each of a family in
	// Families.
	RequestedIPs []netip.Addr
	// PoolName is the metallb.io/address-pool annotation, or "".
	PoolName string
	// SharingKey is the metallb.io/allow-shared-ip annotation, or "".
	SharingKey string
	// Ports are the Service ports; Services sharing an IP must not overlap.
	Ports []Port
	// BackendKey is the Service selector as a string when
	// externalTrafficPolicy is Local, else "". Services sharing an IP must
	// have equal backend keys.
	BackendKey string
}

// Assignment is the set of IPs a Service holds and the pool they come from.
type Assignment struct {
	// IPs holds at most one address per family, primary family first.
	IPs []netip.Addr
	// Pool is the name of the pool all IPs belong to.
	Pool string
	// Dropped, from Allocate only, says why addresses the Service held
	// before are not among IPs (the pool no longer selects it, the address
	// left the pool, another Service now holds it incompatibly, ...): the
	// text of the ClearAssignment event. nil when every held address was
	// kept or none was held.
	Dropped error
}

// PoolStats are the per-family address counters of one pool, the source of
// IPAddressPool status (assignedIPv4, availableIPv4, ...) and of the metrics
// metallb_allocator_addresses_total and metallb_allocator_addresses_in_use_total.
type PoolStats struct {
	Pool string
	// TotalIPv4 and TotalIPv6 count allocatable addresses (avoidBuggyIPs
	// excluded). A pool with an IPv6 prefix of 62 or more host bits (a /66
	// or wider, as MetalLB) has TotalIPv6 = math.MaxInt64.
	TotalIPv4, TotalIPv6 int64
	// AssignedIPv4 and AssignedIPv6 count distinct addresses held by at
	// least one Service; a shared address counts once.
	AssignedIPv4, AssignedIPv6 int64
	// AvailableIPv4 and AvailableIPv6 are Total minus Assigned; an
	// unbounded family stays at math.MaxInt64.
	AvailableIPv4, AvailableIPv6 int64
}

// Total is the value of metallb_allocator_addresses_total: both families,
// saturated at math.MaxInt64.
func (s PoolStats) Total() int64 {
	if s.TotalIPv4 > math.MaxInt64-s.TotalIPv6 {
		return math.MaxInt64
	}
	return s.TotalIPv4 + s.TotalIPv6
}

// InUse is the value of metallb_allocator_addresses_in_use_total.
func (s PoolStats) InUse() int64 { return s.AssignedIPv4 + s.AssignedIPv6 }

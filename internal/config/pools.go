package config

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/herald-lb/herald/api/v1beta1"
)

// Pool is one parsed IPAddressPool. Read-only: a Pool belongs to a Snapshot
// and is shared by every reader of it.
type Pool struct {
	Name   string
	Labels labels.Set // metadata.labels, matched by ipAddressPoolSelectors

	// Blocks holds spec.addresses in configured order; Prefixes is the
	// concatenation of every block's summary, in the same order.
	Blocks   []AddressBlock
	Prefixes []netip.Prefix

	AutoAssign    bool // spec.autoAssign, default true
	AvoidBuggyIPs bool // spec.avoidBuggyIPs: never hand out IPv4 x.x.x.0 or x.x.x.255

	// Allocation is spec.serviceAllocation; nil when the pool is not
	// restricted (any namespace, any Service, priority 0).
	Allocation *ServiceAllocation

	// The advertisements selecting this pool, sorted by name. With
	// Options.NodeName set, BGPAdvertisements for other nodes are absent.
	L2Advertisements  []*L2Advertisement
	BGPAdvertisements []*BGPAdvertisement
}

// Advertised reports whether any advertisement selects the pool. An
// unadvertised pool still hands out addresses, but no node announces them.
// In a node's snapshot (Options.NodeName) it means "advertised from this
// node" for BGP.
func (p *Pool) Advertised() bool {
	return len(p.L2Advertisements) > 0 || len(p.BGPAdvertisements) > 0
}

// Covers reports whether every address of o's blocks lies in one of p's
// blocks (AvoidBuggyIPs aside): false means a change from o to p removes
// addresses. Blocks of one pool never overlap (Build refuses that).
func (p *Pool) Covers(o *Pool) bool {
	for _, b := range o.Blocks {
		ip := b.First
		for {
			i := slices.IndexFunc(p.Blocks, func(c AddressBlock) bool { return c.Contains(ip) })
			if i < 0 {
				return false
			}
			last := p.Blocks[i].Last
			if last.Compare(b.Last) >= 0 {
				break
			}
			ip = last.Next()
		}
	}
	return true
}

// HasIPv4 reports whether the pool contains IPv4 addresses.
func (p *Pool) HasIPv4() bool {
	return slices.ContainsFunc(p.Blocks, func(b AddressBlock) bool { return b.First.Is4() })
}

// HasIPv6 reports whether the pool contains IPv6 addresses.
func (p *Pool) HasIPv6() bool {
	return slices.ContainsFunc(p.Blocks, func(b AddressBlock) bool { return b.First.Is6() })
}

// Contains reports whether ip lies in one of the pool's blocks, ignoring
// AvoidBuggyIPs.
func (p *Pool) Contains(ip netip.Addr) bool {
	return slices.ContainsFunc(p.Blocks, func(b AddressBlock) bool { return b.Contains(ip) })
}

// Priority returns spec.serviceAllocation.priority (0 when unset). Lower
// values rank first, except that 0 ranks after every positive priority.
func (p *Pool) Priority() int {
	if p.Allocation == nil {
		return 0
	}
	return p.Allocation.Priority
}

// ServiceAllocation is a parsed spec.serviceAllocation. The snapshot holds
// the selectors, not the namespaces they match: the controller's allocator
// (internal/ipam) matches a Service's namespace and its labels when it
// allocates, so a Namespace label change neither changes the snapshot nor
// makes a speaker re-decide its Services.
type ServiceAllocation struct {
	Priority int

	// Namespaces is spec.serviceAllocation.namespaces, sorted.
	Namespaces []string
	// NamespaceSelectors is spec.serviceAllocation.namespaceSelectors.
	NamespaceSelectors []labels.Selector
	// ServiceSelectors restricts the pool to Services whose labels match at
	// least one selector; empty means any Service.
	ServiceSelectors []labels.Selector
}

// buildPools parses every IPAddressPool, then checks that no two blocks in
// any pools overlap. The result is sorted by name.
func buildPools(objs []v1beta1.IPAddressPool, p *problems) []*Pool {
	var pools []*Pool
	byName := map[string]bool{}
	var blocks []blockRef
	for i := range objs {
		obj := &objs[i]
		ref := objRef{KindIPAddressPool, obj.Namespace, obj.Name}
		if byName[obj.Name] {
			p.add(ref.invalid("metadata.name", "", "duplicate IPAddressPool name"))
			continue
		}
		byName[obj.Name] = true
		pool := buildPool(ref, obj, p)
		if pool == nil {
			continue
		}
		pools = append(pools, pool)
		for j, b := range pool.Blocks {
			blocks = append(blocks, blockRef{pool: pool.Name, index: j, block: b})
		}
	}
	ns := map[string]string{}
	for i := range objs {
		ns[objs[i].Name] = objs[i].Namespace
	}
	for _, o := range findOverlaps(blocks) {
		// Report on the block that sorts second, naming the first.
		ref := objRef{KindIPAddressPool, ns[o.b.pool], o.b.pool}
		where := fmt.Sprintf("spec.addresses[%d] %q", o.a.index, o.a.block.Spec)
		if o.a.pool != o.b.pool {
			where = fmt.Sprintf("IPAddressPool %s/%s %s", ns[o.a.pool], o.a.pool, where)
		}
		p.add(ref.invalid(fmt.Sprintf("spec.addresses[%d]", o.b.index), o.b.block.Spec, "overlaps with %s; addresses must not overlap within or across pools", where))
	}
	slices.SortFunc(pools, func(a, b *Pool) int { return strings.Compare(a.Name, b.Name) })
	return pools
}

func buildPool(ref objRef, obj *v1beta1.IPAddressPool, p *problems) *Pool {
	ok := true
	pool := &Pool{
		Name:          obj.Name,
		Labels:        labels.Set(maps.Clone(obj.Labels)),
		AutoAssign:    obj.Spec.AutoAssign == nil || *obj.Spec.AutoAssign,
		AvoidBuggyIPs: obj.Spec.AvoidBuggyIPs,
	}
	if len(obj.Spec.Addresses) == 0 {
		p.add(ref.invalid("spec.addresses", "", "at least one CIDR or range is required"))
		ok = false
	}
	for i, s := range obj.Spec.Addresses {
		field := fmt.Sprintf("spec.addresses[%d]", i)
		b, masked, err := parseAddressBlock(s)
		if err != nil {
			p.add(ref.invalid(field, s, "%s", err))
			ok = false
			continue
		}
		if masked {
			p.warn(ref, field, "%q has host bits set; using %s", b.Spec, b.Prefixes[0])
		}
		pool.Blocks = append(pool.Blocks, b)
		pool.Prefixes = append(pool.Prefixes, b.Prefixes...)
	}
	if sa := obj.Spec.ServiceAllocation; sa != nil {
		a, aok := buildAllocation(ref, sa, p)
		pool.Allocation = a
		ok = ok && aok
	}
	if !ok {
		return nil
	}
	return pool
}

func buildAllocation(ref objRef, sa *v1beta1.ServiceAllocation, p *problems) (*ServiceAllocation, bool) {
	ok := true
	a := &ServiceAllocation{Priority: sa.Priority}
	seen := map[string]int{}
	for i, ns := range sa.Namespaces {
		field := fmt.Sprintf("spec.serviceAllocation.namespaces[%d]", i)
		if ns == "" {
			p.add(ref.invalid(field, "", "namespace name must not be empty"))
			ok = false
			continue
		}
		if j, dup := seen[ns]; dup {
			p.add(ref.invalid(field, ns, "duplicate of spec.serviceAllocation.namespaces[%d]", j))
			ok = false
			continue
		}
		seen[ns] = i
		a.Namespaces = append(a.Namespaces, ns)
	}
	slices.Sort(a.Namespaces)
	n := len(p.invalid)
	a.NamespaceSelectors = convertSelectors(ref, "spec.serviceAllocation.namespaceSelectors", sa.NamespaceSelectors, p)
	a.ServiceSelectors = convertSelectors(ref, "spec.serviceAllocation.serviceSelectors", sa.ServiceSelectors, p)
	if len(p.invalid) != n {
		ok = false
	}
	return a, ok
}

package ipam

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
)

// pool is a configured pool with its per-family free sets.
type pool struct {
	cfg  Pool
	sets [2]*rangeSet // indexed by Family; nil when the pool has no prefix of that family
}

func (p *pool) set(f Family) *rangeSet { return p.sets[f] }

// matches reports whether the pool's serviceAllocation selects r (see
// ServiceAllocation). A pool without serviceAllocation matches everything.
func (p *pool) matches(r *Request) bool {
	ok, _ := p.cfg.Selects(r)
	return ok
}

// Selects reports whether the pool's serviceAllocation selects r (see
// ServiceAllocation; a pool without one selects every Service), and when it
// does not, why: "namespace ns is not in namespaces [...] and matches no
// namespaceSelector", "labels ... match no serviceSelector". It does not
// look at AutoAssign (see Allocator.Candidates).
func (p *Pool) Selects(r *Request) (bool, string) {
	sa := p.ServiceAllocation
	if sa == nil {
		return true, ""
	}
	var why []string
	if len(sa.Namespaces) > 0 || len(sa.NamespaceSelectors) > 0 {
		if !slices.Contains(sa.Namespaces, r.Namespace) && !anyMatches(sa.NamespaceSelectors, r.NamespaceLabels) {
			var parts []string
			if len(sa.Namespaces) > 0 {
				parts = append(parts, fmt.Sprintf("is not in serviceAllocation.namespaces %v", sa.Namespaces))
			}
			if len(sa.NamespaceSelectors) > 0 {
				parts = append(parts, fmt.Sprintf("its labels {%s} match none of serviceAllocation.namespaceSelectors %v",
					labels.Set(r.NamespaceLabels).String(), selectorTexts(sa.NamespaceSelectors)))
			}
			why = append(why, fmt.Sprintf("namespace %q %s", r.Namespace, strings.Join(parts, " and ")))
		}
	}
	if len(sa.ServiceSelectors) > 0 && !anyMatches(sa.ServiceSelectors, r.Labels) {
		why = append(why, fmt.Sprintf("the Service's labels {%s} match none of serviceAllocation.serviceSelectors %v",
			labels.Set(r.Labels).String(), selectorTexts(sa.ServiceSelectors)))
	}
	if len(why) > 0 {
		return false, strings.Join(why, "; ")
	}
	return true, ""
}

func selectorTexts(sels []labels.Selector) []string {
	out := make([]string, 0, len(sels))
	for _, s := range sels {
		if s == nil {
			out = append(out, "<nothing>")
			continue
		}
		out = append(out, "{"+s.String()+"}")
	}
	return out
}

func anyMatches(sels []labels.Selector, set map[string]string) bool {
	for _, s := range sels {
		if s != nil && s.Matches(labels.Set(set)) {
			return true
		}
	}
	return false
}

// prefixRef locates a configured prefix for address-to-pool lookup.
type prefixRef struct {
	first, last u128
	pool        *pool
}

// poolIndex is an immutable view of the configured pools.
type poolIndex struct {
	byName  map[string]*pool
	names   []string       // sorted
	pinned  []*pool        // serviceAllocation set, autoAssign: by priority (0 last), then name
	general []*pool        // no serviceAllocation, autoAssign: by name
	refs    [2][]prefixRef // per family, sorted by first address
}

// priorityLess orders serviceAllocation priorities: positive (and negative)
// values ascending, 0 (unset) last.
func priorityLess(a, b int) int {
	switch {
	case a == b:
		return 0
	case a == 0:
		return 1
	case b == 0:
		return -1
	}
	return cmp.Compare(a, b)
}

// buildPools validates cfgs and builds the index. It wraps ErrInvalidPool.
// Cost: O(P log P + A log A) for P pools and A prefixes.
func buildPools(cfgs []Pool) (*poolIndex, error) {
	idx := &poolIndex{byName: make(map[string]*pool, len(cfgs))}
	for _, c := range cfgs {
		if c.Name == "" {
			return nil, newErr(ErrInvalidPool, "address pool with an empty name")
		}
		if _, dup := idx.byName[c.Name]; dup {
			return nil, newErr(ErrInvalidPool, fmt.Sprintf("address pool %q is listed twice", c.Name))
		}
		p := &pool{cfg: c}
		p.cfg.Prefixes = nil
		if sa := c.ServiceAllocation; sa != nil {
			p.cfg.ServiceAllocation = &ServiceAllocation{
				Priority:           sa.Priority,
				Namespaces:         slices.Clone(sa.Namespaces),
				NamespaceSelectors: slices.Clone(sa.NamespaceSelectors),
				ServiceSelectors:   slices.Clone(sa.ServiceSelectors),
			}
		}
		var byFam [2][]netip.Prefix
		for _, pf := range c.Prefixes {
			if !pf.IsValid() || pf.Addr().Is4In6() || pf.Addr().Zone() != "" {
				return nil, newErr(ErrInvalidPool, fmt.Sprintf("address pool %q: invalid prefix %q", c.Name, pf.String()))
			}
			pf = pf.Masked()
			p.cfg.Prefixes = append(p.cfg.Prefixes, pf)
			f := familyOf(pf.Addr())
			byFam[f] = append(byFam[f], pf)
		}
		for f, pfs := range byFam {
			if len(pfs) == 0 {
				continue
			}
			p.sets[f] = newRangeSet(Family(f), pfs, c.AvoidBuggyIPs)
			for _, sg := range p.sets[f].segs {
				idx.refs[f] = append(idx.refs[f], prefixRef{first: sg.first, last: sg.last, pool: p})
			}
		}
		idx.byName[c.Name] = p
		idx.names = append(idx.names, c.Name)
	}
	sort.Strings(idx.names)
	for f := range idx.refs {
		refs := idx.refs[f]
		sort.Slice(refs, func(i, j int) bool { return refs[i].first.cmp(refs[j].first) < 0 })
		for i := 1; i < len(refs); i++ {
			if refs[i].first.cmp(refs[i-1].last) <= 0 {
				return nil, newErr(ErrInvalidPool, fmt.Sprintf("prefix %s of address pool %q overlaps prefix %s of address pool %q",
					prefixOfRef(refs[i]), refs[i].pool.cfg.Name, prefixOfRef(refs[i-1]), refs[i-1].pool.cfg.Name))
			}
		}
	}
	for _, n := range idx.names {
		p := idx.byName[n]
		if !p.cfg.AutoAssign {
			continue
		}
		if p.cfg.ServiceAllocation == nil {
			idx.general = append(idx.general, p)
		} else {
			idx.pinned = append(idx.pinned, p)
		}
	}
	// Stable sort on a name-sorted list: ties in priority stay in name order.
	slices.SortStableFunc(idx.pinned, func(a, b *pool) int {
		return priorityLess(a.cfg.ServiceAllocation.Priority, b.cfg.ServiceAllocation.Priority)
	})
	return idx, nil
}

func prefixOfRef(r prefixRef) string {
	for _, rs := range r.pool.sets {
		if rs == nil {
			continue
		}
		for _, sg := range rs.segs {
			if sg.first == r.first && sg.last == r.last {
				return sg.prefix.String()
			}
		}
	}
	return "?"
}

// poolOf returns the pool whose prefixes contain a (whether or not a is
// allocatable there), or nil. O(log A).
func (idx *poolIndex) poolOf(a netip.Addr) *pool {
	refs := idx.refs[familyOf(a)]
	v := addrToU128(a)
	i := sort.Search(len(refs), func(i int) bool { return refs[i].first.cmp(v) > 0 })
	if i == 0 || v.cmp(refs[i-1].last) > 0 {
		return nil
	}
	return refs[i-1].pool
}

// candidates returns the pools an automatic allocation for r tries, in
// order: matching pinned pools (priority, then name), then general pools
// (name).
func (idx *poolIndex) candidates(r *Request) []*pool {
	var out []*pool
	for _, p := range idx.pinned {
		if p.matches(r) {
			out = append(out, p)
		}
	}
	return append(out, idx.general...)
}

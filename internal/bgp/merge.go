package bgp

import (
	"cmp"
	"net/netip"
	"slices"
)

// MergePaths folds announcement reasons (one Path per advertisement and
// Service IP) into the desired state: one Path per masked prefix, sorted by
// prefix. For paths with the same prefix:
//
//   - Communities and LargeCommunities are unioned, sorted and deduplicated
//     (MetalLB native behaviour for merged advertisements).
//   - LocalPref: unset values are ignored; equal values are kept. Differing
//     values should have been rejected by config validation (MetalLB
//     BGPAdvertisementsHaveCompatibleLocalPref); defensively the highest wins
//     and the prefix is reported in conflicts.
//   - Peers are unioned; if any reason has no Peers restriction (all peers),
//     the result is unrestricted.
//   - Weight: if every reason carries one, the sum over the distinct
//     WeightSources of each source's largest Weight (capped at MaxWeight):
//     Services sharing a prefix (an aggregated prefix, a shared IP) add up,
//     one Service announced through two advertisements counts once. If any
//     reason has Weight 0, the merged path has none: that reason asks for
//     plain ECMP, and a router weighs only paths that all carry the
//     community. WeightSource is "" in the result.
//
// Note: attributes are merged per prefix, not per peer. If two reasons for
// the same prefix go to disjoint peer lists with different communities, both
// peers receive the union (MetalLB native merges per session instead).
//
// A prefix disappears from the result only when its last reason is gone.
// Complexity O(n log n) in the number of input paths. Inputs are not modified.
func MergePaths(in []Path) (out []Path, conflicts []netip.Prefix) {
	byPrefix := make(map[netip.Prefix]int, len(in))
	// weights[i] holds, per WeightSource, the largest Weight of out[i]'s
	// reasons; nil once a reason without Weight was seen (and for prefixes
	// with a single reason, the common case: no map is allocated).
	var weights map[int]map[string]uint32
	unweighted := map[int]bool{}
	for _, p := range in {
		pfx := p.Prefix.Masked()
		i, ok := byPrefix[pfx]
		if !ok {
			byPrefix[pfx] = len(out)
			out = append(out, Path{
				Prefix:           pfx,
				Communities:      slices.Clone(p.Communities),
				LargeCommunities: slices.Clone(p.LargeCommunities),
				LocalPref:        clonePtr(p.LocalPref),
				Peers:            slices.Clone(p.Peers),
				Weight:           min(p.Weight, MaxWeight),
				WeightSource:     p.WeightSource,
			})
			continue
		}
		m := &out[i]
		switch {
		case unweighted[i]:
		case p.Weight == 0 || m.Weight == 0:
			unweighted[i] = true
			delete(weights, i)
			m.Weight = 0
		default:
			if weights == nil {
				weights = map[int]map[string]uint32{}
			}
			w := weights[i]
			if w == nil {
				w = map[string]uint32{m.WeightSource: m.Weight}
				weights[i] = w
			}
			w[p.WeightSource] = max(w[p.WeightSource], p.Weight)
			var sum uint64
			for _, v := range w {
				sum += uint64(v)
			}
			m.Weight = uint32(min(sum, MaxWeight))
		}
		m.Communities = append(m.Communities, p.Communities...)
		m.LargeCommunities = append(m.LargeCommunities, p.LargeCommunities...)
		switch {
		case p.LocalPref == nil:
		case m.LocalPref == nil:
			m.LocalPref = clonePtr(p.LocalPref)
		case *m.LocalPref != *p.LocalPref:
			if !slices.Contains(conflicts, pfx) {
				conflicts = append(conflicts, pfx)
			}
			if *p.LocalPref > *m.LocalPref {
				m.LocalPref = clonePtr(p.LocalPref)
			}
		}
		if len(m.Peers) == 0 || len(p.Peers) == 0 {
			m.Peers = nil
		} else {
			m.Peers = append(m.Peers, p.Peers...)
		}
	}
	for i := range out {
		out[i] = normalize(out[i])
		out[i].WeightSource = ""
	}
	slices.SortFunc(out, func(a, b Path) int { return comparePrefix(a.Prefix, b.Prefix) })
	slices.SortFunc(conflicts, comparePrefix)
	return out, conflicts
}

// normalize sorts and deduplicates the list fields and turns empty lists into nil.
func normalize(p Path) Path {
	p.Prefix = p.Prefix.Masked()
	slices.Sort(p.Communities)
	p.Communities = nilIfEmpty(slices.Compact(p.Communities))
	slices.SortFunc(p.LargeCommunities, compareLarge)
	p.LargeCommunities = nilIfEmpty(slices.Compact(p.LargeCommunities))
	slices.Sort(p.Peers)
	p.Peers = nilIfEmpty(slices.Compact(p.Peers))
	return p
}

// Equal reports whether two paths announce the same thing (after normalisation
// of list order and duplicates).
func (p Path) Equal(o Path) bool {
	a, b := normalize(clonePath(p)), normalize(clonePath(o))
	return a.Prefix == b.Prefix &&
		slices.Equal(a.Communities, b.Communities) &&
		slices.Equal(a.LargeCommunities, b.LargeCommunities) &&
		slices.Equal(a.Peers, b.Peers) &&
		a.Weight == b.Weight && a.WeightSource == b.WeightSource &&
		(a.LocalPref == nil) == (b.LocalPref == nil) &&
		(a.LocalPref == nil || *a.LocalPref == *b.LocalPref)
}

func clonePath(p Path) Path {
	p.Communities = slices.Clone(p.Communities)
	p.LargeCommunities = slices.Clone(p.LargeCommunities)
	p.Peers = slices.Clone(p.Peers)
	p.LocalPref = clonePtr(p.LocalPref)
	return p
}

func clonePtr(v *uint32) *uint32 {
	if v == nil {
		return nil
	}
	c := *v
	return &c
}

func nilIfEmpty[S ~[]E, E any](s S) S {
	if len(s) == 0 {
		return nil
	}
	return s
}

func compareLarge(a, b [3]uint32) int {
	return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]), cmp.Compare(a[2], b[2]))
}

// comparePrefix orders IPv4 before IPv6, then by address, then by length.
func comparePrefix(a, b netip.Prefix) int {
	return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
}

package ipam

import (
	"math"
	"net/netip"
	"sort"

	"github.com/google/btree"
)

// rangeSet tracks the free addresses of one family of one pool as an ordered
// set of free intervals (a B-tree keyed by position).
//
// Positions order the pool's addresses the way allocation walks them: first
// by segment (one segment per configured prefix, in configured order), then
// by coordinate inside the segment. A coordinate is the address itself,
// except in IPv4 pools with avoidBuggyIPs, where coordinates count only the
// .1-.254 addresses so that .0 and .255 never exist as free positions and
// lowest-free never has to skip them.
//
// Complexity, with n the number of free intervals (at most the number of
// held addresses plus the number of segments) and p the number of segments:
// lowest (lowest free address) is O(log n); take (allocate a given address)
// and put (free it) are O(log p + log n); memory is O(n + p). Nothing
// depends on the pool size or fill level, so an IPv6 /64 costs the same as
// an IPv4 /30.
type rangeSet struct {
	family   Family
	compress bool // IPv4 avoidBuggyIPs coordinates
	segs     []segment
	byAddr   []int // indexes into segs, sorted by prefix start address
	free     *btree.BTreeG[span]
	total    int64 // allocatable addresses, saturated at math.MaxInt64
	used     int64 // addresses taken
}

// segment is one configured prefix with its coordinate bounds.
type segment struct {
	prefix      netip.Prefix
	first, last u128 // address bounds of the prefix
	lo, hi      u128 // coordinate bounds, inclusive; meaningless if empty
	empty       bool // no allocatable address (e.g. 10.0.0.255/32 with avoidBuggyIPs)
}

// span is a free interval [lo, hi] of coordinates in segment seg.
type span struct {
	seg    int
	lo, hi u128
}

func spanLess(a, b span) bool {
	if a.seg != b.seg {
		return a.seg < b.seg
	}
	return a.lo.cmp(b.lo) < 0
}

// bigIPv6HostBits is the host-bit count from which an IPv6 prefix counts as
// unbounded (math.MaxInt64) in statistics, as MetalLB's poolCount does.
const bigIPv6HostBits = 62

// btreeDegree trades node size against depth; 32 keeps a 60k-interval tree
// at depth 3.
const btreeDegree = 32

// newRangeSet builds the free set of one family from prefixes, which must be
// of that family, masked and mutually disjoint. All addresses start free.
func newRangeSet(f Family, prefixes []netip.Prefix, avoidBuggy bool) *rangeSet {
	rs := &rangeSet{
		family:   f,
		compress: f == IPv4 && avoidBuggy,
		free:     btree.NewG(btreeDegree, spanLess),
	}
	for i, p := range prefixes {
		first, last := prefixBounds(p)
		sg := segment{prefix: p, first: first, last: last}
		if rs.compress {
			lo, okLo := nonBuggyUp(first)
			hi, okHi := nonBuggyDown(last)
			if !okLo || !okHi || lo.cmp(hi) > 0 {
				sg.empty = true
			} else {
				sg.lo, sg.hi = compressCoord(lo), compressCoord(hi)
			}
		} else {
			sg.lo, sg.hi = first, last
		}
		rs.segs = append(rs.segs, sg)
		rs.byAddr = append(rs.byAddr, i)
		if sg.empty {
			continue
		}
		rs.free.ReplaceOrInsert(span{seg: i, lo: sg.lo, hi: sg.hi})
		if f == IPv6 && p.Addr().BitLen()-p.Bits() >= bigIPv6HostBits {
			rs.total = math.MaxInt64
			continue
		}
		size := sg.hi.sub(sg.lo).lo + 1 // < 2^62 here
		if rs.total > math.MaxInt64-int64(size) {
			rs.total = math.MaxInt64
		} else {
			rs.total += int64(size)
		}
	}
	sort.Slice(rs.byAddr, func(i, j int) bool {
		return rs.segs[rs.byAddr[i]].first.cmp(rs.segs[rs.byAddr[j]].first) < 0
	})
	return rs
}

// nonBuggyUp returns the smallest IPv4 address >= v not ending in .0/.255.
func nonBuggyUp(v u128) (u128, bool) {
	switch v.lo & 0xff {
	case 0:
		return u128{0, v.lo + 1}, true
	case 255:
		if v.lo+2 > math.MaxUint32 {
			return u128{}, false
		}
		return u128{0, v.lo + 2}, true
	}
	return v, true
}

// nonBuggyDown returns the largest IPv4 address <= v not ending in .0/.255.
func nonBuggyDown(v u128) (u128, bool) {
	switch v.lo & 0xff {
	case 255:
		return u128{0, v.lo - 1}, true
	case 0:
		if v.lo < 2 {
			return u128{}, false
		}
		return u128{0, v.lo - 2}, true
	}
	return v, true
}

// compressCoord maps a non-buggy IPv4 address to its rank among all
// non-buggy IPv4 addresses (254 per /24).
func compressCoord(v u128) u128 {
	return u128{0, (v.lo>>8)*254 + (v.lo & 0xff) - 1}
}

func (rs *rangeSet) coordToAddr(c u128) netip.Addr {
	if rs.compress {
		return u128ToAddr(u128{0, (c.lo/254)<<8 | (c.lo%254 + 1)}, IPv4)
	}
	return u128ToAddr(c, rs.family)
}

// locate returns the position of a, or ok=false if a is not an allocatable
// address of this set (outside every prefix, or skipped by avoidBuggyIPs).
// O(log p).
func (rs *rangeSet) locate(a netip.Addr) (seg int, c u128, ok bool) {
	if familyOf(a) != rs.family || (rs.compress && isBuggy(a)) {
		return 0, u128{}, false
	}
	v := addrToU128(a)
	i := sort.Search(len(rs.byAddr), func(i int) bool {
		return rs.segs[rs.byAddr[i]].first.cmp(v) > 0
	})
	if i == 0 {
		return 0, u128{}, false
	}
	seg = rs.byAddr[i-1]
	sg := &rs.segs[seg]
	if sg.empty || v.cmp(sg.last) > 0 {
		return 0, u128{}, false
	}
	if rs.compress {
		return seg, compressCoord(v), true
	}
	return seg, v, true
}

// contains reports whether a is an allocatable address of this set.
func (rs *rangeSet) contains(a netip.Addr) bool {
	_, _, ok := rs.locate(a)
	return ok
}

// spanAt returns the free span containing (seg, c), if any. O(log n).
func (rs *rangeSet) spanAt(seg int, c u128) (span, bool) {
	var found span
	ok := false
	rs.free.DescendLessOrEqual(span{seg: seg, lo: c}, func(s span) bool {
		if s.seg == seg && s.hi.cmp(c) >= 0 {
			found, ok = s, true
		}
		return false
	})
	return found, ok
}

// lowest returns the lowest free address in allocation order. O(log n).
func (rs *rangeSet) lowest() (netip.Addr, bool) {
	s, ok := rs.free.Min()
	if !ok {
		return netip.Addr{}, false
	}
	return rs.coordToAddr(s.lo), true
}

// isFree reports whether a is allocatable and not taken.
func (rs *rangeSet) isFree(a netip.Addr) bool {
	seg, c, ok := rs.locate(a)
	if !ok {
		return false
	}
	_, ok = rs.spanAt(seg, c)
	return ok
}

// take marks a as used. It returns false, changing nothing, if a is not a
// free allocatable address.
func (rs *rangeSet) take(a netip.Addr) bool {
	seg, c, ok := rs.locate(a)
	if !ok {
		return false
	}
	s, ok := rs.spanAt(seg, c)
	if !ok {
		return false
	}
	switch {
	case s.lo == c && s.hi == c:
		rs.free.Delete(s)
	case s.lo == c:
		rs.free.Delete(s)
		rs.free.ReplaceOrInsert(span{seg: seg, lo: c.add1(), hi: s.hi})
	case s.hi == c:
		rs.free.ReplaceOrInsert(span{seg: seg, lo: s.lo, hi: c.sub1()})
	default:
		rs.free.ReplaceOrInsert(span{seg: seg, lo: s.lo, hi: c.sub1()})
		rs.free.ReplaceOrInsert(span{seg: seg, lo: c.add1(), hi: s.hi})
	}
	rs.used++
	return true
}

// put returns a to the free set, merging it with adjacent free intervals of
// the same segment. It returns false, changing nothing, if a is not an
// allocatable address or is already free.
func (rs *rangeSet) put(a netip.Addr) bool {
	seg, c, ok := rs.locate(a)
	if !ok {
		return false
	}
	if _, free := rs.spanAt(seg, c); free {
		return false
	}
	n := span{seg: seg, lo: c, hi: c}
	// Predecessor: the last span starting before c.
	var pred span
	hasPred := false
	rs.free.DescendLessOrEqual(n, func(s span) bool {
		pred, hasPred = s, true
		return false
	})
	if hasPred && pred.seg == seg && pred.hi.add1() == c {
		rs.free.Delete(pred)
		n.lo = pred.lo
	}
	// Successor: the first span starting after c.
	var succ span
	hasSucc := false
	rs.free.AscendGreaterOrEqual(span{seg: seg, lo: c}, func(s span) bool {
		succ, hasSucc = s, true
		return false
	})
	if hasSucc && succ.seg == seg && c.add1() == succ.lo {
		rs.free.Delete(succ)
		n.hi = succ.hi
	}
	rs.free.ReplaceOrInsert(n)
	rs.used--
	return true
}

// position returns the allocation-order position of a held or free
// allocatable address, for ordering candidates. ok is false if a is not in
// the set.
func (rs *rangeSet) position(a netip.Addr) (span, bool) {
	seg, c, ok := rs.locate(a)
	return span{seg: seg, lo: c}, ok
}

// spans returns the number of free intervals (for tests and benchmarks).
func (rs *rangeSet) spans() int { return rs.free.Len() }

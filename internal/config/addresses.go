package config

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// AddressBlock is one entry of IPAddressPool spec.addresses, parsed.
// First..Last is the inclusive range; Prefixes is the same range summarised
// into the fewest CIDR prefixes, in address order.
type AddressBlock struct {
	Spec     string         // the entry as written (whitespace trimmed)
	First    netip.Addr     // first address, inclusive
	Last     netip.Addr     // last address, inclusive; same family as First
	Prefixes []netip.Prefix // summary of First..Last, masked, ascending
}

// Contains reports whether ip lies in the block.
func (b AddressBlock) Contains(ip netip.Addr) bool {
	return ip.BitLen() == b.First.BitLen() && b.First.Compare(ip) <= 0 && ip.Compare(b.Last) <= 0
}

// minBits returns the shortest prefix length among the block's prefixes,
// which an aggregation length must not undercut.
func (b AddressBlock) minBits() int {
	m := b.First.BitLen()
	for _, p := range b.Prefixes {
		m = min(m, p.Bits())
	}
	return m
}

// parseAddressBlock parses a CIDR ("10.0.0.0/24", "fc00::/120") or an
// inclusive range ("10.0.0.1-10.0.0.9"), trimming whitespace around the entry
// and around both range ends. A CIDR with host bits set is masked; masked
// reports that so a warning can be raised.
func parseAddressBlock(s string) (b AddressBlock, masked bool, err error) {
	s = strings.TrimSpace(s)
	b.Spec = s
	if s == "" {
		return b, false, errors.New("empty address entry; expected a CIDR (10.0.0.0/24) or a range (10.0.0.1-10.0.0.9)")
	}
	if start, end, ok := strings.Cut(s, "-"); ok {
		first, err := parseHost(strings.TrimSpace(start), "range start")
		if err != nil {
			return b, false, err
		}
		last, err := parseHost(strings.TrimSpace(end), "range end")
		if err != nil {
			return b, false, err
		}
		if first.Is4() != last.Is4() {
			return b, false, errors.New("range start and end are of different IP families")
		}
		if first.Compare(last) > 0 {
			return b, false, errors.New("range start is after end")
		}
		b.First, b.Last = first, last
		b.Prefixes = summarize(first, last)
		return b, false, nil
	}
	if !strings.Contains(s, "/") {
		if a, err := netip.ParseAddr(s); err == nil {
			return b, false, fmt.Errorf("a single address needs a prefix length: write %s/%d", s, a.BitLen())
		}
		return b, false, errors.New("not a CIDR (10.0.0.0/24) or a range (10.0.0.1-10.0.0.9)")
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		msg := err.Error()
		if _, after, ok := strings.Cut(msg, "): "); ok {
			msg = after
		}
		return b, false, fmt.Errorf("invalid CIDR: %s", msg)
	}
	if p.Addr().Zone() != "" {
		return b, false, errors.New("invalid CIDR: IPv6 zones are not allowed")
	}
	if p.Addr().Is4In6() {
		return b, false, errors.New("IPv4-mapped IPv6 prefix; write the IPv4 form")
	}
	m := p.Masked()
	b.First = m.Addr()
	b.Last = lastAddr(m)
	b.Prefixes = []netip.Prefix{m}
	return b, m != p, nil
}

func parseHost(s, what string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%s %q is not an IP address", what, s)
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%s %q has an IPv6 zone, which a pool cannot use", what, s)
	}
	if a.Is4In6() {
		return netip.Addr{}, fmt.Errorf("%s %q is an IPv4-mapped IPv6 address; write the IPv4 form", what, s)
	}
	return a, nil
}

// lastAddr returns the last address of a masked prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Addr().AsSlice()
	bits := p.Bits()
	for i := range a {
		lo := i * 8
		switch {
		case lo >= bits:
			a[i] = 0xff
		case lo+8 > bits:
			a[i] |= byte(0xff >> (bits - lo))
		}
	}
	r, _ := netip.AddrFromSlice(a)
	return r
}

// summarize returns the fewest prefixes that exactly cover first..last
// (inclusive, same family, first <= last), in ascending order. At most
// 2*bitlen prefixes result.
func summarize(first, last netip.Addr) []netip.Prefix {
	var out []netip.Prefix
	bitlen := first.BitLen()
	for {
		// Largest prefix that starts at first (alignment) and ends <= last.
		bits := bitlen - trailingZeros(first)
		for ; bits < bitlen; bits++ {
			p := netip.PrefixFrom(first, bits)
			if lastAddr(p).Compare(last) <= 0 {
				break
			}
		}
		p := netip.PrefixFrom(first, bits)
		out = append(out, p)
		end := lastAddr(p)
		if end.Compare(last) >= 0 {
			return out
		}
		first = end.Next()
	}
}

// trailingZeros counts the trailing zero bits of a (bitlen when a is zero).
func trailingZeros(a netip.Addr) int {
	s := a.AsSlice()
	n := 0
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == 0 {
			n += 8
			continue
		}
		for b := s[i]; b&1 == 0; b >>= 1 {
			n++
		}
		break
	}
	return n
}

// blockRef locates one address block: pool name and index in spec.addresses.
type blockRef struct {
	pool  string
	index int
	block AddressBlock
}

// overlap is one pair of overlapping blocks.
type overlap struct{ a, b blockRef }

// findOverlaps returns every pair of blocks that share at least one address
// (within a pool or across pools). Blocks are compared as ranges after a sort
// by start address; the running maximum end finds each block that starts
// inside an earlier one. O(n log n) plus the number of overlaps reported.
func findOverlaps(blocks []blockRef) []overlap {
	sorted := slices.Clone(blocks)
	slices.SortFunc(sorted, func(x, y blockRef) int {
		if c := x.block.First.Compare(y.block.First); c != 0 {
			return c
		}
		return y.block.Last.Compare(x.block.Last) // longer first
	})
	var out []overlap
	maxIdx := -1
	for i, cur := range sorted {
		if maxIdx >= 0 {
			prev := sorted[maxIdx]
			if prev.block.First.BitLen() == cur.block.First.BitLen() && cur.block.First.Compare(prev.block.Last) <= 0 {
				out = append(out, overlap{a: prev, b: cur})
			}
		}
		if maxIdx < 0 || cur.block.First.BitLen() != sorted[maxIdx].block.First.BitLen() || cur.block.Last.Compare(sorted[maxIdx].block.Last) > 0 {
			maxIdx = i
		}
	}
	return out
}

// isBuggyIP reports whether ip is an IPv4 address ending in .0 or .255,
// which some old client stacks mishandle (IPAddressPool spec.avoidBuggyIPs).
func isBuggyIP(ip netip.Addr) bool {
	if !ip.Is4() {
		return false
	}
	b := ip.As4()
	return b[3] == 0 || b[3] == 255
}

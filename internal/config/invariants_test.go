package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// checkInvariants verifies what every Snapshot promises its readers.
func checkInvariants(s *Snapshot) error {
	if s == nil {
		return fmt.Errorf("nil snapshot")
	}
	sortedByName := func(what string, names []string) error {
		if !slices.IsSorted(names) {
			return fmt.Errorf("%s not sorted: %q", what, names)
		}
		if len(slices.Compact(slices.Clone(names))) != len(names) {
			return fmt.Errorf("%s has duplicate names: %q", what, names)
		}
		return nil
	}
	var names []string
	for _, p := range s.Pools() {
		names = append(names, p.Name)
	}
	if err := sortedByName("pools", names); err != nil {
		return err
	}
	var all []blockRef
	for _, p := range s.Pools() {
		if len(p.Blocks) == 0 {
			return fmt.Errorf("pool %s has no blocks", p.Name)
		}
		var flat []netip.Prefix
		for i, b := range p.Blocks {
			if err := checkBlock(b); err != nil {
				return fmt.Errorf("pool %s block %d: %w", p.Name, i, err)
			}
			flat = append(flat, b.Prefixes...)
			all = append(all, blockRef{pool: p.Name, index: i, block: b})
			for _, ip := range []netip.Addr{b.First, b.Last} {
				got, ok := s.PoolFor(ip)
				want := !(p.AvoidBuggyIPs && isBuggyIP(ip))
				if ok != want || (ok && got != p) {
					return fmt.Errorf("PoolFor(%s) = %v, %v; want pool %s, %v", ip, got, ok, p.Name, want)
				}
			}
			if prev := b.First.Prev(); prev.IsValid() {
				if got, ok := s.PoolFor(prev); ok && got.Contains(prev) != true {
					return fmt.Errorf("PoolFor(%s) returned pool %s not containing it", prev, got.Name)
				}
			}
		}
		if !slices.Equal(flat, p.Prefixes) {
			return fmt.Errorf("pool %s: Prefixes %v differ from blocks %v", p.Name, p.Prefixes, flat)
		}
		for _, a := range p.L2Advertisements {
			if !slices.Contains(a.Pools, p.Name) {
				return fmt.Errorf("pool %s lists L2Advertisement %s which does not select it", p.Name, a.Name)
			}
		}
		for _, a := range p.BGPAdvertisements {
			if !slices.Contains(a.Pools, p.Name) {
				return fmt.Errorf("pool %s lists BGPAdvertisement %s which does not select it", p.Name, a.Name)
			}
		}
	}
	if ov := findOverlaps(all); len(ov) > 0 {
		return fmt.Errorf("overlapping blocks: %v and %v", ov[0].a.block.Spec, ov[0].b.block.Spec)
	}
	names = nil
	for _, a := range s.L2Advertisements() {
		names = append(names, a.Name)
		for _, pn := range a.Pools {
			p, ok := s.Pool(pn)
			if !ok || !slices.Contains(p.L2Advertisements, a) {
				return fmt.Errorf("L2Advertisement %s selects pool %s which does not list it", a.Name, pn)
			}
		}
	}
	if err := sortedByName("L2 advertisements", names); err != nil {
		return err
	}
	names = nil
	for _, a := range s.BGPAdvertisements() {
		names = append(names, a.Name)
		if a.AggregationLength < 1 || a.AggregationLength > 32 || a.AggregationLengthV6 < 1 || a.AggregationLengthV6 > 128 {
			return fmt.Errorf("BGPAdvertisement %s: aggregation %d/%d", a.Name, a.AggregationLength, a.AggregationLengthV6)
		}
		if !slices.IsSortedFunc(a.Communities, Community.Compare) || len(slices.Compact(slices.Clone(a.Communities))) != len(a.Communities) {
			return fmt.Errorf("BGPAdvertisement %s: communities not sorted/unique: %v", a.Name, a.Communities)
		}
		for _, pn := range a.Pools {
			p, ok := s.Pool(pn)
			if !ok || !slices.Contains(p.BGPAdvertisements, a) {
				return fmt.Errorf("BGPAdvertisement %s selects pool %s which does not list it", a.Name, pn)
			}
			for _, b := range p.Blocks {
				l := a.AggregationLength
				if b.First.Is6() {
					l = a.AggregationLengthV6
				}
				if l < b.minBits() {
					return fmt.Errorf("BGPAdvertisement %s: aggregation %d shorter than block %s", a.Name, l, b.Spec)
				}
			}
		}
	}
	if err := sortedByName("BGP advertisements", names); err != nil {
		return err
	}
	names = nil
	for _, p := range s.Peers() {
		names = append(names, p.Name)
		if p.MyASN == 0 || p.PeerASN == 0 {
			return fmt.Errorf("peer %s: ASNs %d/%d", p.Name, p.MyASN, p.PeerASN)
		}
		if p.Address.IsValid() == (p.Interface != "") || p.Address.Zone() != "" {
			return fmt.Errorf("peer %s: address %v interface %q", p.Name, p.Address, p.Interface)
		}
		if p.HoldTime != 0 && p.HoldTime < 3*time.Second || p.HoldTime > 65535*time.Second || p.KeepaliveTime > p.HoldTime || p.HoldTime%time.Second != 0 || p.KeepaliveTime%time.Second != 0 {
			return fmt.Errorf("peer %s: timers %v/%v", p.Name, p.HoldTime, p.KeepaliveTime)
		}
		if p.RouterID.IsValid() && !p.RouterID.Is4() {
			return fmt.Errorf("peer %s: router ID %v", p.Name, p.RouterID)
		}
		if p.Port == 0 {
			return fmt.Errorf("peer %s: port 0", p.Name)
		}
		if strings.Contains(fmt.Sprintf("%v", *p), "\x00secret-marker") {
			return fmt.Errorf("peer %s: password printed", p.Name)
		}
	}
	if err := sortedByName("peers", names); err != nil {
		return err
	}
	if !s.Equal(s) {
		return fmt.Errorf("snapshot not equal to itself")
	}
	return nil
}

// checkBlock verifies that a block's prefixes are masked, ascending,
// contiguous and cover exactly First..Last.
func checkBlock(b AddressBlock) error {
	if !b.First.IsValid() || b.First.BitLen() != b.Last.BitLen() || b.First.Compare(b.Last) > 0 {
		return fmt.Errorf("bad range %v-%v", b.First, b.Last)
	}
	if len(b.Prefixes) == 0 || len(b.Prefixes) > 2*b.First.BitLen() {
		return fmt.Errorf("%d prefixes", len(b.Prefixes))
	}
	next := b.First
	for i, p := range b.Prefixes {
		if p.Masked() != p {
			return fmt.Errorf("prefix %v not masked", p)
		}
		if p.Addr() != next {
			return fmt.Errorf("prefix %d %v does not start at %v", i, p, next)
		}
		last := lastAddr(p)
		if i == len(b.Prefixes)-1 {
			if last != b.Last {
				return fmt.Errorf("prefixes end at %v, want %v", last, b.Last)
			}
		} else {
			next = last.Next()
		}
	}
	return nil
}

package ipam

import (
	"math"
	"math/rand/v2"
	"net/netip"
	"testing"
)

func mustPrefixes(t testing.TB, ss ...string) []netip.Prefix {
	t.Helper()
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// enumerate lists the allocatable addresses of prefixes in allocation order
// (the naive model the interval set must agree with).
func enumerate(prefixes []netip.Prefix, avoidBuggy bool) []netip.Addr {
	var out []netip.Addr
	for _, p := range prefixes {
		for a := p.Masked().Addr(); a.IsValid() && p.Contains(a); a = a.Next() {
			if avoidBuggy && isBuggy(a) {
				continue
			}
			out = append(out, a)
		}
	}
	return out
}

func TestRangeSetAgainstModel(t *testing.T) {
	cases := []struct {
		name     string
		family   Family
		prefixes []string
		buggy    bool
	}{
		{"ipv4 single", IPv4, []string{"198.51.100.0/26"}, false},
		{"ipv4 unsorted prefixes", IPv4, []string{"203.0.113.128/27", "198.51.100.8/29", "203.0.113.0/30"}, false},
		{"ipv4 avoid buggy across /24s", IPv4, []string{"198.51.100.128/25", "203.0.113.0/23"}, true},
		{"ipv4 avoid buggy tiny prefixes", IPv4, []string{"198.51.100.255/32", "198.51.100.0/31", "203.0.113.254/31", "203.0.113.7/32"}, true},
		{"ipv6", IPv6, []string{"2001:db8:1::/122", "2001:db8::ff00/120"}, false},
		{"ipv6 avoid buggy is a no-op", IPv6, []string{"2001:db8::/124"}, true},
		{"ipv6 crossing 64-bit word", IPv6, []string{"2001:db8::/63"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pfx := mustPrefixes(t, tc.prefixes...)
			rs := newRangeSet(tc.family, pfx, tc.buggy)
			var model []netip.Addr
			if tc.name == "ipv6 crossing 64-bit word" {
				// Too big to enumerate: check the word boundary only.
				a := netip.MustParseAddr("2001:db8::ffff:ffff:ffff:ffff")
				if !rs.take(a) || !rs.take(a.Next()) || rs.isFree(a) || !rs.put(a) || !rs.isFree(a) || rs.isFree(a.Next()) {
					t.Fatal("take/put across the 64-bit boundary misbehaved")
				}
				return
			}
			model = enumerate(pfx, tc.buggy)
			if rs.total != int64(len(model)) {
				t.Fatalf("total = %d, model has %d", rs.total, len(model))
			}
			used := map[netip.Addr]bool{}
			lowest := func() (netip.Addr, bool) {
				for _, a := range model {
					if !used[a] {
						return a, true
					}
				}
				return netip.Addr{}, false
			}
			rng := rand.New(rand.NewPCG(1, uint64(len(model))))
			for step := 0; step < 4000; step++ {
				want, wantOK := lowest()
				got, gotOK := rs.lowest()
				if got != want || gotOK != wantOK {
					t.Fatalf("step %d: lowest = %v,%v; model %v,%v", step, got, gotOK, want, wantOK)
				}
				a := model[rng.IntN(len(model))]
				switch rng.IntN(3) {
				case 0: // take lowest
					if wantOK {
						if !rs.take(want) {
							t.Fatalf("take(lowest %s) failed", want)
						}
						used[want] = true
					}
				case 1:
					if ok := rs.take(a); ok == used[a] {
						t.Fatalf("take(%s) = %v with used=%v", a, ok, used[a])
					}
					used[a] = true
				case 2:
					if ok := rs.put(a); ok != used[a] {
						t.Fatalf("put(%s) = %v with used=%v", a, ok, used[a])
					}
					delete(used, a)
				}
				if rs.used != int64(len(used)) {
					t.Fatalf("used counter %d, model %d", rs.used, len(used))
				}
				// Intervals stay canonical: never two adjacent free spans of
				// one segment.
				var prev span
				first := true
				rs.free.Ascend(func(s span) bool {
					if !first && prev.seg == s.seg && prev.hi.add1() == s.lo {
						t.Fatalf("adjacent spans not merged: %+v %+v", prev, s)
					}
					prev, first = s, false
					return true
				})
			}
			// Addresses outside the set are rejected.
			for _, s := range []string{"192.0.2.1", "2001:db8:ffff::1", "198.51.100.255"} {
				a := netip.MustParseAddr(s)
				inModel := false
				for _, m := range model {
					inModel = inModel || m == a
				}
				if !inModel && (rs.take(a) || rs.put(a) || rs.contains(a)) {
					t.Fatalf("%s accepted but is not allocatable", a)
				}
			}
		})
	}
}

func TestRangeSetTotals(t *testing.T) {
	cases := []struct {
		family   Family
		prefixes []string
		buggy    bool
		want     int64
	}{
		{IPv4, []string{"198.51.100.0/24"}, false, 256},
		{IPv4, []string{"198.51.100.0/24"}, true, 254},
		{IPv4, []string{"198.51.100.0/23"}, true, 508},
		{IPv4, []string{"198.51.100.0/25"}, true, 127},
		{IPv4, []string{"198.51.100.64/26"}, true, 64},
		{IPv4, []string{"0.0.0.0/0"}, false, 1 << 32},
		{IPv6, []string{"2001:db8::/120"}, false, 256},
		{IPv6, []string{"2001:db8::/67"}, false, 1 << 61},
		{IPv6, []string{"2001:db8::/66"}, false, math.MaxInt64},
		{IPv6, []string{"2001:db8::/64"}, false, math.MaxInt64},
		{IPv6, []string{"::/0"}, false, math.MaxInt64},
		{IPv6, []string{"2001:db8::/67", "2001:db8:1::/67", "2001:db8:2::/67", "2001:db8:3::/67", "2001:db8:4::/67"}, false, math.MaxInt64},
	}
	for _, tc := range cases {
		rs := newRangeSet(tc.family, mustPrefixes(t, tc.prefixes...), tc.buggy)
		if rs.total != tc.want {
			t.Errorf("%v buggy=%v: total %d, want %d", tc.prefixes, tc.buggy, rs.total, tc.want)
		}
	}
}

func TestRangeSetWholeIPv6Space(t *testing.T) {
	rs := newRangeSet(IPv6, mustPrefixes(t, "::/0"), false)
	last := netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")
	if !rs.take(last) || !rs.take(netip.IPv6Unspecified()) {
		t.Fatal("take at the ends of the address space failed")
	}
	if got, _ := rs.lowest(); got != netip.MustParseAddr("::1") {
		t.Fatalf("lowest = %s", got)
	}
	if !rs.put(last) || !rs.put(netip.IPv6Unspecified()) || rs.spans() != 1 {
		t.Fatalf("put did not merge back into one span (%d spans)", rs.spans())
	}
}

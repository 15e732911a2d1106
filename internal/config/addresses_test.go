package config

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

func TestParseAddressBlock(t *testing.T) {
	pfx := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	for _, tc := range []struct {
		in          string
		want        []netip.Prefix
		masked      bool
		first, last string
	}{
		{in: "198.51.100.0/24", want: pfx("198.51.100.0/24"), first: "198.51.100.0", last: "198.51.100.255"},
		{in: "  198.51.100.0/24\t", want: pfx("198.51.100.0/24"), first: "198.51.100.0", last: "198.51.100.255"},
		{in: "198.51.100.7/24", want: pfx("198.51.100.0/24"), masked: true, first: "198.51.100.0", last: "198.51.100.255"},
		{in: "198.51.100.7/32", want: pfx("198.51.100.7/32"), first: "198.51.100.7", last: "198.51.100.7"},
		{in: "2001:db8::/126", want: pfx("2001:db8::/126"), first: "2001:db8::", last: "2001:db8::3"},
		{in: "198.51.100.10-198.51.100.20", want: pfx("198.51.100.10/31", "198.51.100.12/30", "198.51.100.16/30", "198.51.100.20/32"), first: "198.51.100.10", last: "198.51.100.20"},
		{in: "198.51.100.0 - 198.51.100.255", want: pfx("198.51.100.0/24"), first: "198.51.100.0", last: "198.51.100.255"},
		{in: "198.51.100.5-198.51.100.5", want: pfx("198.51.100.5/32"), first: "198.51.100.5", last: "198.51.100.5"},
		{in: "0.0.0.0-255.255.255.255", want: pfx("0.0.0.0/0"), first: "0.0.0.0", last: "255.255.255.255"},
		{in: "2001:db8::1-2001:db8::2", want: pfx("2001:db8::1/128", "2001:db8::2/128"), first: "2001:db8::1", last: "2001:db8::2"},
	} {
		b, masked, err := parseAddressBlock(tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if !slices.Equal(b.Prefixes, tc.want) || masked != tc.masked {
			t.Errorf("%q: prefixes %v masked %v; want %v %v", tc.in, b.Prefixes, masked, tc.want, tc.masked)
		}
		if b.First != netip.MustParseAddr(tc.first) || b.Last != netip.MustParseAddr(tc.last) {
			t.Errorf("%q: range %v-%v, want %s-%s", tc.in, b.First, b.Last, tc.first, tc.last)
		}
		if err := checkBlock(b); err != nil {
			t.Errorf("%q: %v", tc.in, err)
		}
	}
	for _, bad := range []string{"", "x", "198.51.100.1", "198.51.100.0/33", "198.51.100.9-198.51.100.1",
		"198.51.100.1-2001:db8::1", "fe80::1%eth0-fe80::2", "::ffff:198.51.100.1-::ffff:198.51.100.2", "-", "198.51.100.1-",
		"198.51.100.1-198.51.100.2-198.51.100.3", "::ffff:198.51.100.0/120"} {
		if b, _, err := parseAddressBlock(bad); err == nil {
			t.Errorf("%q: accepted as %v", bad, b.Prefixes)
		}
	}
}

// TestSummarizeRandom checks on random ranges that the summary covers
// exactly the range with the fewest prefixes (each prefix maximal: doubling
// it would leave the range or break alignment).
func TestSummarizeRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		var first, last netip.Addr
		if i%2 == 0 {
			a, b := rng.Uint32(), rng.Uint32()
			if i%4 == 0 {
				b = a + rng.Uint32N(300)
				if b < a {
					b = a
				}
			}
			a, b = min(a, b), max(a, b)
			first = netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)})
			last = netip.AddrFrom4([4]byte{byte(b >> 24), byte(b >> 16), byte(b >> 8), byte(b)})
		} else {
			var x, y [16]byte
			for j := range x {
				x[j] = byte(rng.UintN(256))
				y[j] = x[j]
			}
			for j := 8 + rng.IntN(8); j < 16; j++ {
				y[j] = byte(rng.UintN(256))
			}
			first, last = netip.AddrFrom16(x), netip.AddrFrom16(y)
			if first.Compare(last) > 0 {
				first, last = last, first
			}
		}
		b := AddressBlock{First: first, Last: last, Prefixes: summarize(first, last)}
		if err := checkBlock(b); err != nil {
			t.Fatalf("%v-%v: %v (%v)", first, last, err, b.Prefixes)
		}
		for _, p := range b.Prefixes {
			if p.Bits() == 0 {
				continue
			}
			parent := netip.PrefixFrom(p.Addr(), p.Bits()-1).Masked()
			if parent.Addr() == p.Addr() && parent.Addr().Compare(first) >= 0 && lastAddr(parent).Compare(last) <= 0 {
				t.Fatalf("%v-%v: prefix %v could be %v", first, last, p, parent)
			}
		}
	}
}

func TestFindOverlaps(t *testing.T) {
	mk := func(pool string, specs ...string) []blockRef {
		var out []blockRef
		for i, s := range specs {
			b, _, err := parseAddressBlock(s)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, blockRef{pool: pool, index: i, block: b})
		}
		return out
	}
	for _, tc := range []struct {
		blocks []blockRef
		want   int
	}{
		{mk("a", "198.51.100.0/25", "198.51.100.128/25", "2001:db8::/64"), 0},
		{mk("a", "198.51.100.0/24", "198.51.100.255/32"), 1},
		{mk("a", "198.51.100.0/24", "198.51.100.10-198.51.100.11", "198.51.100.200/30"), 2},
		{append(mk("a", "198.51.100.0/24"), mk("b", "198.51.100.0/24")...), 1},
		{mk("a", "0.0.0.0/0", "::/0"), 0},
		{mk("a", "203.0.113.0/30", "203.0.113.3-203.0.113.9", "203.0.113.9/32"), 2},
	} {
		if got := findOverlaps(tc.blocks); len(got) != tc.want {
			t.Errorf("%v: %d overlaps %v, want %d", tc.blocks, len(got), got, tc.want)
		}
	}
}

func TestLastAddrAndBuggy(t *testing.T) {
	for in, want := range map[string]string{
		"198.51.100.0/24": "198.51.100.255", "198.51.100.0/23": "198.51.101.255", "0.0.0.0/0": "255.255.255.255",
		"2001:db8::/120": "2001:db8::ff", "2001:db8::/63": "2001:db8:0:1:ffff:ffff:ffff:ffff", "198.51.100.5/32": "198.51.100.5",
	} {
		if got := lastAddr(netip.MustParsePrefix(in)); got != netip.MustParseAddr(want) {
			t.Errorf("lastAddr(%s) = %v, want %s", in, got, want)
		}
	}
	for ip, want := range map[string]bool{"198.51.100.0": true, "198.51.100.255": true, "198.51.100.1": false, "2001:db8::": false, "2001:db8::ff": false} {
		if got := isBuggyIP(netip.MustParseAddr(ip)); got != want {
			t.Errorf("isBuggyIP(%s) = %v", ip, got)
		}
	}
}

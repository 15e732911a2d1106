package members

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
)

func TestPickJoins(t *testing.T) {
	addrs := func(n int) []netip.AddrPort {
		var out []netip.AddrPort
		for i := range n {
			out = append(out, netip.MustParseAddrPort(fmt.Sprintf("198.51.100.%d:7946", i+1)))
		}
		return out
	}
	reverse := func(n int, swap func(i, j int)) {
		for i := range n / 2 {
			swap(i, n-1-i)
		}
	}
	for _, tc := range []struct {
		name    string
		missing int
		k       int
		want    []netip.AddrPort
	}{
		{"none missing", 0, joinFanoutJoined, nil},
		{"fewer than the fan-out: all", 2, joinFanoutJoined, addrs(2)},
		{"exactly the fan-out: all", 3, joinFanoutJoined, addrs(3)},
		// 99 missing peers of a 100-node start-up: 3, not 99, per round.
		{"more: k of them, picked by the shuffle", 99, joinFanoutJoined, []netip.AddrPort{
			netip.MustParseAddrPort("198.51.100.99:7946"),
			netip.MustParseAddrPort("198.51.100.98:7946"),
			netip.MustParseAddrPort("198.51.100.97:7946"),
		}},
		{"not joined yet: one parallel batch", 99, joinFanoutNotJoined, func() []netip.AddrPort {
			a := addrs(99)
			slices.Reverse(a)
			return a[:maxParallelJoins]
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := pickJoins(addrs(tc.missing), tc.k, reverse)
			if !slices.Equal(got, tc.want) {
				t.Errorf("pickJoins(%d missing, %d) = %v, want %v", tc.missing, tc.k, got, tc.want)
			}
		})
	}
}

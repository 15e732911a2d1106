package gobgp

import (
	"context"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/herald-lb/herald/internal/bgp"
	"github.com/herald-lb/herald/internal/poll"
)

// received is the router's count of prefixes received from neighbor (cheap:
// no table walk).
func (r *router) received(tb testing.TB, neighbor string) uint64 {
	var n uint64
	for _, a := range r.peerInfo(tb, neighbor).GetAfiSafis() {
		n += a.GetState().GetReceived()
	}
	return n
}

// BenchmarkAnnounce10k announces 10,000 IPv6 /128s (MP-BGP over ::1) to the in-process router and
// waits until the router holds all of them, then withdraws them all and waits
// until the router holds none. Reported: seconds per announce and per
// withdraw, and the speaker process heap while 10k paths are announced.
func BenchmarkAnnounce10k(b *testing.B) {
	if gobgpRaces {
		b.Skip("gobgp v3.37 internal races with two servers in one process")
	}
	const n = 10000
	requireIPv6(b)
	r := newRouter(b, routerASN, "198.51.100.254", "::1")
	r.addPeer(b, "::1", ourASN)
	s := newSpeaker(b, Options{})
	ctx := context.Background()
	if err := s.SetPeers(ctx, []bgp.PeerConfig{r.peerConfig("r", ourASN)}); err != nil {
		b.Fatal(err)
	}
	waitEstablished(b, s, "r")
	paths := make([]bgp.Path, 0, n)
	base := netip.MustParseAddr("2001:db8:100::").As16()
	for i := range n {
		// 10,000 distinct /128s in 2001:db8::/32 (documentation space).
		a := base
		a[14], a[15] = byte(i>>8), byte(i)
		paths = append(paths, bgp.Path{Prefix: netip.PrefixFrom(netip.AddrFrom16(a), 128), Communities: []uint32{64512<<16 | 1}})
	}
	var announce, withdraw time.Duration
	var heap uint64
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := s.SetPaths(ctx, paths); err != nil {
			b.Fatal(err)
		}
		poll.Until(b, 5*time.Minute, "router has all prefixes", func() bool { return r.received(b, "::1") == n })
		announce += time.Since(t0)
		b.StopTimer()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heap = ms.HeapAlloc
		b.StartTimer()
		t1 := time.Now()
		if err := s.SetPaths(ctx, nil); err != nil {
			b.Fatal(err)
		}
		poll.Until(b, 5*time.Minute, "router has no prefixes", func() bool { return r.received(b, "::1") == 0 })
		withdraw += time.Since(t1)
	}
	b.ReportMetric(announce.Seconds()/float64(b.N), "announce-s/op")
	b.ReportMetric(withdraw.Seconds()/float64(b.N), "withdraw-s/op")
	b.ReportMetric(float64(heap)/(1<<20), "heap-MiB(both-servers)")
}

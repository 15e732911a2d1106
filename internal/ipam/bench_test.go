package ipam

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// cpuClock accumulates the process CPU time (user+sys, all threads, GC
// included) of the timed sections of a benchmark. On a loaded machine wall
// time per op mostly measures the scheduler; CPU time per op ("cpu-ns/op")
// stays comparable across sub-benchmarks.
type cpuClock struct {
	start, total time.Duration
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (c *cpuClock) resume(b *testing.B) { b.StartTimer(); c.start = cpuNow() }
func (c *cpuClock) pause(b *testing.B)  { c.total += cpuNow() - c.start; b.StopTimer() }
func (c *cpuClock) report(b *testing.B) {
	b.ReportMetric(float64(c.total.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// benchPools are the two pool shapes of the allocation-cost requirement.
var benchPools = []struct {
	name   string
	prefix string
	family Family
}{
	{"ipv4-slash16", "198.18.0.0/16", IPv4},
	{"ipv6-slash64", "2001:db8:1:2::/64", IPv6},
}

var benchFills = []int{1_000, 10_000, 60_000}

// filledAllocator returns an allocator whose single pool holds fill
// addresses scattered at random positions, so the free set is fragmented
// into about fill intervals (the worst case for the interval tree; a
// sequential fill would leave a single interval).
func filledAllocator(b *testing.B, prefix string, f Family, fill int) *Allocator {
	b.Helper()
	a := New()
	pfx := netip.MustParsePrefix(prefix)
	if _, err := a.SetPools([]Pool{{Name: "bench", Prefixes: []netip.Prefix{pfx}, AutoAssign: true}}); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(42, uint64(fill)))
	base := addrToU128(pfx.Addr())
	span := uint64(1) << 16 // IPv4: the whole /16; IPv6: spread over 2^40
	if f == IPv6 {
		span = uint64(1) << 40
	}
	for i := 0; i < fill; {
		v := base
		v.lo += rng.Uint64N(span)
		ip := u128ToAddr(v, f)
		r := Request{Key: fmt.Sprintf("fill/%d", i), Families: []Family{f}, RequestedIPs: []netip.Addr{ip}}
		if _, err := a.Allocate(r); err != nil {
			continue // address drawn twice
		}
		i++
	}
	return a
}

// batch bounds how far a benchmark moves the fill level: after this many
// timed operations the timer stops and the state is restored.
const batch = 1000

// BenchmarkAllocate measures one automatic allocation (lowest free address)
// at each fill level. ns/op should be roughly flat across fill levels and
// pool sizes.
func BenchmarkAllocate(b *testing.B) {
	for _, bp := range benchPools {
		for _, fill := range benchFills {
			b.Run(fmt.Sprintf("%s/fill=%d", bp.name, fill), func(b *testing.B) {
				a := filledAllocator(b, bp.prefix, bp.family, fill)
				reqs := make([]Request, batch)
				for i := range reqs {
					reqs[i] = Request{Key: fmt.Sprintf("bench/%d", i), Families: []Family{bp.family}}
				}
				var clk cpuClock
				b.ReportAllocs()
				b.ResetTimer()
				clk.resume(b)
				for i := 0; i < b.N; i++ {
					if _, err := a.Allocate(reqs[i%batch]); err != nil {
						b.Fatal(err)
					}
					if i%batch == batch-1 {
						clk.pause(b)
						for _, r := range reqs {
							a.Release(r.Key)
						}
						clk.resume(b)
					}
				}
				clk.pause(b)
				clk.report(b)
			})
		}
	}
}

// BenchmarkRelease measures releasing one Service's IP (freeing and merging
// intervals) at each fill level.
func BenchmarkRelease(b *testing.B) {
	for _, bp := range benchPools {
		for _, fill := range benchFills {
			b.Run(fmt.Sprintf("%s/fill=%d", bp.name, fill), func(b *testing.B) {
				a := filledAllocator(b, bp.prefix, bp.family, fill)
				reqs := make([]Request, batch)
				for i := range reqs {
					reqs[i] = Request{Key: fmt.Sprintf("bench/%d", i), Families: []Family{bp.family}}
				}
				refill := func() {
					for _, r := range reqs {
						if _, err := a.Allocate(r); err != nil {
							b.Fatal(err)
						}
					}
				}
				refill()
				var clk cpuClock
				b.ReportAllocs()
				b.ResetTimer()
				clk.resume(b)
				for i := 0; i < b.N; i++ {
					a.Release(reqs[i%batch].Key)
					if i%batch == batch-1 {
						clk.pause(b)
						refill()
						clk.resume(b)
					}
				}
				clk.pause(b)
				clk.report(b)
			})
		}
	}
}

// BenchmarkHeldMemory reports the heap the allocator keeps per Service
// ("B/service": held address, its status record, the Request) after 10,000
// single-stack IPv6 Services like bench-alloc's were allocated and their
// statuses recorded. The Requests' label maps are one per Service, as the
// controller's are, made before the measurement: they are the caller's
// (the controller's informer cache), which the allocator keeps without a
// copy (Request).
func BenchmarkHeldMemory(b *testing.B) {
	const n = 10_000
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	nsLabels := map[string]string{"kubernetes.io/metadata.name": "bench"}
	var per float64
	svcLabels := make([]map[string]string, n)
	for i := range svcLabels {
		svcLabels[i] = map[string]string{"bench.herald.io/run": "bench"}
	}
	for range b.N {
		before := heap()
		a := New()
		if _, err := a.SetPools([]Pool{{Name: "bench", Prefixes: []netip.Prefix{netip.MustParsePrefix("2001:db8:1::/64")}, AutoAssign: true}}); err != nil {
			b.Fatal(err)
		}
		for i := range n {
			name := fmt.Sprintf("svc-%05d", i)
			req := Request{Key: "bench/" + name, Namespace: "bench", NamespaceLabels: nsLabels,
				Labels: svcLabels[i], Families: []Family{IPv6},
				Ports: []Port{{Protocol: "TCP", Port: 80}}}
			asg, err := a.Allocate(req)
			if err != nil {
				b.Fatal(err)
			}
			a.SetStatus(req.Key, asg.IPs)
		}
		per = float64(heap()-before) / n
		runtime.KeepAlive(a)
	}
	b.ReportMetric(per, "B/service")
}

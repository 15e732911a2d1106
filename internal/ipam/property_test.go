package ipam

import (
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"
)

var (
	propSeeds = flag.Int("ipam.seeds", 0, "run the determinism property test with this many random seeds instead of the fixed set")
	propSteps = flag.Int("ipam.steps", 400, "events per seed in the determinism property test")
)

// universePrefixes is the address space random pools are cut from: small
// prefixes so pools run full, with .0/.255 edges for avoidBuggyIPs.
var universePrefixes = []string{
	"198.51.100.0/30", "198.51.100.248/30", "198.51.100.8/29", "198.51.100.255/32",
	"203.0.113.0/31", "203.0.113.16/29", "203.0.113.254/31",
	"2001:db8::/126", "2001:db8:1::/125", "2001:db8:2::/127", "2001:db8:3::/64",
}

// world generates random pools and requests for one seed.
type world struct {
	rng *rand.Rand
	t   *testing.T
}

func (w *world) pick(n int) int { return w.rng.IntN(n) }

func (w *world) randomPools() []Pool {
	names := []string{"alpha", "bravo", "charlie", "delta"}
	n := 1 + w.pick(len(names))
	pools := make([]Pool, n)
	for i := range pools {
		pools[i] = Pool{Name: names[i], AutoAssign: w.pick(4) != 0, AvoidBuggyIPs: w.pick(3) == 0}
		if w.pick(2) == 0 {
			sa := &ServiceAllocation{Priority: w.pick(3)}
			switch w.pick(4) {
			case 0:
				sa.Namespaces = []string{"ns1"}
			case 1:
				sa.NamespaceSelectors = append(sa.NamespaceSelectors, sel(w.t, "env=prod"))
			case 2:
				sa.ServiceSelectors = append(sa.ServiceSelectors, sel(w.t, "app=web"))
			}
			pools[i].ServiceAllocation = sa
		}
	}
	// Each prefix goes to a random pool or nowhere, in a random order.
	for _, i := range w.rng.Perm(len(universePrefixes)) {
		if k := w.pick(n + 1); k < n {
			pools[k].Prefixes = append(pools[k].Prefixes, netip.MustParsePrefix(universePrefixes[i]))
		}
	}
	w.rng.Shuffle(len(pools), func(i, j int) { pools[i], pools[j] = pools[j], pools[i] })
	return pools
}

func (w *world) randomAddr() netip.Addr {
	if w.pick(10) == 0 {
		return netip.MustParseAddr("192.0.2.77") // in no pool
	}
	p := netip.MustParsePrefix(universePrefixes[w.pick(len(universePrefixes))])
	a := p.Addr()
	for range w.pick(4) {
		if n := a.Next(); p.Contains(n) {
			a = n
		}
	}
	return a
}

func (w *world) randomRequest(key string) Request {
	nss := []string{"ns1", "ns2", "ns3"}
	ns := nss[w.pick(len(nss))]
	r := Request{Key: ns + "/" + key, Namespace: ns}
	if ns != "ns1" {
		r.NamespaceLabels = map[string]string{"env": []string{"prod", "dev"}[w.pick(2)]}
	}
	if w.pick(2) == 0 {
		r.Labels = map[string]string{"app": "web"}
	}
	switch w.pick(6) {
	case 0, 1:
		r.Families, r.Policy = []Family{IPv4}, SingleStack
	case 2:
		r.Families, r.Policy = []Family{IPv6}, SingleStack
	case 3:
		r.Families, r.Policy = []Family{IPv4, IPv6}, PreferDualStack
	case 4:
		r.Families, r.Policy = []Family{IPv6, IPv4}, PreferDualStack
	case 5:
		r.Families, r.Policy = []Family{IPv4, IPv6}, RequireDualStack
	}
	if w.pick(6) == 0 {
		r.RequestedIPs = []netip.Addr{w.randomAddr()}
		if r.Policy == RequireDualStack || w.pick(3) == 0 {
			r.RequestedIPs = append(r.RequestedIPs, w.randomAddr())
		}
	}
	if w.pick(6) == 0 {
		r.PoolName = []string{"alpha", "bravo", "charlie", "delta", "nope"}[w.pick(5)]
	}
	if w.pick(2) == 0 {
		r.SharingKey = []string{"k1", "k2"}[w.pick(2)]
		for _, p := range []Port{{"TCP", 80}, {"TCP", 443}, {"UDP", 53}, {"UDP", 80}} {
			if w.pick(3) == 0 {
				r.Ports = append(r.Ports, p)
			}
		}
		if w.pick(5) == 0 {
			r.BackendKey = "app=web"
		}
	}
	return r
}

// pair drives two allocators in lockstep and requires identical outcomes.
type pair struct {
	t     *testing.T
	a, b  *Allocator
	reqs  map[string]Request // current Services by key
	pools []Pool
	step  int
	shuf  *rand.Rand // permutes the pool list B sees (its order must not matter)
}

// shuffled returns pools in a random order (prefix order inside each pool
// is configuration and stays).
func (p *pair) shuffled(pools []Pool) []Pool {
	out := slices.Clone(pools)
	p.shuf.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func (p *pair) fail(format string, args ...any) {
	p.t.Helper()
	p.t.Fatalf("step %d: %s", p.step, fmt.Sprintf(format, args...))
}

func (p *pair) allocate(r Request) {
	p.t.Helper()
	before, held := p.a.Lookup(r.Key)
	unchanged := held && reflect.DeepEqual(p.reqs[r.Key], r)
	ra, ea := p.a.Allocate(r)
	rb, eb := p.b.Allocate(r)
	if fmt.Sprint(ra, ea) != fmt.Sprint(rb, eb) {
		p.fail("Allocate(%s) diverged:\n A: %v %v\n B: %v %v", r.Key, ra, ea, rb, eb)
	}
	p.reqs[r.Key] = r
	// An unchanged request never moves a valid IP. (A Service that a pool
	// edit left with only part of what it needs, one IP of a
	// RequireDualStack pair or of its requested IPs, is re-addressed.)
	need := len(r.RequestedIPs)
	if need == 0 && r.Policy == RequireDualStack {
		need = 2
	}
	partial := len(before.IPs) < need
	if unchanged && !partial {
		if ea != nil {
			p.fail("re-Allocate(%s) of a held, unchanged request failed: %v", r.Key, ea)
		}
		for _, ip := range before.IPs {
			if !slices.Contains(ra.IPs, ip) {
				p.fail("re-Allocate(%s) moved %s: %v -> %v", r.Key, ip, before, ra)
			}
		}
	}
}

func (p *pair) setPools(pools []Pool) {
	p.t.Helper()
	ca, ea := p.a.SetPools(pools)
	cb, eb := p.b.SetPools(p.shuffled(pools))
	if fmt.Sprint(ca, ea) != fmt.Sprint(cb, eb) {
		p.fail("SetPools diverged: %v %v / %v %v", ca, ea, cb, eb)
	}
	if ea != nil {
		p.fail("SetPools: %v", ea)
	}
	p.pools = pools
	for _, key := range ca {
		p.allocate(p.reqs[key])
	}
}

// restart replaces b with a fresh allocator that imports a's assignments
// in a random order, as a restarted controller would.
func (p *pair) restart(rng *rand.Rand) {
	p.t.Helper()
	p.b = New()
	if _, err := p.b.SetPools(p.shuffled(p.pools)); err != nil {
		p.fail("SetPools after restart: %v", err)
	}
	asgs := p.a.Assignments()
	keys := slices.Sorted(maps.Keys(asgs))
	rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	for _, k := range keys {
		got, err := p.b.Import(k, asgs[k].IPs, p.reqs[k])
		if err != nil || !reflect.DeepEqual(got, asgs[k]) {
			p.fail("Import(%s, %v) = %v, %v", k, asgs[k], got, err)
		}
	}
	// Then every Service is reconciled, in key order.
	for _, k := range slices.Sorted(maps.Keys(p.reqs)) {
		p.allocate(p.reqs[k])
	}
}

func (p *pair) check() {
	p.t.Helper()
	for name, x := range map[string]*Allocator{"A": p.a, "B": p.b} {
		if err := x.verify(); err != nil {
			p.fail("%s: %v", name, err)
		}
	}
	if sa, sb := p.a.Assignments(), p.b.Assignments(); !reflect.DeepEqual(sa, sb) {
		p.fail("assignments diverged:\n A: %v\n B: %v", sa, sb)
	}
	if sa, sb := p.a.Stats(), p.b.Stats(); !reflect.DeepEqual(sa, sb) {
		p.fail("stats diverged:\n A: %v\n B: %v", sa, sb)
	}
}

// TestDeterminismProperty is the regression test for issue 8 (MetalLB
// picked among equal pools in map order, so replicas and restarts chose
// different IPs): two allocators fed the same random pool and Service
// events, one of them periodically rebuilt from the other's assignments,
// must agree at every step and keep the sharing and pool invariants.
func TestDeterminismProperty(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	if *propSeeds > 0 {
		seeds = nil
		base := rand.Uint64()
		t.Logf("random seeds from base %d", base)
		for i := range *propSeeds {
			seeds = append(seeds, base+uint64(i))
		}
	}
	steps := *propSteps
	if testing.Short() && *propSeeds == 0 {
		steps = 100
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x1e7a1d))
			w := &world{rng: rng, t: t}
			p := &pair{t: t, a: New(), b: New(), reqs: map[string]Request{}, shuf: rand.New(rand.NewPCG(seed, 7))}
			p.setPools(w.randomPools())
			counts := map[string]int{}
			for p.step = 0; p.step < steps; p.step++ {
				keys := slices.Sorted(maps.Keys(p.reqs))
				switch op := rng.IntN(20); {
				case op < 8: // add or change a Service
					name := fmt.Sprintf("svc%d", rng.IntN(14))
					r := w.randomRequest(name)
					for _, k := range keys { // a name lives in one namespace at a time
						if k != r.Key && k[len(k)-len(name)-1:] == "/"+name {
							p.a.Release(k)
							p.b.Release(k)
							delete(p.reqs, k)
						}
					}
					p.allocate(r)
					counts["upsert"]++
				case op < 11 && len(keys) > 0: // reconcile an unchanged Service
					p.allocate(p.reqs[keys[rng.IntN(len(keys))]])
					counts["reconcile"]++
				case op < 14 && len(keys) > 0: // delete
					k := keys[rng.IntN(len(keys))]
					p.a.Release(k)
					p.b.Release(k)
					delete(p.reqs, k)
					counts["delete"]++
				case op < 17: // pool edit, then every Service is reprocessed
					p.setPools(w.randomPools())
					for _, k := range slices.Sorted(maps.Keys(p.reqs)) {
						p.allocate(p.reqs[k])
					}
					counts["pools"]++
				default:
					p.restart(rng)
					counts["restart"]++
				}
				p.check()
			}
			held := len(p.a.Assignments())
			t.Logf("events %v, %d Services hold IPs at the end", counts, held)
		})
	}
}

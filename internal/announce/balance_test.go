package announce

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/herald-lb/herald/api/v1beta1"
)

// uniformBallots returns m addresses of 198.51.100.0/24 and 2001:db8:1::/64,
// each with every node of nodes as an equal candidate.
func uniformBallots(m int, nodes []string) []Ballot {
	bs := make([]Ballot, m)
	for i := range bs {
		if i < 250 {
			bs[i].IP = netip.AddrFrom4([4]byte{198, 51, 100, byte(i + 1)})
		} else {
			bs[i].IP = netip.MustParseAddr(fmt.Sprintf("2001:db8:1::%x", i))
		}
		for _, n := range nodes {
			bs[i].Candidates = append(bs[i].Candidates, Candidate{Node: n, Serves: 1})
		}
	}
	return bs
}

func nodeNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

func without(bs []Ballot, lost string) []Ballot {
	out := make([]Ballot, len(bs))
	for i, b := range bs {
		out[i] = Ballot{IP: b.IP}
		for _, c := range b.Candidates {
			if c.Node != lost {
				out[i].Candidates = append(out[i].Candidates, c)
			}
		}
	}
	return out
}

func loads(w map[netip.Addr]string) map[string]int {
	l := map[string]int{}
	for _, n := range w {
		l[n]++
	}
	return l
}

func mustBalance(t *testing.T, bs []Ballot) map[netip.Addr]string {
	t.Helper()
	w, err := ElectBalanced(bs)
	if err != nil {
		t.Fatalf("ElectBalanced: %v", err)
	}
	return w
}

// TestElectBalancedBound: with every node an equal candidate, no node holds
// more than BalancedCapacity, which is within issue 16's targets
// (⌈mean⌉+1 for small counts, 1.25×mean for large ones), for 5, 50 and
// 1,000 addresses on 3, 10 and 100 nodes and several node sets. The plain
// election breaks the bound on at least one of these sets (so the test
// would fail with Elect in place of ElectBalanced).
func TestElectBalancedBound(t *testing.T) {
	plainOver := false
	for _, m := range []int{5, 50, 1000} {
		for _, n := range []int{3, 10, 100} {
			for set := range 5 {
				nodes := nodeNames(fmt.Sprintf("w%d", set), n)
				bs := uniformBallots(m, nodes)
				w := mustBalance(t, bs)
				if len(w) != m {
					t.Fatalf("%d addresses on %d nodes: %d winners", m, n, len(w))
				}
				capacity := BalancedCapacity(m, n)
				mean := float64(m) / float64(n)
				if float64(capacity) > max(math.Ceil(mean)+1, 1.25*mean) {
					t.Fatalf("BalancedCapacity(%d, %d) = %d, above the target", m, n, capacity)
				}
				for node, l := range loads(w) {
					if l > capacity {
						t.Errorf("%d addresses on %d nodes (set %d): %s holds %d, capacity %d", m, n, set, node, l, capacity)
					}
				}
				for _, l := range loads(plainWinners(bs)) {
					plainOver = plainOver || l > capacity
				}
			}
		}
	}
	if !plainOver {
		t.Fatal("the plain election met the bound on every set: the sets do not exercise balancing")
	}
}

func plainWinners(bs []Ballot) map[netip.Addr]string {
	w := map[netip.Addr]string{}
	for _, b := range bs {
		w[b.IP] = Elect(b.IP, b.Candidates)[0]
	}
	return w
}

// TestElectBalancedDeterministic: the winners depend on the set of ballots
// only, not on the order of the ballots or of their candidates (every
// speaker lists Services and nodes in its own order).
func TestElectBalancedDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ m, n int }{{5, 3}, {50, 10}, {1000, 100}} {
		bs := uniformBallots(tc.m, nodeNames("n", tc.n))
		// Mixed ranks: some addresses prefer a node, some have a narrower
		// candidate set (Local endpoints).
		for i := range bs {
			switch i % 7 {
			case 3:
				bs[i].Candidates[i%tc.n].Preference = 10
			case 5:
				bs[i].Candidates = bs[i].Candidates[:1+i%tc.n]
			}
		}
		want := mustBalance(t, bs)
		for range 5 {
			sh := slices.Clone(bs)
			rng.Shuffle(len(sh), func(i, j int) { sh[i], sh[j] = sh[j], sh[i] })
			for i := range sh {
				cs := slices.Clone(sh[i].Candidates)
				rng.Shuffle(len(cs), func(a, b int) { cs[a], cs[b] = cs[b], cs[a] })
				sh[i].Candidates = cs
			}
			if got := mustBalance(t, sh); !maps.Equal(got, want) {
				t.Fatalf("%d addresses on %d nodes: shuffled input elects differently", tc.m, tc.n)
			}
		}
	}
}

// TestElectBalancedMovement: when a node fails, every address it held
// moves, and the others that move (the bound's rebalancing) stay few (the
// limits are about twice the worst of make bench-l2balance), and none at
// all when the bound never binds.
func TestElectBalancedMovement(t *testing.T) {
	for _, tc := range []struct {
		m, n int
		// maxOthers: most addresses not on the failed node that may move
		// for one failure.
		maxOthers int
	}{
		{5, 3, 1},
		{50, 10, 10},
		{1000, 10, 25},
		{1000, 100, 20},
	} {
		t.Run(fmt.Sprintf("%d on %d", tc.m, tc.n), func(t *testing.T) {
			nodes := nodeNames("m", tc.n)
			bs := uniformBallots(tc.m, nodes)
			before := mustBalance(t, bs)
			for _, lost := range nodes[:min(len(nodes), 10)] {
				after := mustBalance(t, without(bs, lost))
				others := 0
				for ip, w := range before {
					switch {
					case w == lost && after[ip] == lost:
						t.Fatalf("%s still elected for %s after it failed", lost, ip)
					case w != lost && after[ip] != w:
						others++
					}
				}
				if others > tc.maxOthers {
					t.Errorf("%s failed: %d addresses not on it moved, want at most %d", lost, others, tc.maxOthers)
				}
			}
		})
	}
	t.Run("bound never binds: the plain election's winners, minimal movement", func(t *testing.T) {
		// 3 addresses on 10 nodes: capacity 2; the plain winners of these
		// addresses are distinct nodes.
		nodes := nodeNames("q", 10)
		bs := uniformBallots(3, nodes)
		if l := loads(plainWinners(bs)); len(l) != 3 {
			t.Fatalf("plain winners %v: fixture needs distinct nodes", l)
		}
		if got := mustBalance(t, bs); !maps.Equal(got, plainWinners(bs)) {
			t.Fatalf("balanced %v, plain %v", got, plainWinners(bs))
		}
		for _, lost := range nodes {
			if got, want := mustBalance(t, without(bs, lost)), plainWinners(without(bs, lost)); !maps.Equal(got, want) {
				t.Fatalf("without %s: balanced %v, plain %v", lost, got, want)
			}
		}
	})
}

// TestElectBalancedRanks: the bound balances only among a ballot's best
// candidates: a preferred node, a node serving more of a shared address's
// Services, and the only node with a Local endpoint keep their addresses
// even above capacity.
func TestElectBalancedRanks(t *testing.T) {
	nodes := []string{"a", "b", "c"}
	mk := func(i int, cs ...Candidate) Ballot {
		return Ballot{IP: netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), Candidates: cs}
	}
	eq := func(n string) Candidate { return Candidate{Node: n, Serves: 1} }
	var pref, serves, localOnly, mixed []Ballot
	for i := 1; i <= 9; i++ {
		pref = append(pref, mk(i, eq("a"), Candidate{Node: "b", Serves: 1, Preference: 5}, eq("c")))
		serves = append(serves, mk(i, eq("a"), eq("b"), Candidate{Node: "c", Serves: 2}))
		localOnly = append(localOnly, mk(i, eq("a")))
		// Half the addresses only on a (Local), the other half anywhere:
		// the anywhere ones go to b and c.
		if i%2 == 0 {
			mixed = append(mixed, mk(i, eq("a")))
		} else {
			mixed = append(mixed, mk(i, eq("a"), eq("b"), eq("c")))
		}
	}
	for _, tc := range []struct {
		name string
		bs   []Ballot
		want map[string]int
	}{
		{"preferredNodeSelectors", pref, map[string]int{"b": 9}},
		{"shared address: most Services served", serves, map[string]int{"c": 9}},
		{"externalTrafficPolicy Local, one node", localOnly, map[string]int{"a": 9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := loads(mustBalance(t, tc.bs)); !maps.Equal(got, tc.want) {
				t.Fatalf("loads %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("narrow candidate sets: every winner is a candidate", func(t *testing.T) {
		w := mustBalance(t, mixed)
		for _, b := range mixed {
			if !slices.ContainsFunc(b.Candidates, func(c Candidate) bool { return c.Node == w[b.IP] }) {
				t.Fatalf("%s elected %s, not a candidate", b.IP, w[b.IP])
			}
		}
		if l := loads(w); l["a"] < 4 || l["a"]+l["b"]+l["c"] != 9 || l["b"] > BalancedCapacity(9, len(nodes)) {
			t.Fatalf("loads %v", l)
		}
	})
}

// TestElectBalancedSharing: a shared address is one ballot whose
// candidates are L2Candidates' union over its Services, so every Service
// holding it gets the one winner; the same address twice is an error
// rather than two winners.
func TestElectBalancedSharing(t *testing.T) {
	c := newCluster(5)
	c.res.L2Advertisements = []v1beta1.L2Advertisement{l2ad("l2", "p")}
	v4 := "198.51.100.50"
	a := local(shared(svc("ns/a", v4), "k"))
	b := local(shared(svc("ns/b", v4), "k"))
	in := c.input(t, "n1", a, ready("n1"))
	in.Sharing = []SharedService{{Service: b, Endpoints: ready("n4", "n5")}}
	cands := L2Candidates(in, ip(v4))
	if len(cands) != 3 {
		t.Fatalf("candidates %v, want the union n1, n4, n5", cands)
	}
	w := mustBalance(t, []Ballot{{IP: ip(v4), Candidates: cands}, {IP: ip("198.51.100.51"), Candidates: cands}})
	if !slices.ContainsFunc(cands, func(c Candidate) bool { return c.Node == w[ip(v4)] }) {
		t.Fatalf("winner %s not among %v", w[ip(v4)], cands)
	}
	if _, err := ElectBalanced([]Ballot{{IP: ip(v4), Candidates: cands}, {IP: netip.MustParseAddr("::ffff:" + v4), Candidates: cands[:1]}}); err == nil {
		t.Fatal("the same address (mapped form) twice: no error")
	}
}

// TestDecideBalanced: with L2Winners from ElectBalanced over L2Ballots,
// Decide on every node announces each address on exactly its balanced
// winner, no node above the capacity, a Local Service only where its
// endpoints run and a shared address on one node; the plain election on
// the same cluster puts more than the capacity on one node (so the test
// fails without L2Winners).
func TestDecideBalanced(t *testing.T) {
	c := newCluster(3)
	c.res.L2Advertisements = []v1beta1.L2Advertisement{l2ad("l2", "p")}
	everywhere := ready("n1", "n2", "n3")
	var services []SharedService
	for i := 1; i <= 12; i++ {
		services = append(services, SharedService{Service: svc(fmt.Sprintf("ns/s%02d", i), fmt.Sprintf("198.51.100.%d", i)), Endpoints: everywhere})
	}
	services = append(services,
		SharedService{Service: local(svc("ns/local", "198.51.100.40")), Endpoints: ready("n2")},
		SharedService{Service: shared(svc("ns/sh-a", "198.51.100.41"), "k"), Endpoints: everywhere},
		SharedService{Service: shared(svc("ns/sh-b", "198.51.100.41"), "k"), Endpoints: everywhere},
		SharedService{Service: svc("ns/no-endpoints", "198.51.100.42")},
	)
	base := c.input(t, "n1", Service{}, nil)
	ballots := L2Ballots(base, services)
	if len(ballots) != 14 {
		t.Fatalf("%d ballots, want 14 (12 + Local + one for the shared address; none without endpoints)", len(ballots))
	}
	winners := mustBalance(t, ballots)
	decide := func(withWinners bool) map[netip.Addr][]string {
		got := map[netip.Addr][]string{}
		for _, n := range []string{"n1", "n2", "n3"} {
			for _, s := range services {
				in := c.input(t, n, s.Service, s.Endpoints)
				for _, o := range services {
					if o.Service.Key != s.Service.Key && o.Service.SharingKey != "" && o.Service.SharingKey == s.Service.SharingKey {
						in.Sharing = append(in.Sharing, o)
					}
				}
				if withWinners {
					in.L2Winners = winners
				}
				for _, ipd := range Decide(in).IPs {
					if ipd.L2.Announce && !slices.Contains(got[ipd.IP], n) {
						got[ipd.IP] = append(got[ipd.IP], n)
					}
				}
			}
		}
		return got
	}
	capacity := BalancedCapacity(14, 3)
	got := decide(true)
	perNode := map[string]int{}
	for ip, ns := range got {
		if len(ns) != 1 || ns[0] != winners[ip] {
			t.Errorf("%s announced by %v, balanced winner %s", ip, ns, winners[ip])
		}
		perNode[ns[0]]++
	}
	if len(got) != 14 {
		t.Errorf("%d addresses announced, want 14", len(got))
	}
	for n, l := range perNode {
		if l > capacity {
			t.Errorf("%s announces %d addresses, capacity %d", n, l, capacity)
		}
	}
	if w := got[ip("198.51.100.40")]; len(w) != 1 || w[0] != "n2" {
		t.Errorf("Local Service announced by %v, want n2 (its only endpoint)", w)
	}
	plain := map[string]int{}
	for _, ns := range decide(false) {
		plain[ns[0]]++
	}
	over := false
	for _, l := range plain {
		over = over || l > capacity
	}
	if !over {
		t.Fatalf("plain election loads %v within capacity %d: the fixture does not need balancing", plain, capacity)
	}
}

package announce

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/herald-lb/herald/api/v1beta1"
)

// TestSharedIPOneWinner: Services sharing an IP are announced by exactly one
// node for that IP (metallb#968), across every node's decision.
func TestSharedIPOneWinner(t *testing.T) {
	v4, v6 := "198.51.100.50", "2001:db8:1::50"
	tests := []struct {
		name        string
		withSharing bool
		svcs        []SharedService
		// want: the winner must be one of these (nil: any single node).
		want []string
	}{
		{
			// MetalLB elects per Service with the first IP: a's first IP is
			// the IPv6 one, so a and b could elect different nodes for v4.
			name: "Cluster, dual-stack and single-stack Services share the IPv4 address, no Sharing input",
			svcs: []SharedService{
				{Service: shared(svc("ns/a", v6, v4), "k"), Endpoints: ready("n1")},
				{Service: shared(svc("ns/b", v4), "k"), Endpoints: ready("n2")},
				{Service: shared(svc("ns/c", v4), "k"), Endpoints: []Endpoint{{NodeName: "n3", Serving: true}}},
			},
		},
		{
			name:        "Local, endpoints overlap on n3: the node serving both wins",
			withSharing: true,
			svcs: []SharedService{
				{Service: local(shared(svc("ns/a", v4), "k")), Endpoints: ready("n1", "n3")},
				{Service: local(shared(svc("ns/b", v4), "k")), Endpoints: ready("n3", "n5")},
			},
			want: []string{"n3"},
		},
		{
			name:        "Local, disjoint endpoints: union, still one winner",
			withSharing: true,
			svcs: []SharedService{
				{Service: local(shared(svc("ns/a", v4), "k")), Endpoints: ready("n1")},
				{Service: local(shared(svc("ns/b", v4), "k")), Endpoints: ready("n4", "n5")},
			},
			want: []string{"n1", "n4", "n5"},
		},
		{
			name:        "a sharing Service without endpoints does not take part",
			withSharing: true,
			svcs: []SharedService{
				{Service: local(shared(svc("ns/a", v4), "k")), Endpoints: ready("n2")},
				{Service: local(shared(svc("ns/b", v4), "k")), Endpoints: []Endpoint{{NodeName: "n4"}}},
			},
			want: []string{"n2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Check with many different IPv4 addresses so that the hash
			// order varies.
			for k := range 24 {
				addr := netip.AddrFrom4([4]byte{198, 51, 100, byte(50 + k)})
				svcs := slices.Clone(tt.svcs)
				for i := range svcs {
					s := svcs[i].Service
					s.IPs = slices.Clone(s.IPs)
					for j := range s.IPs {
						if s.IPs[j] == ip(v4) {
							s.IPs[j] = addr
						}
					}
					svcs[i].Service = s
				}
				c := newCluster(5)
				c.res.L2Advertisements = []v1beta1.L2Advertisement{l2ad("l2", "p")}
				got := l2Announcers(t, c, tt.withSharing, svcs)
				a := got[addr]
				if len(a) != 1 {
					t.Fatalf("%s announced by %v, want exactly one node", addr, a)
				}
				if tt.want != nil && !slices.Contains(tt.want, a[0]) {
					t.Fatalf("%s announced by %s, want one of %v", addr, a[0], tt.want)
				}
			}
		})
	}
}

// TestSharedIPWithoutSharingInput documents the limit of the per-IP rule
// when the caller does not pass Input.Sharing: Local Services sharing an IP
// with endpoints on different nodes can each elect their own node. Found
// by search over addresses, so the test proves the Sharing input matters.
func TestSharedIPWithoutSharingInput(t *testing.T) {
	c := newCluster(5)
	c.res.L2Advertisements = []v1beta1.L2Advertisement{l2ad("l2", "p")}
	for k := range 64 {
		addr := netip.AddrFrom4([4]byte{198, 51, 100, byte(100 + k)}).String()
		svcs := []SharedService{
			{Service: local(shared(svc("ns/a", addr), "k")), Endpoints: ready("n1", "n2")},
			{Service: local(shared(svc("ns/b", addr), "k")), Endpoints: ready("n2", "n3")},
		}
		without := l2Announcers(t, c, false, svcs)[ip(addr)]
		with := l2Announcers(t, c, true, svcs)[ip(addr)]
		if len(with) != 1 || with[0] != "n2" {
			t.Fatalf("%s with Sharing: announced by %v, want [n2]", addr, with)
		}
		if len(without) > 1 {
			return // found the case Sharing fixes
		}
	}
	t.Fatal("no address where Services elect different nodes without Sharing; the test lost its point")
}

// TestElectionStability is a property test over random clusters: removing a
// node that is not the winner of an IP never moves that IP; removing the
// winner moves only its IPs, to the runner-up; adding a node moves an IP
// only to the new node.
func TestElectionStability(t *testing.T) {
	seed := uint64(20261130)
	rng := rand.New(rand.NewPCG(seed, seed))
	t.Logf("seed %d", seed)
	for iter := range 300 {
		n := 1 + rng.IntN(40)
		var cands []Candidate
		for i := range n {
			c := Candidate{Node: fmt.Sprintf("node-%d-%d", iter, i), Serves: 1}
			if rng.IntN(4) == 0 {
				c.Preference = rng.IntN(3) * 10
			}
			if rng.IntN(8) == 0 {
				c.Serves = 2
			}
			cands = append(cands, c)
		}
		var ips []netip.Addr
		for range 1 + rng.IntN(30) {
			if rng.IntN(2) == 0 {
				ips = append(ips, netip.AddrFrom4([4]byte{203, 0, 113, byte(rng.IntN(256))}))
			} else {
				var b [16]byte
				b[0], b[1], b[2], b[3] = 0x20, 0x01, 0x0d, 0xb8
				b[15] = byte(rng.IntN(256))
				ips = append(ips, netip.AddrFrom16(b))
			}
		}
		before := map[netip.Addr][]string{}
		for _, a := range ips {
			before[a] = Elect(a, cands)
			if want := refRank(a, cands); !slices.Equal(before[a], want) {
				t.Fatalf("Elect(%s) = %v, oracle %v", a, before[a], want)
			}
		}
		// Remove a random node.
		gone := rng.IntN(n)
		rest := slices.Delete(slices.Clone(cands), gone, gone+1)
		for _, a := range ips {
			after := Elect(a, rest)
			switch {
			case before[a][0] != cands[gone].Node:
				if after[0] != before[a][0] {
					t.Fatalf("iter %d: removing non-winner %s moved %s from %s to %s", iter, cands[gone].Node, a, before[a][0], after[0])
				}
			case len(rest) == 0:
				if len(after) != 0 {
					t.Fatalf("no candidates left but winner %v", after)
				}
			default:
				if after[0] != before[a][1] {
					t.Fatalf("iter %d: removing winner %s moved %s to %s, want runner-up %s", iter, cands[gone].Node, a, after[0], before[a][1])
				}
			}
		}
		// Add a node.
		added := Candidate{Node: fmt.Sprintf("new-%d", iter), Serves: 1 + rng.IntN(2), Preference: rng.IntN(2) * 10}
		more := append(slices.Clone(cands), added)
		for _, a := range ips {
			after := Elect(a, more)[0]
			if after != before[a][0] && after != added.Node {
				t.Fatalf("iter %d: adding %s moved %s from %s to %s", iter, added.Node, a, before[a][0], after)
			}
		}
	}
}

// TestFailoverThroughDecide runs the stability property end to end: a
// cluster of 12 nodes announcing 32 Services; killing one speaker (Live)
// moves exactly the IPs it announced and no other.
func TestFailoverThroughDecide(t *testing.T) {
	c := newCluster(12)
	c.res.L2Advertisements = []v1beta1.L2Advertisement{l2ad("l2", "p")}
	var svcs []SharedService
	for i := range 32 {
		s := svc(fmt.Sprintf("ns/s%d", i), netip.AddrFrom4([4]byte{198, 51, 100, byte(i + 1)}).String())
		svcs = append(svcs, SharedService{Service: s, Endpoints: ready("n1")})
	}
	owner := func() map[netip.Addr]string {
		out := map[netip.Addr]string{}
		for a, nodes := range l2Announcers(t, c, false, svcs) {
			if len(nodes) != 1 {
				t.Fatalf("%s announced by %v", a, nodes)
			}
			out[a] = nodes[0]
		}
		if len(out) != len(svcs) {
			t.Fatalf("%d of %d IPs announced", len(out), len(svcs))
		}
		return out
	}
	before := owner()
	counts := map[string]int{}
	for _, n := range before {
		counts[n]++
	}
	// The busiest node dies.
	victim := ""
	for n, k := range counts {
		if victim == "" || k > counts[victim] || (k == counts[victim] && n < victim) {
			victim = n
		}
	}
	c.live = map[string]bool{}
	for _, n := range c.nodes {
		c.live[n.Name] = n.Name != victim
	}
	after := owner()
	moved := 0
	for a, was := range before {
		switch {
		case was == victim && after[a] == victim:
			t.Errorf("%s still announced by dead %s", a, victim)
		case was == victim:
			moved++
		case after[a] != was:
			t.Errorf("%s moved from live %s to %s", a, was, after[a])
		}
	}
	if moved != counts[victim] || moved == 0 {
		t.Errorf("moved %d IPs, victim %s had %d", moved, victim, counts[victim])
	}
}

// metallbL2Winner is MetalLB v0.16.2's layer 2 election for a Service
// without preferred nodes (speaker/layer2_controller.go, ShouldAnnounce and
// sortL2Candidates): the candidate with the smallest SHA-256(node + "#" +
// ip) of the Service's first ingress IP wins, for every IP of the Service.
func metallbL2Winner(nodes []string, first netip.Addr) string {
	win, best := "", [sha256.Size]byte{}
	for _, n := range nodes {
		h := sha256.Sum256([]byte(n + "#" + first.String()))
		if win == "" || bytes.Compare(h[:], best[:]) < 0 {
			win, best = n, h
		}
	}
	return win
}

// TestElectByServiceFirstIP: in the migration mode a dual-stack Service's
// addresses are all announced by the node MetalLB's speaker elects (on the
// first ingress IP), so a group mixing MetalLB and Herald speakers answers
// each address from one node; without it, the IPv6 address is elected on
// its own and lands elsewhere for some Services (which is what made two
// nodes answer, or none, during a node-by-node swap).
func TestElectByServiceFirstIP(t *testing.T) {
	for _, tt := range []struct {
		name    string
		migrate bool
	}{{"per address (default)", false}, {"per Service, first IP (migration mode)", true}} {
		t.Run(tt.name, func(t *testing.T) {
			differs := 0
			for k := range 24 {
				v4 := netip.AddrFrom4([4]byte{198, 51, 100, byte(50 + k)})
				v6 := netip.MustParseAddr(fmt.Sprintf("2001:db8:1::%x", 0x50+k))
				for _, order := range [][]netip.Addr{{v4, v6}, {v6, v4}} {
					c := newCluster(5)
					c.opts.ElectByServiceFirstIP = tt.migrate
					c.res.L2Advertisements = []v1beta1.L2Advertisement{l2ad("l2", "p")}
					s := svc("ns/ds")
					s.IPs = order
					got := l2Announcers(t, c, false, []SharedService{{Service: s, Endpoints: ready("n1", "n2", "n3", "n4", "n5")}})
					var names []string
					for _, n := range c.nodes {
						names = append(names, n.Name)
					}
					want := metallbL2Winner(names, order[0])
					for _, a := range order {
						if len(got[a]) != 1 {
							t.Fatalf("%v: %s announced by %v, want one node", order, a, got[a])
						}
					}
					if got[order[0]][0] != want {
						t.Fatalf("%v: first address %s on %s, MetalLB elects %s", order, order[0], got[order[0]][0], want)
					}
					if got[order[1]][0] != want {
						if tt.migrate {
							t.Fatalf("%v: second address %s on %s, MetalLB announces it from %s", order, order[1], got[order[1]][0], want)
						}
						differs++
					}
				}
			}
			if !tt.migrate && differs == 0 {
				t.Fatal("per-address election never put the second address elsewhere in 48 Services: the test cannot tell the modes apart")
			}
		})
	}
}

// TestSharingEndpointsDecideTheSame: Decide with each SharedService's
// endpoints reduced by SharingEndpoints takes the same decision as with
// all of them, on every node, for Local and Cluster sharers whose
// endpoints repeat nodes, are not ready, only serving, on no node or on a
// dead node.
func TestSharingEndpointsDecideTheSame(t *testing.T) {
	c := newCluster(4)
	c.live = map[string]bool{"n1": true, "n2": true, "n3": true}
	c.res.L2Advertisements = []v1beta1.L2Advertisement{l2ad("l2", "p")}
	mixed := []Endpoint{
		{NodeName: "n1", Ready: true, Family: 4, Target: uidTarget("1")}, {NodeName: "n1", Ready: true, Family: 4, Target: uidTarget("2")},
		{NodeName: "n2"}, {NodeName: "n3", Serving: true}, {NodeName: "", Ready: true}, {NodeName: "n4", Ready: true},
	}
	want := []Endpoint{{NodeName: "n1", Ready: true}, {NodeName: "n3", Ready: true}, {NodeName: "", Ready: true}, {NodeName: "n4", Ready: true}}
	if got := SharingEndpoints(mixed); !reflect.DeepEqual(got, want) {
		t.Fatalf("SharingEndpoints = %v, want %v", got, want)
	}
	if got := SharingEndpoints([]Endpoint{{NodeName: "n1"}}); got != nil {
		t.Fatalf("SharingEndpoints of no serving endpoint = %v, want nil", got)
	}
	for k := range 32 {
		addr := netip.AddrFrom4([4]byte{198, 51, 100, byte(100 + k)}).String()
		svcs := []SharedService{
			{Service: local(shared(svc("ns/a", addr), "k")), Endpoints: ready("n1", "n2")},
			{Service: local(shared(svc("ns/b", addr), "k")), Endpoints: mixed},
			{Service: local(shared(svc("ns/c", addr), "k")), Endpoints: []Endpoint{{NodeName: "n2"}, {NodeName: "n3", Serving: true}}},
			{Service: shared(svc("ns/d", addr), "k"), Endpoints: []Endpoint{{NodeName: "n1", Serving: true}}},
		}
		for _, n := range c.nodes {
			snap := c.snapshot(t, n.Name)
			for i, s := range svcs {
				full := Input{Config: snap, Node: n.Name, Nodes: c.nodes, Live: c.live, Service: s.Service, Endpoints: s.Endpoints, Options: c.opts}
				reduced := full
				for j, o := range svcs {
					if j != i {
						full.Sharing = append(full.Sharing, o)
						reduced.Sharing = append(reduced.Sharing, SharedService{Service: o.Service, Endpoints: SharingEndpoints(o.Endpoints)})
					}
				}
				if a, b := Decide(full), Decide(reduced); !reflect.DeepEqual(a, b) {
					t.Fatalf("%s on %s, %s: with every endpoint %+v, with SharingEndpoints %+v", s.Service.Key, n.Name, addr, a, b)
				}
			}
		}
	}
}

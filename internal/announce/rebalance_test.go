package announce

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/api/v1beta1"
)

// balancedOn runs ElectBalancedServices with the snapshot of node self.
func balancedOn(t *testing.T, c *cluster, self string, services []SharedService) BalancedElection {
	t.Helper()
	e, err := ElectBalancedServices(c.input(t, self, Service{}, nil), services)
	if err != nil {
		t.Fatalf("ElectBalancedServices: %v", err)
	}
	return e
}

// fiveServices: 5 Cluster Services, one address each, endpoints everywhere.
func fiveServices(nodes ...string) []SharedService {
	var out []SharedService
	for i := 1; i <= 5; i++ {
		out = append(out, SharedService{Service: svc(fmt.Sprintf("ns/s%d", i), fmt.Sprintf("198.51.100.%d", i)), Endpoints: ready(nodes...)})
	}
	return out
}

// TestBalancedElectionTable: the speaker-side properties of the balanced
// election, from Services rather than ballots. Each case elects on every
// node's own snapshot (every speaker must agree), then changes one input
// and checks which addresses moved and which Services Redecide names.
func TestBalancedElectionTable(t *testing.T) {
	type change struct {
		live     map[string]bool // nil: unchanged
		services []SharedService // nil: unchanged
		// subject: the address whose own inputs changed (it may move, and
		// is not counted as rebalancing).
		subject string
	}
	type tc struct {
		name     string
		nodes    int
		ads      func() []v1beta1.L2Advertisement
		services []SharedService
		change   change
		// check sees the runs before and after the change.
		check func(t *testing.T, before, after BalancedElection)
	}
	all := []string{"n1", "n2", "n3"}
	plain := func() []v1beta1.L2Advertisement { return []v1beta1.L2Advertisement{l2ad("l2", "p")} }
	cases := []tc{
		{
			name: "node loss moves its addresses and at most one other (5 on 3)", nodes: 3, ads: plain,
			services: fiveServices(all...),
			check: func(t *testing.T, before, after BalancedElection) {
				for n, l := range before.Loads() {
					if l > 3 { // ⌈5/3⌉+1
						t.Errorf("before: %s holds %d of 5 addresses", n, l)
					}
				}
			},
		},
		{
			name: "externalTrafficPolicy Local: only nodes with an endpoint win", nodes: 3, ads: plain,
			services: append(fiveServices(all...),
				SharedService{Service: local(svc("ns/local", "198.51.100.9")), Endpoints: ready("n2")}),
			change: change{services: append(fiveServices(all...),
				SharedService{Service: local(svc("ns/local", "198.51.100.9")), Endpoints: ready("n3")}), subject: "198.51.100.9"},
			check: func(t *testing.T, before, after BalancedElection) {
				if w := before.Winners[ip("198.51.100.9")]; w != "n2" {
					t.Errorf("Local Service on %s, its only endpoint is on n2", w)
				}
				if w := after.Winners[ip("198.51.100.9")]; w != "n3" {
					t.Errorf("Local Service after its endpoint moved: on %s, want n3", w)
				}
				if !slices.Contains(after.Redecide(&before), "ns/local") {
					t.Errorf("Redecide %v lacks ns/local", after.Redecide(&before))
				}
			},
		},
		{
			name: "nodeSelectors: only selected nodes, balanced among them", nodes: 4,
			ads: func() []v1beta1.L2Advertisement {
				ad := l2ad("l2", "p")
				ad.Spec.NodeSelectors = []metav1.LabelSelector{sel("zone", "a")}
				return []v1beta1.L2Advertisement{ad}
			},
			services: func() []SharedService {
				var out []SharedService
				for i := 1; i <= 6; i++ {
					out = append(out, SharedService{Service: svc(fmt.Sprintf("ns/z%d", i), fmt.Sprintf("198.51.100.%d", i)), Endpoints: ready("n1", "n2", "n3", "n4")})
				}
				return out
			}(),
			check: func(t *testing.T, before, _ BalancedElection) {
				l := before.Loads()
				if len(l) != 2 || l["n1"] > 4 || l["n2"] > 4 || l["n1"]+l["n2"] != 6 { // ⌈6/2⌉+1
					t.Errorf("loads %v, want the 6 addresses on n1 and n2 only, at most 4 each", l)
				}
			},
		},
		{
			name: "shared address: one winner, both Services redecided when it moves", nodes: 3, ads: plain,
			services: []SharedService{
				{Service: shared(svc("ns/a", "198.51.100.20"), "k"), Endpoints: ready(all...)},
				{Service: shared(svc("ns/b", "198.51.100.20"), "k"), Endpoints: ready(all...)},
				{Service: svc("ns/c", "198.51.100.21"), Endpoints: ready(all...)},
			},
			check: func(t *testing.T, before, after BalancedElection) {
				if hs := before.Holders[ip("198.51.100.20")]; !slices.Equal(hs, []string{"ns/a", "ns/b"}) {
					t.Errorf("holders of the shared address %v", hs)
				}
				if before.Winners[ip("198.51.100.20")] == after.Winners[ip("198.51.100.20")] {
					return // the lost node did not hold it: covered by the generic checks
				}
				r := after.Redecide(&before)
				if !slices.Contains(r, "ns/a") || !slices.Contains(r, "ns/b") {
					t.Errorf("shared address moved, Redecide %v lacks one of its Services", r)
				}
			},
		},
		{
			name: "a new Service moves others only within the bound", nodes: 3, ads: plain,
			services: fiveServices(all...),
			change: change{services: append(fiveServices(all...),
				SharedService{Service: svc("ns/new", "198.51.100.6"), Endpoints: ready(all...)}), subject: "198.51.100.6"},
			check: func(t *testing.T, before, after BalancedElection) {
				for n, l := range after.Loads() {
					if l > BalancedCapacity(6, 3) {
						t.Errorf("after: %s holds %d of 6", n, l)
					}
				}
				if r := after.Redecide(&before); !slices.Contains(r, "ns/new") {
					t.Errorf("Redecide %v lacks the new Service", r)
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := newCluster(c.nodes)
			cl.res.L2Advertisements = c.ads()
			for i := range cl.nodes {
				if i < 2 {
					cl.nodes[i].Labels["zone"] = "a"
				}
			}
			before := balancedOn(t, cl, "n1", c.services)
			for _, n := range cl.nodes[1:] {
				if got := balancedOn(t, cl, n.Name, c.services); !maps.Equal(got.Winners, before.Winners) {
					t.Fatalf("speakers disagree: n1 elects %v, %s elects %v", before.Winners, n.Name, got.Winners)
				}
			}
			// Default change: the node holding the most addresses fails.
			ch := c.change
			lost := ""
			if ch.live == nil && ch.services == nil {
				lost = busiest(before.Loads())
				ch.live = map[string]bool{}
				for _, n := range cl.nodes {
					ch.live[n.Name] = n.Name != lost
				}
			}
			if ch.live != nil {
				cl.live = ch.live
			}
			services := c.services
			if ch.services != nil {
				services = ch.services
			}
			after := balancedOn(t, cl, "n1", services)
			moved := WinnerChanges(before.Winners, after.Winners)
			others := 0
			for _, a := range moved {
				if before.Winners[a] != lost && a.String() != ch.subject {
					others++
				}
			}
			for a, w := range before.Winners {
				if lost != "" && w == lost && after.Winners[a] == lost {
					t.Errorf("%s still on the lost node %s", a, lost)
				}
			}
			// The bound's rebalancing: 5 or 6 addresses on 3 nodes move at
			// most one address besides the lost node's (TestElectBalancedMovement).
			if others > 1 {
				t.Errorf("%d addresses not on the lost node moved: %v (before %v, after %v)", others, moved, before.Winners, after.Winners)
			}
			// Redecide names exactly the holders of the moved addresses.
			var want []string
			for _, a := range moved {
				want = append(want, before.Holders[a]...)
				want = append(want, after.Holders[a]...)
			}
			slices.Sort(want)
			if got := after.Redecide(&before); !slices.Equal(got, slices.Compact(want)) {
				t.Errorf("Redecide %v, want %v", got, slices.Compact(want))
			}
			c.check(t, before, after)
		})
	}
}

func busiest(l map[string]int) string {
	best := ""
	for n, v := range l {
		if best == "" || v > l[best] || (v == l[best] && n < best) {
			best = n
		}
	}
	return best
}

// TestWinnerChanges: appearing, disappearing and moved addresses, sorted;
// unchanged ones are not listed.
func TestWinnerChanges(t *testing.T) {
	a, b, c, d := ip("198.51.100.1"), ip("198.51.100.2"), ip("198.51.100.3"), ip("2001:db8::1")
	old := map[netip.Addr]string{a: "n1", b: "n2", c: "n3"}
	now := map[netip.Addr]string{a: "n1", b: "n3", d: "n2"}
	if got := WinnerChanges(old, now); !slices.Equal(got, []netip.Addr{b, c, d}) {
		t.Fatalf("WinnerChanges %v, want [b c d]", got)
	}
	if got := WinnerChanges(nil, nil); len(got) != 0 {
		t.Fatalf("nil maps: %v", got)
	}
	e := BalancedElection{Winners: now, Holders: map[netip.Addr][]string{a: {"ns/a"}, d: {"ns/d"}}}
	if got := e.Redecide(nil); !slices.Equal(got, []string{"ns/a", "ns/d"}) {
		t.Fatalf("Redecide(nil) %v: every holder of an elected address", got)
	}
}

// TestBalancedElectionHoldersSkipOtherClasses: Services of another
// loadBalancerClass or not of type LoadBalancer hold nothing.
func TestBalancedElectionHoldersSkipOtherClasses(t *testing.T) {
	c := newCluster(2)
	c.res.L2Advertisements = []v1beta1.L2Advertisement{l2ad("l2", "p")}
	other := svc("ns/other", "198.51.100.7")
	other.LoadBalancerClass = "someone-else"
	notLB := svc("ns/clusterip", "198.51.100.8")
	notLB.LoadBalancer = false
	e := balancedOn(t, c, "n1", []SharedService{{Service: other, Endpoints: ready("n1")}, {Service: notLB, Endpoints: ready("n1")}})
	if len(e.Holders) != 0 || len(e.Winners) != 0 {
		t.Fatalf("holders %v winners %v, want none", e.Holders, e.Winners)
	}
}

// BenchmarkElectBalancedServices is the speaker's whole-set recompute
// without the API reads: L2Ballots and ElectBalanced over 1,000 Cluster
// Services with one address each and an endpoint on every one of 100
// nodes (compare with BenchmarkElectBalanced, the election alone on the
// same sizes).
func BenchmarkElectBalancedServices(b *testing.B) {
	c := newCluster(100)
	c.res.L2Advertisements = []v1beta1.L2Advertisement{l2ad("l2", "p")}
	var names []string
	for _, n := range c.nodes {
		names = append(names, n.Name)
	}
	eps := ready(names...)
	var services []SharedService
	for i := range 1000 {
		a := fmt.Sprintf("198.51.100.%d", i%250+1)
		if i >= 250 {
			a = fmt.Sprintf("2001:db8:1::%x", i)
		}
		services = append(services, SharedService{Service: svc(fmt.Sprintf("ns/s%04d", i), a), Endpoints: eps})
	}
	base := c.input(b, "n1", Service{}, nil)
	b.ReportAllocs()
	for b.Loop() {
		e, err := ElectBalancedServices(base, services)
		if err != nil || len(e.Winners) != 1000 {
			b.Fatalf("%d winners, %v", len(e.Winners), err)
		}
	}
}

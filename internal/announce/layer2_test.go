package announce

import (
	"bytes"
	"crypto/sha256"
	"net/netip"
	"slices"
	"sort"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/api/v1beta1"
)

// TestL2Rules checks every rule that decides whether this node may announce
// in layer 2, one table row per rule. Clusters have a single node (or the
// other nodes are ineligible), so announcing does not depend on the hash.
func TestL2Rules(t *testing.T) {
	v4 := "198.51.100.10"
	tests := []struct {
		name    string
		nodes   int
		setup   func(c *cluster)
		svc     Service
		eps     []Endpoint
		want    Reason
		wantIfs []string
	}{
		{name: "announce with one ad and one ready endpoint", svc: svc("ns/a", v4), eps: ready("n1")},
		{name: "no L2Advertisement", setup: func(c *cluster) { c.res.L2Advertisements = nil }, svc: svc("ns/a", v4), eps: ready("n1"), want: ReasonNoMatchingAdvertisement},
		{name: "ad for another pool", setup: func(c *cluster) {
			c.res.Pools = append(c.res.Pools, pool("other", "203.0.113.0/24"))
			c.res.L2Advertisements = []v1beta1.L2Advertisement{l2ad("l2", "other")}
		}, svc: svc("ns/a", v4), eps: ready("n1"), want: ReasonNoMatchingAdvertisement},
		{name: "ad selects the pool by label", setup: func(c *cluster) {
			c.res.Pools[0].Labels = map[string]string{"tier": "gold"}
			ad := l2ad("l2")
			ad.Spec.IPAddressPoolSelectors = []metav1.LabelSelector{sel("tier", "gold")}
			c.res.L2Advertisements = []v1beta1.L2Advertisement{ad}
		}, svc: svc("ns/a", v4), eps: ready("n1")},
		{name: "pool selector does not match", setup: func(c *cluster) {
			c.res.Pools[0].Labels = map[string]string{"tier": "bronze"}
			ad := l2ad("l2")
			ad.Spec.IPAddressPoolSelectors = []metav1.LabelSelector{sel("tier", "gold")}
			c.res.L2Advertisements = []v1beta1.L2Advertisement{ad}
		}, svc: svc("ns/a", v4), eps: ready("n1"), want: ReasonNoMatchingAdvertisement},
		{name: "serviceSelectors do not match", setup: func(c *cluster) {
			c.res.L2Advertisements[0].Spec.ServiceSelectors = []metav1.LabelSelector{sel("app", "web")}
		}, svc: withLabels(svc("ns/a", v4), "app", "db"), eps: ready("n1"), want: ReasonNoMatchingAdvertisement},
		{name: "serviceSelectors match", setup: func(c *cluster) {
			c.res.L2Advertisements[0].Spec.ServiceSelectors = []metav1.LabelSelector{sel("app", "web")}
		}, svc: withLabels(svc("ns/a", v4), "app", "web"), eps: ready("n1")},
		{name: "allow-shared-ip with serviceSelectors", setup: func(c *cluster) {
			c.res.L2Advertisements[0].Spec.ServiceSelectors = []metav1.LabelSelector{sel("app", "web")}
		}, svc: shared(withLabels(svc("ns/a", v4), "app", "web"), "k"), eps: ready("n1"), want: ReasonSharedIPWithServiceSelector},
		{name: "allow-shared-ip with an ad without serviceSelectors", svc: shared(svc("ns/a", v4), "k"), eps: ready("n1")},
		{name: "allow-shared-ip, ad with serviceSelectors not matching is ignored", setup: func(c *cluster) {
			ad := l2ad("l2-web", "p")
			ad.Spec.ServiceSelectors = []metav1.LabelSelector{sel("app", "web")}
			c.res.L2Advertisements = append(c.res.L2Advertisements, ad)
		}, svc: shared(withLabels(svc("ns/a", v4), "app", "db"), "k"), eps: ready("n1")},
		{name: "nodeSelectors exclude this node", setup: func(c *cluster) {
			c.res.L2Advertisements[0].Spec.NodeSelectors = []metav1.LabelSelector{sel("kubernetes.io/hostname", "n2")}
		}, nodes: 2, svc: svc("ns/a", v4), eps: ready("n1"), want: ReasonNoMatchingAdvertisement},
		{name: "nodeSelectors include this node only", setup: func(c *cluster) {
			c.res.L2Advertisements[0].Spec.NodeSelectors = []metav1.LabelSelector{sel("kubernetes.io/hostname", "n1")}
		}, nodes: 3, svc: svc("ns/a", v4), eps: ready("n2")},
		{name: "NetworkUnavailable", setup: func(c *cluster) { c.nodes[0].NetworkUnavailable = true }, svc: svc("ns/a", v4), eps: ready("n1"), want: ReasonNodeNetworkUnavailable},
		{name: "exclude label", setup: func(c *cluster) { c.nodes[0].Labels[ExcludeFromLBLabel] = "" }, svc: svc("ns/a", v4), eps: ready("n1"), want: ReasonNodeLabeledExcludeBalancers},
		{name: "exclude label with IgnoreExcludeLB", setup: func(c *cluster) {
			c.nodes[0].Labels[ExcludeFromLBLabel] = "true"
			c.opts.IgnoreExcludeLB = true
		}, svc: svc("ns/a", v4), eps: ready("n1")},
		{name: "no endpoints", svc: svc("ns/a", v4), want: ReasonNoEndpoints},
		{name: "only unready endpoints", svc: svc("ns/a", v4), eps: []Endpoint{{NodeName: "n1"}}, want: ReasonNoEndpoints},
		{name: "Cluster: serving-but-not-ready endpoint elsewhere", nodes: 2, setup: func(c *cluster) {
			c.res.L2Advertisements[0].Spec.NodeSelectors = []metav1.LabelSelector{sel("kubernetes.io/hostname", "n1")}
		}, svc: svc("ns/a", v4), eps: []Endpoint{{NodeName: "n2", Serving: true}}},
		{name: "Local: no local endpoint", nodes: 2, svc: local(svc("ns/a", v4)), eps: ready("n2"), want: ReasonNoLocalEndpoints},
		{name: "Local: unready local endpoint", nodes: 2, svc: local(svc("ns/a", v4)), eps: []Endpoint{{NodeName: "n1"}}, want: ReasonNoLocalEndpoints},
		{name: "Local: serving-but-not-ready local endpoint", svc: local(svc("ns/a", v4)), eps: []Endpoint{{NodeName: "n1", Serving: true}}},
		{name: "speaker not live", setup: func(c *cluster) { c.live = map[string]bool{"n2": true} }, nodes: 2, svc: svc("ns/a", v4), eps: ready("n1"), want: ReasonNotOwner},
		{name: "nil Live means every node is live", setup: func(c *cluster) { c.live = nil }, svc: svc("ns/a", v4), eps: ready("n1")},
		{name: "IP in no pool", svc: svc("ns/a", "203.0.113.7"), eps: ready("n1"), want: ReasonIPNotAllowed},
		{name: "IPv6", svc: svc("ns/a", "2001:db8:1::5"), eps: ready("n1")},
		{name: "interfaces: union of the ads selecting this node", setup: func(c *cluster) {
			a, b, other := l2ad("a", "p"), l2ad("b", "p"), l2ad("c", "p")
			a.Spec.Interfaces = []string{"eth1", "eth0"}
			b.Spec.Interfaces = []string{"bond0", "eth0"}
			other.Spec.Interfaces = []string{"vlan9"}
			other.Spec.NodeSelectors = []metav1.LabelSelector{sel("kubernetes.io/hostname", "n9")}
			c.res.L2Advertisements = []v1beta1.L2Advertisement{a, b, other}
		}, svc: svc("ns/a", v4), eps: ready("n1"), wantIfs: []string{"bond0", "eth0", "eth1"}},
		{name: "interfaces: an ad without interfaces means all", setup: func(c *cluster) {
			a := l2ad("a", "p")
			a.Spec.Interfaces = []string{"eth1"}
			c.res.L2Advertisements = []v1beta1.L2Advertisement{a, l2ad("b", "p")}
		}, svc: svc("ns/a", v4), eps: ready("n1"), wantIfs: nil},
		{name: "interfaces: ads not covering the Service do not count", setup: func(c *cluster) {
			a, b := l2ad("a", "p"), l2ad("b", "p")
			a.Spec.Interfaces = []string{"eth1"}
			b.Spec.Interfaces = []string{"eth2"}
			b.Spec.ServiceSelectors = []metav1.LabelSelector{sel("app", "other")}
			c.res.L2Advertisements = []v1beta1.L2Advertisement{a, b}
		}, svc: svc("ns/a", v4), eps: ready("n1"), wantIfs: []string{"eth1"}},
		{name: "interfaces: one named interface answers here", setup: func(c *cluster) {
			c.res.L2Advertisements[0].Spec.Interfaces = []string{"eth5", "eth0"}
			c.ifaces = &NodeInterfaces{ARP: []string{"eth0", "eth1"}}
		}, svc: svc("ns/a", v4), eps: ready("n1"), wantIfs: []string{"eth0", "eth5"}},
		{name: "interfaces: none of the named interfaces answers here", setup: func(c *cluster) {
			c.res.L2Advertisements[0].Spec.Interfaces = []string{"eth5"}
			c.ifaces = &NodeInterfaces{ARP: []string{"eth0", "eth1"}, NDP: []string{"eth5"}}
		}, svc: svc("ns/a", v4), eps: ready("n1"), want: ReasonNoMatchingInterface},
		{name: "interfaces: IPv6 needs the interface answering NDP", setup: func(c *cluster) {
			c.res.L2Advertisements[0].Spec.Interfaces = []string{"eth5"}
			c.ifaces = &NodeInterfaces{ARP: []string{"eth5"}}
		}, svc: svc("ns/a", "2001:db8:1::5"), eps: ready("n1"), want: ReasonNoMatchingInterface},
		{name: "interfaces: every interface, but none answers here", setup: func(c *cluster) {
			c.ifaces = &NodeInterfaces{NDP: []string{"eth0"}}
		}, svc: svc("ns/a", v4), eps: ready("n1"), want: ReasonNoMatchingInterface},
		{name: "interfaces: every interface, one answers here", setup: func(c *cluster) {
			c.ifaces = &NodeInterfaces{ARP: []string{"eth0"}}
		}, svc: svc("ns/a", v4), eps: ready("n1")},
		{name: "interfaces: unknown interfaces are not checked", setup: func(c *cluster) {
			c.res.L2Advertisements[0].Spec.Interfaces = []string{"eth5"}
		}, svc: svc("ns/a", v4), eps: ready("n1"), wantIfs: []string{"eth5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := max(tt.nodes, 1)
			c := newCluster(n)
			c.res.L2Advertisements = []v1beta1.L2Advertisement{l2ad("l2", "p")}
			if n > 1 && tt.want == ReasonNone {
				// Only n1 may announce, whatever the hash says.
				for _, other := range c.nodes[1:] {
					other.Labels[ExcludeFromLBLabel] = ""
				}
			}
			if tt.setup != nil {
				tt.setup(c)
			}
			d := Decide(c.input(t, "n1", tt.svc, tt.eps))
			if d.Reason != ReasonNone || len(d.IPs) != 1 {
				t.Fatalf("decision %+v: want one IP decision", d)
			}
			l2 := d.IPs[0].L2
			if got := l2.Reason; got != tt.want || l2.Announce != (tt.want == ReasonNone) {
				t.Fatalf("L2 = %+v, want reason %q", l2, tt.want)
			}
			if l2.Announce {
				if l2.Winner != "n1" {
					t.Errorf("winner %q, want n1", l2.Winner)
				}
				if !slices.Equal(l2.Interfaces, tt.wantIfs) || (l2.Interfaces == nil) != (tt.wantIfs == nil) {
					t.Errorf("interfaces %q, want %q", l2.Interfaces, tt.wantIfs)
				}
				if got := d.L2Targets(); len(got) != 1 || got[0].IP != d.IPs[0].IP {
					t.Errorf("L2Targets %v", got)
				}
			} else if l2.Detail == "" {
				t.Errorf("no detail for reason %s", l2.Reason)
			}
			if l2.Reason == ReasonNoMatchingInterface && l2.Winner != "n1" {
				t.Errorf("noMatchingInterface: winner %q, want n1 (this node won, nobody announces)", l2.Winner)
			}
			if d.IPs[0].BGP.Announce {
				t.Errorf("BGP announces without BGPAdvertisement: %+v", d.IPs[0].BGP)
			}
		})
	}
}

// TestNoMatchingInterfaceDetail: the reason names the advertisement, the
// interfaces it wants and the node's interfaces of the IP's family; another
// node's speaker sees the same winner and reports notOwner (the IP is
// announced by nobody, as in MetalLB).
func TestNoMatchingInterfaceDetail(t *testing.T) {
	c := newCluster(1)
	ad := l2ad("l2-eth5", "p")
	ad.Spec.Interfaces = []string{"eth5", "eth6"}
	c.res.L2Advertisements = []v1beta1.L2Advertisement{ad}
	c.ifaces = &NodeInterfaces{ARP: []string{"eth0", "eth1"}, NDP: []string{"eth0"}}
	d := Decide(c.input(t, "n1", svc("ns/a", "198.51.100.10"), ready("n1")))
	want := "node n1 won the election for 198.51.100.10 but has none of the interfaces of L2Advertisement l2-eth5 (interfaces eth5, eth6) (its interfaces answering ARP: eth0, eth1)"
	if got := d.IPs[0].L2; got.Reason != ReasonNoMatchingInterface || got.Detail != want {
		t.Errorf("L2 = %+v\nwant detail %q", got, want)
	}
	if got := d.L2Targets(); len(got) != 0 {
		t.Errorf("L2Targets %v, want none", got)
	}
	c.ifaces = &NodeInterfaces{}
	d = Decide(c.input(t, "n1", svc("ns/a", "2001:db8:1::5"), ready("n1")))
	want = "node n1 won the election for 2001:db8:1::5 but has none of the interfaces of L2Advertisement l2-eth5 (interfaces eth5, eth6) (its interfaces answering NDP: none)"
	if got := d.IPs[0].L2; got.Detail != want {
		t.Errorf("IPv6 detail %q\nwant %q", got.Detail, want)
	}
}

func TestNodeInterfacesAnswering(t *testing.T) {
	n := &NodeInterfaces{ARP: []string{"eth0", "eth1"}, NDP: []string{"eth1"}}
	v4, v6 := ip("198.51.100.1"), ip("2001:db8::1")
	tests := []struct {
		t    L2Target
		want []string
	}{
		{L2Target{IP: v4}, []string{"eth0", "eth1"}},
		{L2Target{IP: v6}, []string{"eth1"}},
		{L2Target{IP: v4, Interfaces: []string{"eth1", "eth5"}}, []string{"eth1"}},
		{L2Target{IP: v6, Interfaces: []string{"eth0"}}, nil},
	}
	for _, tt := range tests {
		if got := n.Answering(tt.t); !slices.Equal(got, tt.want) {
			t.Errorf("Answering(%v) = %v, want %v", tt.t, got, tt.want)
		}
	}
	if got := (*NodeInterfaces)(nil).Answering(L2Target{IP: v4}); got != nil {
		t.Errorf("nil.Answering = %v", got)
	}
}

// TestServiceLevelReasons covers the checks made before any IP.
func TestServiceLevelReasons(t *testing.T) {
	c := newCluster(1)
	c.res.L2Advertisements = []v1beta1.L2Advertisement{l2ad("l2", "p")}
	base := svc("ns/a", "198.51.100.10")
	notLB := base
	notLB.LoadBalancer = false
	classed := base
	classed.LoadBalancerClass = "other.io/lb"
	noIP := svc("ns/a")
	bad := base
	bad.InvalidIPs = []string{"1.2.3.x"}
	tests := []struct {
		name  string
		svc   Service
		class string
		want  Reason
	}{
		{"announced", base, "", ReasonNone},
		{"not LoadBalancer", notLB, "", ReasonNotLoadBalancer},
		{"other class", classed, "", ReasonOtherLoadBalancerClass},
		{"our class", classed, "other.io/lb", ReasonNone},
		{"class expected, Service has none", base, "other.io/lb", ReasonOtherLoadBalancerClass},
		{"no IP", noIP, "", ReasonNoIPAllocated},
		{"invalid IP", bad, "", ReasonInvalidIP},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.opts.LoadBalancerClass = tt.class
			d := Decide(c.input(t, "n1", tt.svc, ready("n1")))
			if d.Reason != tt.want {
				t.Fatalf("reason %q, want %q", d.Reason, tt.want)
			}
			if (tt.want == ReasonNone) != d.Announced() {
				t.Errorf("Announced() = %v", d.Announced())
			}
			if tt.want != ReasonNone && len(d.IPs) != 0 {
				t.Errorf("IP decisions with a service-level reason: %+v", d.IPs)
			}
		})
	}
}

// refRank is an independent transcription of the documented election
// order, used as the oracle.
func refRank(addr netip.Addr, cands []Candidate) []string {
	cs := slices.Clone(cands)
	sort.SliceStable(cs, func(i, j int) bool {
		if cs[i].Serves != cs[j].Serves {
			return cs[i].Serves > cs[j].Serves
		}
		if cs[i].Preference != cs[j].Preference {
			return cs[i].Preference > cs[j].Preference
		}
		hi := sha256.Sum256([]byte(cs[i].Node + "#" + addr.String()))
		hj := sha256.Sum256([]byte(cs[j].Node + "#" + addr.String()))
		return bytes.Compare(hi[:], hj[:]) < 0
	})
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Node
	}
	return out
}

func plain(names ...string) []Candidate {
	var out []Candidate
	for _, n := range names {
		out = append(out, Candidate{Node: n, Serves: 1})
	}
	return out
}

// TestElectionCandidates checks which nodes take part in the election: for
// each scenario, Decide is run on every node and exactly the oracle's
// winner over the expected candidate set must announce.
func TestElectionCandidates(t *testing.T) {
	// 16 IPs: with 5 nodes, a node wrongly left in or out of the
	// candidate set changes some winner.
	var addrs []string
	for i := range 16 {
		addrs = append(addrs, netip.AddrFrom4([4]byte{198, 51, 100, byte(30 + i)}).String())
	}
	tests := []struct {
		name  string
		setup func(c *cluster)
		svc   Service
		eps   []Endpoint
		cands []Candidate // expected candidates
	}{
		{name: "all nodes", svc: svc("ns/a", addrs...), eps: ready("n1"), cands: plain("n1", "n2", "n3", "n4", "n5")},
		{name: "dead members are not candidates", setup: func(c *cluster) {
			c.live = map[string]bool{"n1": true, "n3": true, "n5": true, "ghost": true}
		}, svc: svc("ns/a", addrs...), eps: ready("n2"), cands: plain("n1", "n3", "n5")},
		{name: "NetworkUnavailable and excluded nodes are not candidates", setup: func(c *cluster) {
			c.nodeByName("n2").NetworkUnavailable = true
			c.nodeByName("n4").Labels[ExcludeFromLBLabel] = "yes"
		}, svc: svc("ns/a", addrs...), eps: ready("n1"), cands: plain("n1", "n3", "n5")},
		{name: "IgnoreExcludeLB keeps excluded nodes", setup: func(c *cluster) {
			c.nodeByName("n4").Labels[ExcludeFromLBLabel] = "yes"
			c.opts.IgnoreExcludeLB = true
		}, svc: svc("ns/a", addrs...), eps: ready("n1"), cands: plain("n1", "n2", "n3", "n4", "n5")},
		{name: "nodeSelectors of any matching ad", setup: func(c *cluster) {
			a, b := l2ad("a", "p"), l2ad("b", "p")
			a.Spec.NodeSelectors = []metav1.LabelSelector{sel("kubernetes.io/hostname", "n1"), sel("kubernetes.io/hostname", "n2")}
			b.Spec.NodeSelectors = []metav1.LabelSelector{sel("kubernetes.io/hostname", "n5")}
			c.res.L2Advertisements = []v1beta1.L2Advertisement{a, b}
		}, svc: svc("ns/a", addrs...), eps: ready("n3"), cands: plain("n1", "n2", "n5")},
		{name: "ads not covering the Service do not add nodes", setup: func(c *cluster) {
			a, b := l2ad("a", "p"), l2ad("b", "p")
			a.Spec.NodeSelectors = []metav1.LabelSelector{sel("kubernetes.io/hostname", "n1"), sel("kubernetes.io/hostname", "n2")}
			b.Spec.ServiceSelectors = []metav1.LabelSelector{sel("app", "other")}
			c.res.L2Advertisements = []v1beta1.L2Advertisement{a, b}
		}, svc: svc("ns/a", addrs...), eps: ready("n3"), cands: plain("n1", "n2")},
		{name: "Local: nodes with a serving endpoint", svc: local(svc("ns/a", addrs...)),
			eps:   []Endpoint{{NodeName: "n2", Ready: true}, {NodeName: "n4", Serving: true}, {NodeName: "n5"}},
			cands: plain("n2", "n4")},
		{name: "Local: endpoint on a dead node", setup: func(c *cluster) {
			c.live = map[string]bool{"n1": true, "n2": true, "n3": true, "n5": true}
		}, svc: local(svc("ns/a", addrs...)), eps: ready("n2", "n4"), cands: plain("n2")},
		{name: "preferences: sum of matching weights, across ads", setup: func(c *cluster) {
			c.nodeByName("n2").Labels["rack"] = "r1"
			c.nodeByName("n2").Labels["ssd"] = "yes"
			c.nodeByName("n3").Labels["rack"] = "r1"
			c.nodeByName("n4").Labels["ssd"] = "yes"
			a, b := l2ad("a", "p"), l2ad("b", "p")
			a.Spec.PreferredNodeSelectors = []v1beta1.PreferredNodeSelector{{Weight: 10, Preference: sel("rack", "r1")}}
			b.Spec.PreferredNodeSelectors = []v1beta1.PreferredNodeSelector{{Weight: 15, Preference: sel("ssd", "yes")}}
			c.res.L2Advertisements = []v1beta1.L2Advertisement{a, b}
		}, svc: svc("ns/a", addrs...), eps: ready("n1"), cands: []Candidate{
			{Node: "n1", Serves: 1}, {Node: "n2", Serves: 1, Preference: 25}, {Node: "n3", Serves: 1, Preference: 10},
			{Node: "n4", Serves: 1, Preference: 15}, {Node: "n5", Serves: 1}}},
		{name: "preferences of an ad count only on nodes it selects", setup: func(c *cluster) {
			c.nodeByName("n3").Labels["rack"] = "r1"
			c.nodeByName("n4").Labels["rack"] = "r1"
			a, b := l2ad("a", "p"), l2ad("b", "p")
			a.Spec.NodeSelectors = []metav1.LabelSelector{sel("kubernetes.io/hostname", "n3")}
			a.Spec.PreferredNodeSelectors = []v1beta1.PreferredNodeSelector{{Weight: 50, Preference: sel("rack", "r1")}}
			c.res.L2Advertisements = []v1beta1.L2Advertisement{a, b}
		}, svc: svc("ns/a", addrs...), eps: ready("n1"), cands: []Candidate{
			{Node: "n1", Serves: 1}, {Node: "n2", Serves: 1}, {Node: "n3", Serves: 1, Preference: 50},
			{Node: "n4", Serves: 1}, {Node: "n5", Serves: 1}}},
		{name: "preference on an ineligible node is ignored", setup: func(c *cluster) {
			c.nodeByName("n4").Labels["rack"] = "r1"
			c.nodeByName("n4").NetworkUnavailable = true
			a := l2ad("a", "p")
			a.Spec.PreferredNodeSelectors = []v1beta1.PreferredNodeSelector{{Weight: 100, Preference: sel("rack", "r1")}}
			c.res.L2Advertisements = []v1beta1.L2Advertisement{a}
		}, svc: svc("ns/a", addrs...), eps: ready("n1"), cands: plain("n1", "n2", "n3", "n5")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(5)
			c.res.L2Advertisements = []v1beta1.L2Advertisement{l2ad("l2", "p")}
			if tt.setup != nil {
				tt.setup(c)
			}
			got := l2Announcers(t, c, false, []SharedService{{Service: tt.svc, Endpoints: tt.eps}})
			winners := map[netip.Addr]string{}
			for _, a := range addrs {
				want := refRank(ip(a), tt.cands)[0]
				winners[ip(a)] = want
				if got := got[ip(a)]; len(got) != 1 || got[0] != want {
					t.Errorf("%s announced by %v, want exactly [%s] (candidates %v)", a, got, want, tt.cands)
				}
			}
			// Every candidate that loses reports the same winner.
			for _, n := range c.nodes {
				if !containsStr(candNames(tt.cands), n.Name) {
					continue
				}
				d := Decide(c.input(t, n.Name, tt.svc, tt.eps))
				for _, ipd := range d.IPs {
					if ipd.L2.Winner != winners[ipd.IP] {
						t.Errorf("node %s sees winner %q for %s, want %q", n.Name, ipd.L2.Winner, ipd.IP, winners[ipd.IP])
					}
				}
			}
		})
	}
}

func candNames(cs []Candidate) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Node)
	}
	return out
}

// TestPreferenceBeatsHash makes sure a preferred node wins for every IP,
// whatever the hash says, and that the hash decides among equals.
func TestPreferenceBeatsHash(t *testing.T) {
	for i := range 50 {
		addr := netip.AddrFrom4([4]byte{198, 51, 100, byte(i + 1)})
		got := Elect(addr, []Candidate{{Node: "a", Serves: 1}, {Node: "b", Serves: 1, Preference: 1}, {Node: "c", Serves: 1}})
		if got[0] != "b" {
			t.Fatalf("%s: winner %s, want the preferred node b", addr, got[0])
		}
		got = Elect(addr, []Candidate{{Node: "a", Serves: 2}, {Node: "b", Serves: 1, Preference: 100}})
		if got[0] != "a" {
			t.Fatalf("%s: winner %s, want a (serves more Services)", addr, got[0])
		}
	}
}

// TestElectMatchesMetalLBOrder compares Elect on plain candidates with the
// ordering MetalLB's speaker uses (sha256 of node + "#" + IP text), for
// IPv4 and IPv6.
func TestElectMatchesMetalLBOrder(t *testing.T) {
	nodes := []string{"worker-1", "worker-2", "worker-3", "control-plane", "edge-a", "edge-b"}
	for _, s := range []string{"198.51.100.1", "203.0.113.200", "2001:db8::1", "2001:db8:0:0:1::"} {
		a := ip(s)
		got := Elect(a, plain(nodes...))
		keys := map[string][32]byte{}
		for _, n := range nodes {
			keys[n] = sha256.Sum256([]byte(n + "#" + s))
		}
		want := slices.Clone(nodes)
		sort.Slice(want, func(i, j int) bool { ki, kj := keys[want[i]], keys[want[j]]; return bytes.Compare(ki[:], kj[:]) < 0 })
		if !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", s, got, want)
		}
	}
	if got := Elect(ip("198.51.100.1"), nil); len(got) != 0 {
		t.Errorf("no candidates: %v", got)
	}
}

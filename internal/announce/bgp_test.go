package announce

import (
	"net/netip"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/bgp"
)

func u32(v uint32) *uint32 { return &v }

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// bgpCluster is a 3-node cluster with pool "p", an iBGP peer "ibgp" and an
// eBGP peer "ebgp" (both on every node), and a Community alias.
func bgpCluster() *cluster {
	c := newCluster(3)
	c.res.Peers = []v1beta2.BGPPeer{
		peer("ebgp", 64500, 64501, "203.0.113.2"),
		peer("ibgp", 64500, 64500, "203.0.113.1"),
	}
	c.res.Communities = []v1beta1.Community{{ObjectMeta: meta("comms"), Spec: v1beta1.CommunitySpec{
		Communities: []v1beta1.CommunityAlias{{Name: "no-export", Value: "65535:65281"}}}}}
	c.res.BGPAdvertisements = []v1beta1.BGPAdvertisement{bgpad("bgp", "p")}
	return c
}

func TestBGPRules(t *testing.T) {
	v4, v6 := "198.51.100.77", "2001:db8:1::77"
	all := []string{"ebgp", "ibgp"}
	tests := []struct {
		name      string
		setup     func(c *cluster)
		svc       Service
		eps       []Endpoint
		want      Reason
		paths     []bgp.Path
		peers     []string
		wantOnIP1 *Reason // for dual-stack cases: reason of the second IP
	}{
		{name: "host route to every peer", svc: svc("ns/a", v4), eps: ready("n2"),
			paths: []bgp.Path{{Prefix: pfx("198.51.100.77/32")}}, peers: all},
		// The IPv4 sessions do not carry IPv6 (listed as recipients before).
		{name: "IPv6 host route, IPv4 peers only", svc: svc("ns/a", v6), eps: ready("n2"),
			paths: []bgp.Path{{Prefix: pfx("2001:db8:1::77/128")}}},
		// A dual-stack IPv4 session announces no IPv6 (the next hop would
		// be IPv4-mapped, unusable).
		{name: "IPv6 host route to an IPv6 peer, not a dual-stack IPv4 peer", setup: func(c *cluster) {
			c.res.Peers[0].Spec.DualStackAddressFamily = true
			c.res.Peers = append(c.res.Peers, peer("v6", 64500, 64502, "2001:db8::2"))
		}, svc: svc("ns/a", v6), eps: ready("n2"),
			paths: []bgp.Path{{Prefix: pfx("2001:db8:1::77/128")}}, peers: []string{"v6"}},
		{name: "IPv4 host route not to an IPv6 peer", setup: func(c *cluster) {
			c.res.Peers = append(c.res.Peers, peer("v6", 64500, 64502, "2001:db8::2"))
		}, svc: svc("ns/a", v4), eps: ready("n2"),
			paths: []bgp.Path{{Prefix: pfx("198.51.100.77/32")}}, peers: all},
		{name: "aggregationLength masks IPv4", setup: func(c *cluster) {
			c.res.BGPAdvertisements[0].Spec.AggregationLength = i32(24)
		}, svc: svc("ns/a", v4), eps: ready("n2"), paths: []bgp.Path{{Prefix: pfx("198.51.100.0/24")}}, peers: all},
		{name: "aggregationLengthV6 masks IPv6", setup: func(c *cluster) {
			c.res.BGPAdvertisements[0].Spec.AggregationLengthV6 = i32(64)
			c.res.BGPAdvertisements[0].Spec.AggregationLength = i32(28)
		}, svc: svc("ns/a", v6, v4), eps: ready("n2"), paths: []bgp.Path{{Prefix: pfx("2001:db8:1::/64")}, {Prefix: pfx("198.51.100.64/28")}}, peers: all},
		{name: "communities: standard, large and alias, sorted", setup: func(c *cluster) {
			c.res.BGPAdvertisements[0].Spec.Communities = []string{"large:64500:2:1", "no-export", "64500:300", "large:64500:1:9", "64500:20"}
		}, svc: svc("ns/a", v4), eps: ready("n2"), paths: []bgp.Path{{Prefix: pfx("198.51.100.77/32"),
			Communities:      []uint32{64500<<16 | 20, 64500<<16 | 300, 65535<<16 | 65281},
			LargeCommunities: [][3]uint32{{64500, 1, 9}, {64500, 2, 1}}}}, peers: all},
		{name: "localPref with an iBGP peer", setup: func(c *cluster) {
			c.res.BGPAdvertisements[0].Spec.LocalPref = 250
		}, svc: svc("ns/a", v4), eps: ready("n2"), paths: []bgp.Path{{Prefix: pfx("198.51.100.77/32"), LocalPref: u32(250)}}, peers: all},
		{name: "localPref dropped when only eBGP peers receive the path", setup: func(c *cluster) {
			c.res.BGPAdvertisements[0].Spec.LocalPref = 250
			c.res.BGPAdvertisements[0].Spec.Peers = []string{"ebgp"}
		}, svc: svc("ns/a", v4), eps: ready("n2"), paths: []bgp.Path{{Prefix: pfx("198.51.100.77/32"), Peers: []string{"ebgp"}}}, peers: []string{"ebgp"}},
		{name: "localPref dropped when this node has no iBGP session", setup: func(c *cluster) {
			c.res.BGPAdvertisements[0].Spec.LocalPref = 250
			c.res.Peers[1].Spec.NodeSelectors = []metav1.LabelSelector{sel("kubernetes.io/hostname", "n3")}
		}, svc: svc("ns/a", v4), eps: ready("n2"), paths: []bgp.Path{{Prefix: pfx("198.51.100.77/32")}}, peers: []string{"ebgp"}},
		{name: "peers restriction", setup: func(c *cluster) {
			c.res.BGPAdvertisements[0].Spec.Peers = []string{"ibgp"}
		}, svc: svc("ns/a", v4), eps: ready("n2"), paths: []bgp.Path{{Prefix: pfx("198.51.100.77/32"), Peers: []string{"ibgp"}}}, peers: []string{"ibgp"}},
		{name: "one path per matching advertisement", setup: func(c *cluster) {
			b := bgpad("bgp-2", "p")
			b.Spec.Communities = []string{"64500:2"}
			b.Spec.AggregationLength = i32(24)
			b.Spec.Peers = []string{"ebgp"}
			c.res.BGPAdvertisements = append(c.res.BGPAdvertisements, b)
		}, svc: svc("ns/a", v4), eps: ready("n2"), paths: []bgp.Path{
			{Prefix: pfx("198.51.100.77/32")},
			{Prefix: pfx("198.51.100.0/24"), Communities: []uint32{64500<<16 | 2}, Peers: []string{"ebgp"}},
		}, peers: all},
		{name: "pool selected by label", setup: func(c *cluster) {
			c.res.Pools[0].Labels = map[string]string{"tier": "gold"}
			c.res.BGPAdvertisements[0].Spec.IPAddressPools = nil
			c.res.BGPAdvertisements[0].Spec.IPAddressPoolSelectors = []metav1.LabelSelector{sel("tier", "gold")}
		}, svc: svc("ns/a", v4), eps: ready("n2"), paths: []bgp.Path{{Prefix: pfx("198.51.100.77/32")}}, peers: all},
		{name: "ad for another pool", setup: func(c *cluster) {
			c.res.Pools = append(c.res.Pools, pool("other", "203.0.113.128/25"))
			c.res.BGPAdvertisements[0].Spec.IPAddressPools = []string{"other"}
		}, svc: svc("ns/a", v4), eps: ready("n2"), want: ReasonNoMatchingAdvertisement},
		{name: "no BGPAdvertisement", setup: func(c *cluster) { c.res.BGPAdvertisements = nil },
			svc: svc("ns/a", v4), eps: ready("n2"), want: ReasonNoMatchingAdvertisement},
		{name: "serviceSelectors do not match", setup: func(c *cluster) {
			c.res.BGPAdvertisements[0].Spec.ServiceSelectors = []metav1.LabelSelector{sel("app", "web")}
		}, svc: svc("ns/a", v4), eps: ready("n2"), want: ReasonNoMatchingAdvertisement},
		{name: "serviceSelectors match", setup: func(c *cluster) {
			c.res.BGPAdvertisements[0].Spec.ServiceSelectors = []metav1.LabelSelector{sel("app", "web")}
		}, svc: withLabels(svc("ns/a", v4), "app", "web"), eps: ready("n2"), paths: []bgp.Path{{Prefix: pfx("198.51.100.77/32")}}, peers: all},
		{name: "allow-shared-ip with serviceSelectors is fine in BGP", setup: func(c *cluster) {
			c.res.BGPAdvertisements[0].Spec.ServiceSelectors = []metav1.LabelSelector{sel("app", "web")}
		}, svc: shared(withLabels(svc("ns/a", v4), "app", "web"), "k"), eps: ready("n2"), paths: []bgp.Path{{Prefix: pfx("198.51.100.77/32")}}, peers: all},
		{name: "nodeSelectors exclude this node", setup: func(c *cluster) {
			c.res.BGPAdvertisements[0].Spec.NodeSelectors = []metav1.LabelSelector{sel("kubernetes.io/hostname", "n2")}
		}, svc: svc("ns/a", v4), eps: ready("n2"), want: ReasonNoMatchingAdvertisement},
		{name: "nodeSelectors include this node", setup: func(c *cluster) {
			c.res.BGPAdvertisements[0].Spec.NodeSelectors = []metav1.LabelSelector{sel("kubernetes.io/hostname", "n1")}
		}, svc: svc("ns/a", v4), eps: ready("n2"), paths: []bgp.Path{{Prefix: pfx("198.51.100.77/32")}}, peers: all},
		{name: "NetworkUnavailable", setup: func(c *cluster) { c.nodes[0].NetworkUnavailable = true },
			svc: svc("ns/a", v4), eps: ready("n2"), want: ReasonNodeNetworkUnavailable},
		{name: "exclude label", setup: func(c *cluster) { c.nodes[0].Labels[ExcludeFromLBLabel] = "" },
			svc: svc("ns/a", v4), eps: ready("n2"), want: ReasonNodeLabeledExcludeBalancers},
		{name: "exclude label with IgnoreExcludeLB", setup: func(c *cluster) {
			c.nodes[0].Labels[ExcludeFromLBLabel] = ""
			c.opts.IgnoreExcludeLB = true
		}, svc: svc("ns/a", v4), eps: ready("n2"), paths: []bgp.Path{{Prefix: pfx("198.51.100.77/32")}}, peers: all},
		{name: "Cluster: no endpoints", svc: svc("ns/a", v4), want: ReasonNoEndpoints},
		{name: "Cluster: only unready endpoints", svc: svc("ns/a", v4), eps: []Endpoint{{NodeName: "n1"}, {NodeName: "n2"}}, want: ReasonNoEndpoints},
		{name: "Cluster: serving-but-not-ready endpoint elsewhere", svc: svc("ns/a", v4), eps: []Endpoint{{NodeName: "n3", Serving: true}},
			paths: []bgp.Path{{Prefix: pfx("198.51.100.77/32")}}, peers: all},
		{name: "Local: endpoint elsewhere only", svc: local(svc("ns/a", v4)), eps: ready("n2", "n3"), want: ReasonNoLocalEndpoints},
		{name: "Local: unready local endpoint", svc: local(svc("ns/a", v4)), eps: []Endpoint{{NodeName: "n1"}}, want: ReasonNoLocalEndpoints},
		{name: "Local: serving-but-not-ready local endpoint", svc: local(svc("ns/a", v4)), eps: []Endpoint{{NodeName: "n1", Serving: true}},
			paths: []bgp.Path{{Prefix: pfx("198.51.100.77/32")}}, peers: all},
		{name: "speaker liveness does not matter for BGP", setup: func(c *cluster) { c.live = map[string]bool{"n2": true} },
			svc: svc("ns/a", v4), eps: ready("n2"), paths: []bgp.Path{{Prefix: pfx("198.51.100.77/32")}}, peers: all},
		{name: "different localPref on advertisements with serviceSelectors", setup: func(c *cluster) {
			a, b := bgpad("a", "p"), bgpad("b", "p")
			a.Spec.ServiceSelectors = []metav1.LabelSelector{sel("app", "web")}
			a.Spec.LocalPref = 100
			b.Spec.ServiceSelectors = []metav1.LabelSelector{sel("tier", "front")}
			b.Spec.LocalPref = 200
			c.res.BGPAdvertisements = []v1beta1.BGPAdvertisement{a, b}
		}, svc: withLabels(svc("ns/a", v4), "app", "web", "tier", "front"), eps: ready("n2"), want: ReasonConflictingAdvertisements},
		{name: "different localPref to disjoint peers", setup: func(c *cluster) {
			a, b := bgpad("a", "p"), bgpad("b", "p")
			a.Spec.ServiceSelectors = []metav1.LabelSelector{sel("app", "web")}
			a.Spec.LocalPref = 100
			a.Spec.Peers = []string{"ibgp"}
			b.Spec.ServiceSelectors = []metav1.LabelSelector{sel("tier", "front")}
			b.Spec.LocalPref = 200
			b.Spec.Peers = []string{"ebgp"}
			c.res.BGPAdvertisements = []v1beta1.BGPAdvertisement{a, b}
		}, svc: withLabels(svc("ns/a", v4), "app", "web", "tier", "front"), eps: ready("n2"), paths: []bgp.Path{
			{Prefix: pfx("198.51.100.77/32"), LocalPref: u32(100), Peers: []string{"ibgp"}},
			{Prefix: pfx("198.51.100.77/32"), Peers: []string{"ebgp"}},
		}, peers: all},
		{name: "IP in no pool", svc: svc("ns/a", "203.0.113.9"), eps: ready("n2"), want: ReasonIPNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := bgpCluster()
			if tt.setup != nil {
				tt.setup(c)
			}
			d := Decide(c.input(t, "n1", tt.svc, tt.eps))
			if d.Reason != ReasonNone || len(d.IPs) != len(tt.svc.IPs) {
				t.Fatalf("decision %+v", d)
			}
			var paths []bgp.Path
			var peers []string
			for _, ipd := range d.IPs {
				b := ipd.BGP
				if b.Reason != tt.want || b.Announce != (tt.want == ReasonNone) {
					t.Fatalf("%s: BGP %+v, want reason %q", ipd.IP, b, tt.want)
				}
				if !b.Announce && b.Detail == "" {
					t.Errorf("no detail for %s", b.Reason)
				}
				if ipd.L2.Announce {
					t.Errorf("L2 announces without L2Advertisement")
				}
				paths = append(paths, b.Paths...)
				if peers == nil {
					peers = b.Peers
				}
			}
			if !reflect.DeepEqual(paths, tt.paths) {
				t.Errorf("paths\n got %+v\nwant %+v", paths, tt.paths)
			}
			if !reflect.DeepEqual(d.BGPPaths(), tt.paths) {
				t.Errorf("BGPPaths() = %+v", d.BGPPaths())
			}
			if !reflect.DeepEqual(peers, tt.peers) {
				t.Errorf("peers %v, want %v", peers, tt.peers)
			}
			for _, p := range paths {
				if err := p.Validate(); err != nil {
					t.Errorf("invalid path: %v", err)
				}
			}
			// A cluster-wide snapshot (no NodeName filtering) gives the
			// same decision (the detail text may name the rule differently).
			in := c.input(t, "n1", tt.svc, tt.eps)
			in.Config = c.snapshot(t, "")
			if wide := Decide(in); !reflect.DeepEqual(stripDetail(wide), stripDetail(d)) {
				t.Errorf("cluster-wide snapshot decides\n%+v\nnode snapshot\n%+v", wide, d)
			}
		})
	}
}

// TestBGPMergeAcrossServices feeds the paths of several Services to
// bgp.MergePaths: the same aggregated prefix from two Services and two
// advertisements becomes one path with the union of communities, and stays
// while any Service still announces it.
func TestBGPMergeAcrossServices(t *testing.T) {
	c := bgpCluster()
	a, b := bgpad("agg", "p"), bgpad("tag", "p")
	a.Spec.AggregationLength = i32(24)
	a.Spec.Communities = []string{"64500:1"}
	b.Spec.AggregationLength = i32(24)
	b.Spec.Communities = []string{"64500:2", "large:64500:0:7"}
	c.res.BGPAdvertisements = []v1beta1.BGPAdvertisement{a, b}
	s1, s2 := svc("ns/one", "198.51.100.1"), svc("ns/two", "198.51.100.200")
	d1 := Decide(c.input(t, "n1", s1, ready("n3")))
	d2 := Decide(c.input(t, "n1", s2, ready("n2")))
	merged, conflicts := bgp.MergePaths(append(d1.BGPPaths(), d2.BGPPaths()...))
	want := []bgp.Path{{Prefix: pfx("198.51.100.0/24"), Communities: []uint32{64500<<16 | 1, 64500<<16 | 2}, LargeCommunities: [][3]uint32{{64500, 0, 7}}}}
	if !reflect.DeepEqual(merged, want) || len(conflicts) != 0 {
		t.Fatalf("merged %+v conflicts %v, want %+v", merged, conflicts, want)
	}
	// s1 loses its endpoints: the prefix stays for s2.
	d1 = Decide(c.input(t, "n1", s1, nil))
	if d1.IPs[0].BGP.Reason != ReasonNoEndpoints {
		t.Fatalf("s1: %+v", d1.IPs[0].BGP)
	}
	merged, _ = bgp.MergePaths(append(d1.BGPPaths(), d2.BGPPaths()...))
	if !reflect.DeepEqual(merged, want) {
		t.Fatalf("after s1 withdrew: %+v", merged)
	}
	// s2 too: the prefix goes.
	d2 = Decide(c.input(t, "n1", s2, nil))
	if merged, _ = bgp.MergePaths(append(d1.BGPPaths(), d2.BGPPaths()...)); len(merged) != 0 {
		t.Fatalf("after both withdrew: %+v", merged)
	}
}

// TestBothModes: a pool selected by an L2 and a BGP advertisement is
// announced in both modes at once.
func TestBothModes(t *testing.T) {
	c := bgpCluster()
	c.nodes = c.nodes[:1]
	c.res.L2Advertisements = []v1beta1.L2Advertisement{l2ad("l2", "p")}
	d := Decide(c.input(t, "n1", svc("ns/a", "198.51.100.5"), ready("n1")))
	if ipd := d.IPs[0]; !ipd.L2.Announce || !ipd.BGP.Announce || ipd.Pool != "p" {
		t.Fatalf("%+v", ipd)
	}
}

func stripDetail(d Decision) Decision {
	d.IPs = append([]IPDecision(nil), d.IPs...)
	for i := range d.IPs {
		d.IPs[i].L2.Detail, d.IPs[i].BGP.Detail = "", ""
	}
	return d
}

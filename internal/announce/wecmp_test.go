package announce

import (
	"reflect"
	"testing"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/annotations"
	"github.com/herald-lb/herald/internal/bgp"
)

// weighted returns the cluster's advertisement annotated for weighted ECMP.
func weighted(ad v1beta1.BGPAdvertisement) v1beta1.BGPAdvertisement {
	ad.Annotations = map[string]string{annotations.WeightedECMP: "true"}
	return ad
}

// TestWeightedECMP: which weight the paths of a Service carry on node n1.
func TestWeightedECMP(t *testing.T) {
	v4, v6 := "198.51.100.77", "2001:db8:1::77"
	host := pfx("198.51.100.77/32")
	on := func(c *cluster) { c.res.BGPAdvertisements[0] = weighted(c.res.BGPAdvertisements[0]) }
	n1 := func(eps ...Endpoint) []Endpoint {
		for i := range eps {
			if eps[i].NodeName == "" {
				eps[i].NodeName = "n1"
			}
		}
		return eps
	}
	tests := []struct {
		name   string
		setup  func(c *cluster)
		svc    Service
		eps    []Endpoint
		paths  []bgp.Path
		weight uint32
	}{
		{name: "not annotated: no weight", svc: local(svc("ns/a", v4)),
			eps: ready("n1", "n1", "n1"), paths: []bgp.Path{{Prefix: host}}},
		{name: "annotated, Local: one per ready local endpoint", setup: on, svc: local(svc("ns/a", v4)),
			eps: ready("n1", "n1", "n1", "n2"), paths: []bgp.Path{{Prefix: host, Weight: 3, WeightSource: "ns/a"}}, weight: 3},
		{name: "annotated, Cluster: no weight (every node forwards to every endpoint)", setup: on, svc: svc("ns/a", v4),
			eps: ready("n1", "n1", "n2"), paths: []bgp.Path{{Prefix: host}}},
		{name: "unready local endpoints do not count", setup: on, svc: local(svc("ns/a", v4)),
			eps: n1(Endpoint{Ready: true}, Endpoint{}, Endpoint{Serving: true}), paths: []bgp.Path{{Prefix: host, Weight: 1, WeightSource: "ns/a"}}, weight: 1},
		{name: "only terminating serving endpoints: they count (kube-proxy falls back to them)", setup: on, svc: local(svc("ns/a", v4)),
			eps: n1(Endpoint{Serving: true}, Endpoint{Serving: true}), paths: []bgp.Path{{Prefix: host, Weight: 2, WeightSource: "ns/a"}}, weight: 2},
		{name: "a target listed twice counts once", setup: on, svc: local(svc("ns/a", v4)),
			eps:   n1(Endpoint{Ready: true, Family: 4, Target: uidTarget("1")}, Endpoint{Ready: true, Family: 4, Target: uidTarget("1")}, Endpoint{Ready: true, Family: 4, Target: uidTarget("2")}),
			paths: []bgp.Path{{Prefix: host, Weight: 2, WeightSource: "ns/a"}}, weight: 2},
		{name: "dual stack: each IP counts the endpoints of its family", setup: on, svc: local(svc("ns/a", v4, v6)),
			eps: n1(Endpoint{Ready: true, Family: 4, Target: uidTarget("1")}, Endpoint{Ready: true, Family: 6, Target: uidTarget("1")},
				Endpoint{Ready: true, Family: 4, Target: uidTarget("2")}, Endpoint{Ready: true, Family: 6, Target: uidTarget("2")},
				Endpoint{Ready: true, Family: 6, Target: uidTarget("3")}),
			paths: []bgp.Path{{Prefix: host, Weight: 2, WeightSource: "ns/a"}, {Prefix: pfx("2001:db8:1::77/128"), Weight: 3, WeightSource: "ns/a"}}, weight: 2},
		{name: "only the annotated one of two advertisements", setup: func(c *cluster) {
			b := weighted(bgpad("bgp-2", "p"))
			b.Spec.Peers = []string{"ebgp"}
			b.Spec.Communities = []string{"64500:2"}
			c.res.BGPAdvertisements = append(c.res.BGPAdvertisements, b)
		}, svc: local(svc("ns/a", v4)), eps: ready("n1", "n1"), paths: []bgp.Path{
			{Prefix: host},
			{Prefix: host, Communities: []uint32{64500<<16 | 2}, Peers: []string{"ebgp"}, Weight: 2, WeightSource: "ns/a"},
		}, weight: 2},
		{name: "capped at bgp.MaxWeight", setup: on, svc: local(svc("ns/a", v4)),
			eps: ready(repeat("n1", bgp.MaxWeight+5)...), paths: []bgp.Path{{Prefix: host, Weight: bgp.MaxWeight, WeightSource: "ns/a"}}, weight: bgp.MaxWeight},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := bgpCluster()
			if tt.setup != nil {
				tt.setup(c)
			}
			d := Decide(c.input(t, "n1", tt.svc, tt.eps))
			if !reflect.DeepEqual(d.BGPPaths(), tt.paths) {
				t.Errorf("paths\n got %+v\nwant %+v", d.BGPPaths(), tt.paths)
			}
			if got := d.IPs[0].BGP.Weight; got != tt.weight {
				t.Errorf("BGPDecision.Weight = %d, want %d", got, tt.weight)
			}
			for _, p := range d.BGPPaths() {
				if err := p.Validate(); err != nil {
					t.Errorf("invalid path: %v", err)
				}
			}
		})
	}
}

// TestWeightedECMPAcrossNodes: 1 endpoint on n1 and 3 on n2 give the
// weights 1 and 3; n3 without endpoints does not announce. After a merge
// with a second Service on the same aggregated prefix, the weights add up.
func TestWeightedECMPAcrossNodes(t *testing.T) {
	c := bgpCluster()
	c.res.BGPAdvertisements[0] = weighted(c.res.BGPAdvertisements[0])
	s := local(svc("ns/a", "198.51.100.77"))
	eps := ready("n1", "n2", "n2", "n2")
	for node, want := range map[string]uint32{"n1": 1, "n2": 3, "n3": 0} {
		d := Decide(c.input(t, node, s, eps))
		b := d.IPs[0].BGP
		if want == 0 {
			if b.Announce || b.Reason != ReasonNoLocalEndpoints {
				t.Errorf("%s: %+v, want noLocalEndpoints", node, b)
			}
			continue
		}
		if merged, _ := bgp.MergePaths(d.BGPPaths()); len(merged) != 1 || merged[0].Weight != want {
			t.Errorf("%s: merged %+v, want weight %d", node, merged, want)
		}
	}

	c.res.BGPAdvertisements[0].Spec.AggregationLength = i32(24)
	d1 := Decide(c.input(t, "n2", s, eps))
	d2 := Decide(c.input(t, "n2", local(svc("ns/b", "198.51.100.78")), ready("n2", "n2")))
	merged, _ := bgp.MergePaths(append(d1.BGPPaths(), d2.BGPPaths()...))
	if want := []bgp.Path{{Prefix: pfx("198.51.100.0/24"), Weight: 5}}; !reflect.DeepEqual(merged, want) {
		t.Errorf("aggregated: %+v, want %+v", merged, want)
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func TestLocalWeightWithoutFamilies(t *testing.T) {
	// Endpoints built without Family (FQDN slices, older callers) count for
	// every IP; so do those of the other family when the Service has none of
	// the IP's family.
	eps := []Endpoint{{NodeName: "n1", Ready: true}, {NodeName: "n1", Ready: true, Family: 4}}
	if got := LocalWeight(eps, "n1", ip("2001:db8::1")); got != 2 {
		t.Errorf("IPv6 without IPv6 endpoints: %d, want 2", got)
	}
	if got := LocalWeight(eps, "n1", ip("198.51.100.1")); got != 1 {
		t.Errorf("IPv4 with one IPv4 endpoint: %d, want 1", got)
	}
	if got := LocalWeight(eps, "n2", ip("198.51.100.1")); got != 0 {
		t.Errorf("other node: %d, want 0", got)
	}
}

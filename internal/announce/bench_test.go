package announce

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/api/v1beta1"
)

// BenchmarkDecide100Nodes decides one Service on a 100-node cluster with an
// L2 advertisement (two preferred selectors) and a BGP advertisement, for
// Cluster and Local traffic policy. Besides ns/op it reports ns/node (time
// per node per IP, the unit the election scales with); compare runs, not
// absolute values.
func BenchmarkDecide100Nodes(b *testing.B) {
	c := bgpCluster()
	c.nodes = nil
	var eps []Endpoint
	for i := range 100 {
		c.nodes = append(c.nodes, node(fmt.Sprintf("node-%03d", i), "rack", fmt.Sprint(i%4)))
		if i%10 == 0 {
			eps = append(eps, Endpoint{NodeName: fmt.Sprintf("node-%03d", i), Ready: true})
		}
	}
	ad := l2ad("l2", "p")
	ad.Spec.PreferredNodeSelectors = []v1beta1.PreferredNodeSelector{
		{Weight: 10, Preference: sel("rack", "1")}, {Weight: 5, Preference: sel("rack", "2")},
	}
	ad.Spec.NodeSelectors = []metav1.LabelSelector{{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "rack", Operator: metav1.LabelSelectorOpIn, Values: []string{"0", "1", "2"}}}}}
	c.res.L2Advertisements = []v1beta1.L2Advertisement{ad}
	for _, tc := range []struct {
		name string
		svc  Service
	}{
		{"Cluster", svc("ns/a", "198.51.100.9", "2001:db8:1::9")},
		{"Local", local(svc("ns/a", "198.51.100.9", "2001:db8:1::9"))},
	} {
		b.Run(tc.name, func(b *testing.B) {
			in := c.input(b, "node-010", tc.svc, eps)
			b.ReportAllocs()
			for b.Loop() {
				_ = Decide(in)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(c.nodes)*len(tc.svc.IPs)), "ns/node")
		})
	}
}

// BenchmarkElectBalanced elects 1,000 addresses on 100 equal nodes with the
// balanced election; ns/op is one election of the whole set (compare with
// BenchmarkElectPlain, the same addresses one Elect each).
func BenchmarkElectBalanced(b *testing.B) {
	bs := uniformBallots(1000, nodeNames("n", 100))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ElectBalanced(bs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkElectPlain is the plain election of the addresses of
// BenchmarkElectBalanced, one Elect per address.
func BenchmarkElectPlain(b *testing.B) {
	bs := uniformBallots(1000, nodeNames("n", 100))
	b.ReportAllocs()
	for b.Loop() {
		for _, bl := range bs {
			_ = Elect(bl.IP, bl.Candidates)
		}
	}
}

package announce_test

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/announce"
	"github.com/herald-lb/herald/internal/bgp"
	"github.com/herald-lb/herald/internal/config"
)

// Example shows the speaker glue: convert informer objects, build the
// snapshot for this node, decide, and hand the result to the announcers.
func Example() {
	ns := "herald-system"
	k8sNodes := []corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "worker-1"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "worker-2"}},
	}
	snap, err := config.Build(config.Resources{
		Pools: []v1beta1.IPAddressPool{{ObjectMeta: metav1.ObjectMeta{Name: "lan", Namespace: ns},
			Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"198.51.100.0/24"}}}},
		L2Advertisements:  []v1beta1.L2Advertisement{{ObjectMeta: metav1.ObjectMeta{Name: "l2", Namespace: ns}}},
		BGPAdvertisements: []v1beta1.BGPAdvertisement{{ObjectMeta: metav1.ObjectMeta{Name: "bgp", Namespace: ns}}},
		Nodes:             k8sNodes,
	}, config.Options{Namespace: ns, NodeName: "worker-1"})
	if err != nil {
		panic(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{
			Ingress: []corev1.LoadBalancerIngress{{IP: "198.51.100.10"}}}},
	}
	nodeName := "worker-1"
	slices := []discoveryv1.EndpointSlice{{Endpoints: []discoveryv1.Endpoint{{NodeName: &nodeName}}}}

	var nodes []announce.Node
	for i := range k8sNodes {
		nodes = append(nodes, announce.NodeFromK8s(&k8sNodes[i]))
	}
	d := announce.Decide(announce.Input{
		Config:    snap,
		Node:      "worker-1",
		Nodes:     nodes,
		Live:      map[string]bool{"worker-1": true, "worker-2": true},
		Service:   announce.ServiceFromK8s(svc),
		Endpoints: announce.EndpointsFromSlices(slices),
	})
	for _, ipd := range d.IPs {
		fmt.Printf("%s L2: announce=%v reason=%q winner=%s\n", ipd.IP, ipd.L2.Announce, ipd.L2.Reason, ipd.L2.Winner)
	}
	// The paths of every Service go through bgp.MergePaths before
	// bgp.Speaker.SetPaths.
	merged, _ := bgp.MergePaths(d.BGPPaths())
	for _, p := range merged {
		fmt.Println("BGP:", p.Prefix)
	}
	// Output:
	// 198.51.100.10 L2: announce=true reason="" winner=worker-1
	// BGP: 198.51.100.10/32
}

package explain

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
)

const hns = "herald-system"

func hmeta(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: hns} }

// lab returns a cluster with nodes n1..n3 (speaker Pods Running and Ready),
// pool "p" (198.51.100.0/29) advertised by L2Advertisement "l2", and no
// Service.
func lab() *Cluster {
	c := &Cluster{Namespace: hns}
	for _, n := range []string{"n1", "n2", "n3"} {
		c.Resources.Nodes = append(c.Resources.Nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n,
			Labels: map[string]string{"kubernetes.io/hostname": n}}})
		c.SpeakerPods = append(c.SpeakerPods, speakerPod(n, true))
	}
	c.Resources.Pools = []v1beta1.IPAddressPool{{ObjectMeta: hmeta("p"), Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"198.51.100.0/29"}}}}
	c.Resources.L2Advertisements = []v1beta1.L2Advertisement{{ObjectMeta: hmeta("l2"), Spec: v1beta1.L2AdvertisementSpec{IPAddressPools: []string{"p"}}}}
	c.Namespaces = []corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "demo", Labels: map[string]string{"team": "blue"}}}}
	return c
}

func speakerPod(node string, ready bool) corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return corev1.Pod{ObjectMeta: hmeta("speaker-" + node), Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}}}
}

// service adds a LoadBalancer Service demo/name with the given ingress IPs
// and one ready endpoint per node in eps.
func (c *Cluster) service(name string, ips []string, eps ...string) *corev1.Service {
	s := corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo", Annotations: map[string]string{}, Labels: map[string]string{}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.0.0.1", ClusterIPs: []string{"10.0.0.1"},
			Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}, Selector: map[string]string{"app": name}}}
	for _, ip := range ips {
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	c.Services = append(c.Services, s)
	if len(eps) > 0 {
		sl := discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-x", Namespace: "demo",
			Labels: map[string]string{discoveryv1.LabelServiceName: name}}, AddressType: discoveryv1.AddressTypeIPv4}
		for _, n := range eps {
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.1.0.1"}, NodeName: ptr.To(n),
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
		}
		c.EndpointSlices = append(c.EndpointSlices, sl)
	}
	return &c.Services[len(c.Services)-1]
}

func (c *Cluster) node(name string) *corev1.Node {
	for i := range c.Resources.Nodes {
		if c.Resources.Nodes[i].Name == name {
			return &c.Resources.Nodes[i]
		}
	}
	return nil
}

func (c *Cluster) l2Status(svc, node string) {
	c.L2Statuses = append(c.L2Statuses, v1beta1.ServiceL2Status{ObjectMeta: hmeta("l2-" + svc + "-" + node),
		Status: v1beta1.ServiceL2StatusStatus{ServiceStatusCommon: v1beta1.ServiceStatusCommon{Node: node, ServiceName: svc, ServiceNamespace: "demo"}}})
}

func (c *Cluster) withBGP() {
	c.Resources.Peers = []v1beta2.BGPPeer{{ObjectMeta: hmeta("tor"), Spec: v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64512, PeerAddress: "203.0.113.1"}}}
	c.Resources.BGPAdvertisements = []v1beta1.BGPAdvertisement{{ObjectMeta: hmeta("bgp"), Spec: v1beta1.BGPAdvertisementSpec{
		IPAddressPools: []string{"p"}, LocalPref: 200, Communities: []string{"64512:100"}, AggregationLength: ptr.To(int32(32))}}}
}

func mustWhy(t *testing.T, c *Cluster, name string) *WhyReport {
	t.Helper()
	r, err := Why(c, "demo", name)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func hasProblem(r []string, sub string) bool {
	for _, p := range r {
		if strings.Contains(p, sub) {
			return true
		}
	}
	return false
}

func verdict(t *testing.T, m *ModeReport, node string) NodeVerdict {
	t.Helper()
	if m == nil {
		t.Fatal("mode not reported")
	}
	for _, n := range m.Nodes {
		if n.Node == node {
			return n
		}
	}
	t.Fatalf("node %s not in the report", node)
	return NodeVerdict{}
}

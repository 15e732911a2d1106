package announce

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/config"
)

const testNS = "herald-system"

// cluster is a test cluster: the configuration objects, the nodes and the
// node names whose speakers are live (nil: all).
type cluster struct {
	res   config.Resources
	nodes []Node
	live  map[string]bool
	opts  Options
	// ifaces is Input.Interfaces (nil: unknown).
	ifaces *NodeInterfaces
}

func meta(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: testNS} }

func pool(name string, addrs ...string) v1beta1.IPAddressPool {
	return v1beta1.IPAddressPool{ObjectMeta: meta(name), Spec: v1beta1.IPAddressPoolSpec{Addresses: addrs}}
}

func l2ad(name string, pools ...string) v1beta1.L2Advertisement {
	return v1beta1.L2Advertisement{ObjectMeta: meta(name), Spec: v1beta1.L2AdvertisementSpec{IPAddressPools: pools}}
}

func bgpad(name string, pools ...string) v1beta1.BGPAdvertisement {
	return v1beta1.BGPAdvertisement{ObjectMeta: meta(name), Spec: v1beta1.BGPAdvertisementSpec{IPAddressPools: pools}}
}

func peer(name string, my, remote uint32, addr string) v1beta2.BGPPeer {
	return v1beta2.BGPPeer{ObjectMeta: meta(name), Spec: v1beta2.BGPPeerSpec{MyASN: my, PeerASN: remote, PeerAddress: addr}}
}

func sel(kv ...string) metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return metav1.LabelSelector{MatchLabels: m}
}

func i32(v int32) *int32 { return &v }

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

// node returns a node with labels kv plus kubernetes.io/hostname.
func node(name string, kv ...string) Node {
	l := labels.Set{"kubernetes.io/hostname": name}
	for i := 0; i+1 < len(kv); i += 2 {
		l[kv[i]] = kv[i+1]
	}
	return Node{Name: name, Labels: l}
}

// newCluster returns nodes n1..nN with one pool "p" (198.51.100.0/24 and
// 2001:db8:1::/64) and no advertisement.
func newCluster(n int) *cluster {
	c := &cluster{}
	for i := 1; i <= n; i++ {
		c.nodes = append(c.nodes, node("n"+itoa(i)))
	}
	c.res.Pools = []v1beta1.IPAddressPool{pool("p", "198.51.100.0/24", "2001:db8:1::/64")}
	return c
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

func (c *cluster) nodeByName(name string) *Node {
	for i := range c.nodes {
		if c.nodes[i].Name == name {
			return &c.nodes[i]
		}
	}
	return nil
}

// snapshot builds the configuration as the speaker on self sees it.
func (c *cluster) snapshot(t testing.TB, self string) *config.Snapshot {
	t.Helper()
	res := c.res
	res.Nodes = nil
	for _, n := range c.nodes {
		res.Nodes = append(res.Nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels}})
	}
	s, err := config.Build(res, config.Options{Namespace: testNS, NodeName: self})
	if err != nil {
		t.Fatalf("config.Build: %v", err)
	}
	return s
}

// input assembles the decision input for the speaker on self.
func (c *cluster) input(t testing.TB, self string, svc Service, eps []Endpoint) Input {
	return Input{
		Config:     c.snapshot(t, self),
		Node:       self,
		Nodes:      c.nodes,
		Live:       c.live,
		Service:    svc,
		Endpoints:  eps,
		Options:    c.opts,
		Interfaces: c.ifaces,
	}
}

func svc(key string, ips ...string) Service {
	s := Service{Key: key, LoadBalancer: true, ExternalTrafficPolicy: TrafficPolicyCluster, Labels: labels.Set{}}
	for _, a := range ips {
		s.IPs = append(s.IPs, ip(a))
	}
	return s
}

func local(s Service) Service { s.ExternalTrafficPolicy = TrafficPolicyLocal; return s }

func withLabels(s Service, kv ...string) Service {
	set := labels.Set{}
	for i := 0; i+1 < len(kv); i += 2 {
		set[kv[i]] = kv[i+1]
	}
	s.Labels = set
	return s
}

func shared(s Service, key string) Service { s.SharingKey = key; return s }

// ready returns one ready endpoint per node name.
func ready(nodes ...string) []Endpoint {
	var out []Endpoint
	for _, n := range nodes {
		out = append(out, Endpoint{NodeName: n, Ready: true})
	}
	return out
}

// l2Announcers runs Decide on every node and returns, per IP, the nodes
// announcing it in layer 2 for any of the given Services. Each Service's
// Sharing list is the other Services holding one of its IPs when
// withSharing is set.
func l2Announcers(t testing.TB, c *cluster, withSharing bool, svcs []SharedService) map[netip.Addr][]string {
	t.Helper()
	out := map[netip.Addr][]string{}
	for _, n := range c.nodes {
		snap := c.snapshot(t, n.Name)
		for i, s := range svcs {
			in := Input{Config: snap, Node: n.Name, Nodes: c.nodes, Live: c.live, Service: s.Service, Endpoints: s.Endpoints, Options: c.opts}
			if withSharing {
				for j, o := range svcs {
					if j != i {
						in.Sharing = append(in.Sharing, o)
					}
				}
			}
			d := Decide(in)
			for _, ipd := range d.IPs {
				if ipd.L2.Announce {
					if ipd.L2.Winner != n.Name {
						t.Errorf("%s on %s: announces %s but winner is %q", s.Service.Key, n.Name, ipd.IP, ipd.L2.Winner)
					}
					if !containsStr(out[ipd.IP], n.Name) {
						out[ipd.IP] = append(out[ipd.IP], n.Name)
					}
				}
			}
		}
	}
	return out
}

func containsStr(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

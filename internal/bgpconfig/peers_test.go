package bgpconfig

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/bgp"
	"github.com/herald-lb/herald/internal/config"
)

const ns = "herald-system"

func peerObj(name string, mut func(*v1beta2.BGPPeerSpec)) v1beta2.BGPPeer {
	p := v1beta2.BGPPeer{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64513, PeerAddress: "198.51.100.1"},
	}
	if mut != nil {
		mut(&p.Spec)
	}
	return p
}

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func build(t *testing.T, peers []v1beta2.BGPPeer, secrets ...corev1.Secret) *config.Snapshot {
	t.Helper()
	nodes := []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"rack": "a"}}}}
	snap, err := config.Build(config.Resources{Peers: peers, Nodes: nodes, Secrets: secrets},
		config.Options{Namespace: ns, NodeName: "n1"})
	if err != nil {
		t.Fatalf("config.Build: %v", err)
	}
	return snap
}

// base is the translation of peerObj("p", nil) with node IP 198.51.100.10.
func base() bgp.PeerConfig {
	return bgp.PeerConfig{
		Name: "p", Address: netip.MustParseAddr("198.51.100.1"), Port: 179, MyASN: 64512, PeerASN: 64513,
		RouterID: netip.MustParseAddr("198.51.100.10"),
		HoldTime: config.DefaultHoldTime, KeepaliveTime: config.DefaultKeepaliveTime,
		ConnectTime: DefaultConnectTime,
	}
}

func TestPeers(t *testing.T) {
	nodeIP := netip.MustParseAddr("198.51.100.10")
	secret := corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "pw", Namespace: ns},
		Type:       corev1.SecretTypeBasicAuth,
		Data:       map[string][]byte{"password": []byte("from-secret")},
	}
	tests := []struct {
		name   string
		spec   func(*v1beta2.BGPPeerSpec)
		nodeIP netip.Addr
		want   func(*bgp.PeerConfig)
	}{
		{name: "defaults", nodeIP: nodeIP, want: func(*bgp.PeerConfig) {}},
		{name: "hold time only derives keepalive", nodeIP: nodeIP,
			spec: func(s *v1beta2.BGPPeerSpec) { s.HoldTime = dur(9 * time.Second) },
			want: func(p *bgp.PeerConfig) { p.HoldTime, p.KeepaliveTime = 9*time.Second, 3*time.Second }},
		{name: "both timers and connect time", nodeIP: nodeIP,
			spec: func(s *v1beta2.BGPPeerSpec) {
				s.HoldTime, s.KeepaliveTime, s.ConnectTime = dur(30*time.Second), dur(5*time.Second), dur(7*time.Second)
			},
			want: func(p *bgp.PeerConfig) {
				p.HoldTime, p.KeepaliveTime, p.ConnectTime = 30*time.Second, 5*time.Second, 7*time.Second
			}},
		{name: "inline password", nodeIP: nodeIP,
			spec: func(s *v1beta2.BGPPeerSpec) { s.Password = "inline" },
			want: func(p *bgp.PeerConfig) { p.Password = "inline" }},
		{name: "password from secret", nodeIP: nodeIP,
			spec: func(s *v1beta2.BGPPeerSpec) {
				s.PasswordSecret = &corev1.SecretReference{Name: "pw", Namespace: ns}
			},
			want: func(p *bgp.PeerConfig) { p.Password = "from-secret" }},
		{name: "graceful restart", nodeIP: nodeIP,
			spec: func(s *v1beta2.BGPPeerSpec) { s.EnableGracefulRestart = true },
			want: func(p *bgp.PeerConfig) { p.GracefulRestart = true }},
		{name: "ebgp multihop sets TTL 255", nodeIP: nodeIP,
			spec: func(s *v1beta2.BGPPeerSpec) { s.EBGPMultiHop = true },
			want: func(p *bgp.PeerConfig) { p.EBGPMultiHop = MultiHopTTL }},
		{name: "ibgp keeps TTL default", nodeIP: nodeIP,
			spec: func(s *v1beta2.BGPPeerSpec) { s.PeerASN = 64512 },
			want: func(p *bgp.PeerConfig) { p.PeerASN = 64512 }},
		{name: "explicit router ID wins over node IP", nodeIP: nodeIP,
			spec: func(s *v1beta2.BGPPeerSpec) { s.RouterID = "203.0.113.7" },
			want: func(p *bgp.PeerConfig) { p.RouterID = netip.MustParseAddr("203.0.113.7") }},
		{name: "no node IPv4 leaves router ID unset", nodeIP: netip.MustParseAddr("2001:db8::10"),
			want: func(p *bgp.PeerConfig) { p.RouterID = netip.Addr{} }},
		{name: "IPv4-mapped node IP is unmapped", nodeIP: netip.MustParseAddr("::ffff:198.51.100.10"),
			want: func(*bgp.PeerConfig) {}},
		{name: "dual stack, vrf, source, port, local ASN", nodeIP: nodeIP,
			spec: func(s *v1beta2.BGPPeerSpec) {
				s.DualStackAddressFamily, s.VRF, s.SourceAddress, s.PeerPort, s.LocalASN = true, "red", "198.51.100.10", 1179, 64600
			},
			want: func(p *bgp.PeerConfig) {
				p.DualStack, p.VRF, p.SourceAddress, p.Port, p.LocalASN = true, "red", netip.MustParseAddr("198.51.100.10"), 1179, 64600
			}},
		{name: "unnumbered interface peer", nodeIP: nodeIP,
			spec: func(s *v1beta2.BGPPeerSpec) { s.PeerAddress, s.Interface = "", "eth1" },
			want: func(p *bgp.PeerConfig) { p.Address, p.Interface = netip.Addr{}, "eth1" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := build(t, []v1beta2.BGPPeer{peerObj("p", tc.spec)}, secret)
			got, err := Peers(snap, "", labels.Set{"rack": "a"}, tc.nodeIP)
			if err != nil {
				t.Fatalf("Peers: %v", err)
			}
			want := base()
			tc.want(&want)
			if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
				t.Fatalf("Peers:\n got %+v\nwant %+v", got, want)
			}
			if err := bgp.ValidatePeers(got); err != nil {
				t.Fatalf("translated peer does not validate: %v", err)
			}
		})
	}
}

func TestPeersNodeSelectorAndDynamicASN(t *testing.T) {
	peers := []v1beta2.BGPPeer{
		peerObj("a-dynamic", func(s *v1beta2.BGPPeerSpec) {
			s.PeerASN, s.DynamicASN, s.PeerAddress = 0, v1beta2.DynamicASNMode("external"), "198.51.100.2"
		}),
		peerObj("b-rack-a", func(s *v1beta2.BGPPeerSpec) {
			s.NodeSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"rack": "a"}}}
			s.PeerAddress = "198.51.100.3"
		}),
		peerObj("c-all", func(s *v1beta2.BGPPeerSpec) { s.PeerAddress = "198.51.100.4" }),
	}
	snap := build(t, peers)
	got, err := Peers(snap, "", labels.Set{"rack": "a"}, netip.MustParseAddr("198.51.100.10"))
	if !errors.Is(err, ErrDynamicASN) {
		t.Fatalf("err = %v, want ErrDynamicASN", err)
	}
	var names []string
	for _, p := range got {
		names = append(names, p.Name)
	}
	if want := []string{"b-rack-a", "c-all"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("peers = %v, want %v", names, want)
	}
	// Node labels that the selector does not match drop the rack peer.
	got, _ = Peers(snap, "", labels.Set{"rack": "b"}, netip.Addr{})
	if len(got) != 1 || got[0].Name != "c-all" {
		t.Fatalf("peers for rack b = %+v, want only c-all", got)
	}
	if got, err := Peers(nil, "", nil, netip.Addr{}); got != nil || err != nil {
		t.Fatalf("Peers(nil) = %v, %v", got, err)
	}
}

func TestRouterID(t *testing.T) {
	snapWith := func(routerID string) *config.Snapshot {
		p := v1beta2.BGPPeer{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "herald-system"},
			Spec:       v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64500, PeerAddress: "2001:db8::1", RouterID: routerID},
		}
		snap, err := config.Build(config.Resources{Peers: []v1beta2.BGPPeer{p}}, config.Options{Namespace: "herald-system"})
		if err != nil {
			t.Fatal(err)
		}
		return snap
	}
	fromName := NameRouterID("node-v6")
	cases := []struct {
		name     string
		snap     *config.Snapshot
		nodeName string
		nodeIPv4 netip.Addr
		want     netip.Addr
	}{
		{"peer's routerID wins", snapWith("203.0.113.9"), "node-v6", netip.MustParseAddr("198.51.100.10"), netip.MustParseAddr("203.0.113.9")},
		{"node IPv4", snapWith(""), "node-v6", netip.MustParseAddr("198.51.100.10"), netip.MustParseAddr("198.51.100.10")},
		{"IPv4-mapped node address", snapWith(""), "node-v6", netip.MustParseAddr("::ffff:198.51.100.10"), netip.MustParseAddr("198.51.100.10")},
		{"IPv6-only node: from its name", snapWith(""), "node-v6", netip.Addr{}, fromName},
		{"IPv6 given as the IPv4 address is ignored", snapWith(""), "node-v6", netip.MustParseAddr("2001:db8::5"), fromName},
		{"nothing known", snapWith(""), "", netip.Addr{}, netip.Addr{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := RouterID(tc.snap, tc.nodeName, labels.Set{}, tc.nodeIPv4); got != tc.want {
				t.Errorf("RouterID = %v, want %v", got, tc.want)
			}
		})
	}
	// The derivation: IPv4, non-zero, stable, and different per name.
	a, b := NameRouterID("node-a"), NameRouterID("node-b")
	if !a.Is4() || a == netip.IPv4Unspecified() || a != NameRouterID("node-a") || a == b {
		t.Errorf("NameRouterID: node-a %v, node-b %v", a, b)
	}
	// Known answer: CRC-32/IEEE("node-a") = 0x7899_4dab (Python zlib.crc32).
	if want := netip.MustParseAddr("120.153.77.171"); a != want {
		t.Errorf("NameRouterID(node-a) = %v, want %v", a, want)
	}
}

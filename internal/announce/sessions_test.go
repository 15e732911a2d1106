package announce

import (
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

func sessionPeer(name string, mut func(*v1beta2.BGPPeerSpec)) v1beta2.BGPPeer {
	p := v1beta2.BGPPeer{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS},
		Spec:       v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64513, PeerAddress: "198.51.100.1"},
	}
	if mut != nil {
		mut(&p.Spec)
	}
	return p
}

func sessionDur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func buildSessions(t *testing.T, peers []v1beta2.BGPPeer, secrets ...corev1.Secret) *config.Snapshot {
	t.Helper()
	nodes := []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"rack": "a"}}}}
	snap, err := config.Build(config.Resources{Peers: peers, Nodes: nodes, Secrets: secrets},
		config.Options{Namespace: testNS, NodeName: "n1"})
	if err != nil {
		t.Fatalf("config.Build: %v", err)
	}
	return snap
}

// baseSession is the translation of sessionPeer("p", nil) with node IP 198.51.100.10.
func baseSession() bgp.PeerConfig {
	return bgp.PeerConfig{
		Name: "p", Address: netip.MustParseAddr("198.51.100.1"), Port: 179, MyASN: 64512, PeerASN: 64513,
		RouterID: netip.MustParseAddr("198.51.100.10"),
		HoldTime: config.DefaultHoldTime, KeepaliveTime: config.DefaultKeepaliveTime,
		ConnectTime: DefaultConnectTime,
	}
}

func TestSessions(t *testing.T) {
	nodeIP := netip.MustParseAddr("198.51.100.10")
	secret := corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "pw", Namespace: testNS},
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
			spec: func(s *v1beta2.BGPPeerSpec) { s.HoldTime = sessionDur(9 * time.Second) },
			want: func(p *bgp.PeerConfig) { p.HoldTime, p.KeepaliveTime = 9*time.Second, 3*time.Second }},
		{name: "both timers and connect time", nodeIP: nodeIP,
			spec: func(s *v1beta2.BGPPeerSpec) {
				s.HoldTime, s.KeepaliveTime, s.ConnectTime = sessionDur(30*time.Second), sessionDur(5*time.Second), sessionDur(7*time.Second)
			},
			want: func(p *bgp.PeerConfig) {
				p.HoldTime, p.KeepaliveTime, p.ConnectTime = 30*time.Second, 5*time.Second, 7*time.Second
			}},
		{name: "inline password", nodeIP: nodeIP,
			spec: func(s *v1beta2.BGPPeerSpec) { s.Password = "inline" },
			want: func(p *bgp.PeerConfig) { p.Password = "inline" }},
		{name: "password from secret", nodeIP: nodeIP,
			spec: func(s *v1beta2.BGPPeerSpec) {
				s.PasswordSecret = &corev1.SecretReference{Name: "pw", Namespace: testNS}
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
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := buildSessions(t, []v1beta2.BGPPeer{sessionPeer("p", tc.spec)}, secret)
			got := Sessions(snap, "", labels.Set{"rack": "a"}, tc.nodeIP)
			want := baseSession()
			tc.want(&want)
			if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
				t.Fatalf("Sessions:\n got %+v\nwant %+v", got, want)
			}
			if err := bgp.ValidatePeers(got); err != nil {
				t.Fatalf("translated peer does not validate: %v", err)
			}
		})
	}
}

func TestSessionsNodeSelector(t *testing.T) {
	peers := []v1beta2.BGPPeer{
		sessionPeer("b-rack-a", func(s *v1beta2.BGPPeerSpec) {
			s.NodeSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"rack": "a"}}}
			s.PeerAddress = "198.51.100.3"
		}),
		sessionPeer("c-all", func(s *v1beta2.BGPPeerSpec) { s.PeerAddress = "198.51.100.4" }),
	}
	// The snapshot of the whole cluster (no NodeName): Sessions filters.
	snap, err := config.Build(config.Resources{Peers: peers}, config.Options{Namespace: testNS})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range Sessions(snap, "", labels.Set{"rack": "a"}, netip.MustParseAddr("198.51.100.10")) {
		names = append(names, p.Name)
	}
	if want := []string{"b-rack-a", "c-all"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("sessions = %v, want %v", names, want)
	}
	// Node labels that the selector does not match drop the rack peer.
	if got := Sessions(snap, "n2", labels.Set{"rack": "b"}, netip.Addr{}); len(got) != 1 || got[0].Name != "c-all" {
		t.Fatalf("sessions for rack b = %+v, want only c-all", got)
	}
	if got := Sessions(nil, "", nil, netip.Addr{}); got != nil {
		t.Fatalf("Sessions(nil) = %v", got)
	}
}

func TestRouterID(t *testing.T) {
	snapWith := func(routerID string) *config.Snapshot {
		p := v1beta2.BGPPeer{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: testNS},
			Spec:       v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64500, PeerAddress: "2001:db8::1", RouterID: routerID},
		}
		snap, err := config.Build(config.Resources{Peers: []v1beta2.BGPPeer{p}}, config.Options{Namespace: testNS})
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

// FuzzSessionsOpenable is the one-place rule for what the BGP backend
// supports: whatever two BGPPeers look like, when config.Build (the
// webhook's and every speaker's validation) admits them, the sessions a node
// gets from Sessions pass bgp.ValidatePeers, the check the gobgp speaker
// applies before opening anything (and which fails the whole node's set).
// The seeds include the peers Build once admitted and the backend refused:
// dynamicASN, a zoned peerAddress, a holdTime above 65535 s.
//
//	go test -run '^$' -fuzz FuzzSessionsOpenable -fuzztime 60s ./internal/announce
func FuzzSessionsOpenable(f *testing.F) {
	f.Add("198.51.100.1", "198.51.100.2", uint32(64513), uint32(0), "", "", "", int64(0), int64(0), int64(0), false, "")
	f.Add("198.51.100.1", "198.51.100.2", uint32(0), uint32(0), "external", "", "", int64(0), int64(0), int64(0), false, "")
	f.Add("198.51.100.1", "198.51.100.2", uint32(0), uint32(0), "internal", "", "", int64(0), int64(0), int64(0), true, "")
	f.Add("fe80::1%eth0", "2001:db8::2", uint32(64513), uint32(0), "", "", "", int64(0), int64(0), int64(0), false, "")
	f.Add("198.51.100.1", "198.51.100.2", uint32(64513), uint32(0), "", "", "", int64(70000e9), int64(0), int64(0), false, "")
	f.Add("198.51.100.1", "198.51.100.2", uint32(64513), uint32(0), "", "", "", int64(0), int64(30000e9), int64(0), false, "")
	f.Add("2001:db8::1", "2001:db8::1", uint32(64512), uint32(64600), "", "eth1", "2001:db8::10", int64(3e9), int64(1e9), int64(5e9), true, "red")
	f.Add("198.51.100.1", "198.51.100.1", uint32(64512), uint32(0), "", "", "198.51.100.10", int64(2500e6), int64(0), int64(1500e6), true, "")
	f.Fuzz(func(t *testing.T, addr, addr2 string, peerASN, localASN uint32, dynamicASN, iface, src string,
		hold, keep, connect int64, multiHop bool, vrf string) {
		a := sessionPeer("a", func(s *v1beta2.BGPPeerSpec) {
			s.PeerAddress, s.PeerASN, s.LocalASN, s.DynamicASN = addr, peerASN, localASN, v1beta2.DynamicASNMode(dynamicASN)
			s.SourceAddress, s.EBGPMultiHop, s.VRF = src, multiHop, vrf
			if hold != 0 {
				s.HoldTime = sessionDur(time.Duration(hold))
			}
			if keep != 0 {
				s.KeepaliveTime = sessionDur(time.Duration(keep))
			}
			if connect != 0 {
				s.ConnectTime = sessionDur(time.Duration(connect))
			}
		})
		b := sessionPeer("b", func(s *v1beta2.BGPPeerSpec) {
			s.PeerAddress, s.VRF = addr2, vrf
			if iface != "" {
				s.PeerAddress, s.Interface = "", iface
			}
		})
		nodes := []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}
		snap, err := config.Build(config.Resources{Peers: []v1beta2.BGPPeer{a, b}, Nodes: nodes},
			config.Options{Namespace: testNS, NodeName: "n1"})
		if err != nil {
			return // refused at admission: no speaker is asked to open it
		}
		sessions := Sessions(snap, "n1", labels.Set{}, netip.MustParseAddr("198.51.100.10"))
		if len(sessions) != 2 {
			t.Fatalf("%d sessions for 2 admitted peers", len(sessions))
		}
		if err := bgp.ValidatePeers(sessions); err != nil {
			t.Fatalf("config.Build admitted peers the backend refuses: %v\n%+v", err, sessions)
		}
	})
}

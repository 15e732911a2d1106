package config

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/herald-lb/herald/api/v1beta1"
)

func mustBuild(t *testing.T, r Resources, opts Options) *Snapshot {
	t.Helper()
	if opts.Namespace == "" {
		opts.Namespace = ns
	}
	s, err := Build(r, opts)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	if err := checkInvariants(s); err != nil {
		t.Fatalf("invariants: %v", err)
	}
	return s
}

func TestPoolFor(t *testing.T) {
	r := base()
	buggy := pool("pool-c", "203.0.113.128/25")
	buggy.Spec.AvoidBuggyIPs = true
	r.Pools = append(r.Pools, buggy)
	s := mustBuild(t, r, Options{})
	for ip, want := range map[string]string{
		"198.51.100.0":        "pool-a",
		"198.51.100.255":      "pool-a",
		"203.0.113.9":         "",
		"203.0.113.10":        "pool-b",
		"203.0.113.20":        "pool-b",
		"203.0.113.21":        "",
		"203.0.113.127":       "",
		"203.0.113.128":       "pool-c", // only .0 and .255 are avoided
		"203.0.113.129":       "pool-c",
		"203.0.113.255":       "", // avoidBuggyIPs
		"2001:db8::ff":        "pool-b",
		"2001:db8::100":       "",
		"::ffff:203.0.113.15": "pool-b",
		"0.0.0.0":             "",
		"ffff::":              "",
	} {
		p, ok := s.PoolFor(netip.MustParseAddr(ip))
		got := ""
		if ok {
			got = p.Name
		}
		if got != want {
			t.Errorf("PoolFor(%s) = %q, want %q", ip, got, want)
		}
	}
	if _, ok := s.PoolFor(netip.Addr{}); ok {
		t.Error("PoolFor(zero Addr) found a pool")
	}
	pc, _ := s.Pool("pool-c")
	if !pc.Contains(netip.MustParseAddr("203.0.113.255")) {
		t.Error("Contains ignores avoidBuggyIPs, yet excludes 203.0.113.255")
	}
}

// TestPoolForMany compares PoolFor against a linear scan over many pools.
func TestPoolForMany(t *testing.T) {
	var r Resources
	for i := range 200 {
		// 2001:db8:0:<i>::/64 blocks and 10-address v4 ranges with gaps.
		r.Pools = append(r.Pools, pool(fmt.Sprintf("p%03d", i),
			fmt.Sprintf("2001:db8:0:%x::/64", i),
			fmt.Sprintf("198.51.%d.%d-198.51.%d.%d", 100+i/25, (i%25)*10, 100+i/25, (i%25)*10+4)))
	}
	s := mustBuild(t, r, Options{})
	for a := 0; a < 8*256; a++ {
		ip := netip.AddrFrom4([4]byte{198, 51, byte(100 + a/256), byte(a)})
		var want *Pool
		for _, p := range s.Pools() {
			if p.Contains(ip) {
				want = p
			}
		}
		got, _ := s.PoolFor(ip)
		if got != want {
			t.Fatalf("PoolFor(%s) = %v, want %v", ip, got, want)
		}
	}
}

func TestSnapshotContent(t *testing.T) {
	r := base()
	r.Pools[0].Labels = map[string]string{"tier": "gold"}
	r.Pools[0].Spec.AutoAssign = new(bool)
	r.Pools[0].Spec.ServiceAllocation = &v1beta1.ServiceAllocation{
		Priority:           5,
		Namespaces:         []string{"ns-z"},
		NamespaceSelectors: []metav1.LabelSelector{sel("team", "red")},
		ServiceSelectors:   []metav1.LabelSelector{sel("app", "web")},
	}
	l2 := l2ad("l2-gold")
	l2.Spec.IPAddressPoolSelectors = []metav1.LabelSelector{sel("tier", "gold")}
	l2.Spec.Interfaces = []string{"eth1", "eth0", "eth1"}
	l2.Spec.PreferredNodeSelectors = []v1beta1.PreferredNodeSelector{{Weight: 10, Preference: sel("zone", "a")}, {Weight: 5, Preference: sel("kubernetes.io/hostname", "node-1")}}
	r.L2Advertisements = append(r.L2Advertisements, l2, l2ad("l2-all"))
	r.BGPAdvertisements[0].Spec.Communities = []string{"large:1:2:3", "no-export", "64500:1"}
	r.BGPAdvertisements[0].Spec.Peers = []string{"peer-a"}
	r.BGPAdvertisements[0].Spec.AggregationLength = i32(30)
	r.Peers[0].Spec.HoldTime = dur(9 * time.Second)
	r.Peers[0].Spec.PasswordSecret = &corev1.SecretReference{Name: "bgp-pass"}
	r.Peers[0].Spec.RouterID = "198.51.100.1"
	s := mustBuild(t, r, Options{})

	pa, ok := s.Pool("pool-a")
	if !ok || pa.AutoAssign || pa.Priority() != 5 || !pa.HasIPv4() || pa.HasIPv6() {
		t.Fatalf("pool-a = %+v", pa)
	}
	a := pa.Allocation
	if !slices.Equal(a.Namespaces, []string{"ns-z"}) || !slices.Equal(selectorStrings(a.NamespaceSelectors), []string{"team=red"}) ||
		!slices.Equal(selectorStrings(a.ServiceSelectors), []string{"app=web"}) {
		t.Errorf("allocation = namespaces %q, namespace selectors %q, service selectors %q",
			a.Namespaces, selectorStrings(a.NamespaceSelectors), selectorStrings(a.ServiceSelectors))
	}
	web := labels.Set{"app": "web"}
	pb, _ := s.Pool("pool-b")
	if !pb.AutoAssign || pb.Allocation != nil || !pb.HasIPv6() {
		t.Errorf("pool-b = %+v", pb)
	}
	names := func(ads []*L2Advertisement) (out []string) {
		for _, a := range ads {
			out = append(out, a.Name)
		}
		return out
	}
	if got := names(pa.L2Advertisements); !slices.Equal(got, []string{"l2-a", "l2-all", "l2-gold"}) {
		t.Errorf("pool-a L2 ads = %q", got)
	}
	if got := names(pb.L2Advertisements); !slices.Equal(got, []string{"l2-all"}) {
		t.Errorf("pool-b L2 ads = %q", got)
	}
	if len(pa.BGPAdvertisements) != 0 || len(pb.BGPAdvertisements) != 1 {
		t.Errorf("BGP ads: %d on pool-a, %d on pool-b", len(pa.BGPAdvertisements), len(pb.BGPAdvertisements))
	}
	gold := s.L2Advertisements()[2]
	if !slices.Equal(gold.Interfaces, []string{"eth0", "eth1"}) {
		t.Errorf("interfaces = %q", gold.Interfaces)
	}
	n1 := labels.Set{"zone": "a", "kubernetes.io/hostname": "node-1"}
	if gold.Preference(n1) != 15 || gold.Preference(labels.Set{"zone": "b"}) != 0 || !gold.MatchesNode(n1) || !gold.MatchesService(web) {
		t.Error("L2 preference/matching wrong")
	}

	ad := pb.BGPAdvertisements[0]
	wantComm := []Community{{A: 64500, B: 1}, {A: 65535, B: 65281}, {Large: true, A: 1, B: 2, C: 3}}
	if !slices.Equal(ad.Communities, wantComm) {
		t.Errorf("communities = %v", ad.Communities)
	}
	if !ad.AppliesToPeer("peer-a") || ad.AppliesToPeer("peer-b") {
		t.Error("AppliesToPeer wrong")
	}
	if got := ad.Prefix(netip.MustParseAddr("203.0.113.15")); got != netip.MustParsePrefix("203.0.113.12/30") {
		t.Errorf("Prefix v4 = %v", got)
	}
	if got := ad.Prefix(netip.MustParseAddr("2001:db8::5")); got != netip.MustParsePrefix("2001:db8::5/128") {
		t.Errorf("Prefix v6 = %v", got)
	}

	p, _ := s.Peer("peer-a")
	if p.HoldTime != 9*time.Second || p.KeepaliveTime != 3*time.Second || p.Port != DefaultBGPPort || p.IBGP() {
		t.Errorf("peer timers/port = %v %v %d", p.HoldTime, p.KeepaliveTime, p.Port)
	}
	if p.Password.Reveal() != "s3cret" || p.PasswordSecret != "herald-system/bgp-pass" {
		t.Errorf("password from secret = %q %q", p.Password.Reveal(), p.PasswordSecret)
	}
	if strings.Contains(fmt.Sprintf("%v %+v", *p, p), "s3cret") {
		t.Error("password printed by fmt")
	}
	if got := s.RouterIDForNode(n1); got != netip.MustParseAddr("198.51.100.1") {
		t.Errorf("RouterIDForNode = %v", got)
	}
	if got := s.PeersForNode(n1); len(got) != 1 {
		t.Errorf("PeersForNode = %v", got)
	}
	if al := s.CommunityAliases(); len(al) != 1 || al[0].Source != "herald-system/comms" {
		t.Errorf("aliases = %+v", al)
	}
	if !strings.Contains(s.String(), "2 pools") || strings.Contains(s.String(), "s3cret") {
		t.Errorf("String() = %q", s.String())
	}
}

func TestFingerprint(t *testing.T) {
	r := base()
	s1 := mustBuild(t, r, Options{})

	// Input order and irrelevant metadata do not matter.
	r2 := base()
	slices.Reverse(r2.Pools)
	slices.Reverse(r2.Nodes)
	r2.Pools[0].ResourceVersion = "42"
	s2 := mustBuild(t, r2, Options{})
	if !s1.Equal(s2) || s1.Fingerprint() != s2.Fingerprint() {
		t.Error("same content, different fingerprint")
	}
	// A node label change that does not matter keeps the snapshot equal
	// (metallb#1606: node churn must not force a reprocess).
	r3 := base()
	r3.Nodes[0].Labels["heartbeat"] = "x"
	if !s1.Equal(mustBuild(t, r3, Options{})) {
		t.Error("irrelevant node label changed the fingerprint")
	}

	for name, mutate := range map[string]func(r *Resources){
		"address":    func(r *Resources) { r.Pools[0].Spec.Addresses = []string{"198.51.100.0/25"} },
		"autoAssign": func(r *Resources) { r.Pools[0].Spec.AutoAssign = new(bool) },
		"community":  func(r *Resources) { r.BGPAdvertisements[0].Spec.Communities = []string{"1:1"} },
		"alias":      func(r *Resources) { r.Communities[0].Spec.Communities[0].Value = "1:2" },
		"hold":       func(r *Resources) { r.Peers[0].Spec.HoldTime = dur(30 * time.Second) },
		"secret":     func(r *Resources) { r.Secrets[0].Data["password"] = []byte("other") },
		"interface":  func(r *Resources) { r.L2Advertisements[0].Spec.Interfaces = []string{"eth0"} },
		"namespace selectors": func(r *Resources) {
			r.Pools[0].Spec.ServiceAllocation = &v1beta1.ServiceAllocation{NamespaceSelectors: []metav1.LabelSelector{sel("team", "red")}}
		},
	} {
		r := base()
		r.Peers[0].Spec.PasswordSecret = &corev1.SecretReference{Name: "bgp-pass"}
		before := mustBuild(t, r, Options{})
		mutate(&r)
		if before.Equal(mustBuild(t, r, Options{})) {
			t.Errorf("%s: change not reflected in the fingerprint", name)
		}
	}
	var nilSnap *Snapshot
	if nilSnap.Equal(s1) || !nilSnap.Equal(nil) {
		t.Error("nil Equal wrong")
	}
}

func TestPerNodeSnapshot(t *testing.T) {
	r := base()
	b := peer("peer-b", 64500, 64502, "198.51.100.253")
	b.Spec.NodeSelectors = []metav1.LabelSelector{sel("zone", "b")}
	r.Peers = append(r.Peers, b)
	ad := bgpad("bgp-zone-b", "pool-a")
	ad.Spec.NodeSelectors = []metav1.LabelSelector{sel("zone", "b")}
	r.BGPAdvertisements = append(r.BGPAdvertisements, ad)

	s1 := mustBuild(t, r, Options{NodeName: "node-1"})
	s2 := mustBuild(t, r, Options{NodeName: "node-2"})
	if len(s1.Peers()) != 1 || len(s2.Peers()) != 2 || len(s1.BGPAdvertisements()) != 1 || len(s2.BGPAdvertisements()) != 2 {
		t.Errorf("node-1: %d peers %d ads; node-2: %d peers %d ads", len(s1.Peers()), len(s1.BGPAdvertisements()), len(s2.Peers()), len(s2.BGPAdvertisements()))
	}
	if s1.NodeName() != "node-1" || s1.Equal(s2) {
		t.Error("per-node snapshots should differ")
	}
	// A BGPAdvertisement naming a peer filtered out on this node is not a
	// warning: the peer exists.
	ad.Spec.Peers = []string{"peer-b"}
	r.BGPAdvertisements[1] = ad
	r.BGPAdvertisements[1].Spec.NodeSelectors = nil
	if w := mustBuild(t, r, Options{NodeName: "node-1"}).Warnings(); len(w) != 0 {
		t.Errorf("warnings: %q", w)
	}
}

func TestLocalPrefCompatibleExported(t *testing.T) {
	pl := &Pool{Blocks: []AddressBlock{{First: netip.MustParseAddr("198.51.100.0"), Last: netip.MustParseAddr("198.51.100.255")}}}
	a := &BGPAdvertisement{AggregationLength: 32, AggregationLengthV6: 128, LocalPref: 100}
	b := &BGPAdvertisement{AggregationLength: 32, AggregationLengthV6: 128, LocalPref: 200}
	always := func(_, _ []labels.Selector) bool { return true }
	never := func(_, _ []labels.Selector) bool { return false }
	if LocalPrefCompatible(a, b, pl, always) || !LocalPrefCompatible(a, b, pl, never) {
		t.Error("node overlap not honoured")
	}
	b.AggregationLengthV6 = 64 // irrelevant: the pool has no IPv6
	if LocalPrefCompatible(a, b, pl, always) {
		t.Error("IPv6 aggregation length should not matter for an IPv4 pool")
	}
}

func TestErrorRendering(t *testing.T) {
	e := &ValidationError{Kind: KindIPAddressPool, Namespace: "herald-system", Name: "pool-a", Field: "spec.addresses[1]", Value: "10.0.0.5-10.0.0.1", Rule: "range start is after end"}
	if got := e.Error(); got != `IPAddressPool herald-system/pool-a: spec.addresses[1] "10.0.0.5-10.0.0.1": range start is after end` {
		t.Errorf("Error() = %s", got)
	}
	tr := &TransientError{Kind: KindNode, Name: "n1", Rule: "not found"}
	if tr.Error() != "Node n1: not found" || !IsTransient(tr) || IsTransient(nil) || IsTransient(e) {
		t.Errorf("transient: %s", tr.Error())
	}
	// Wrapping keeps the classification; a mix is not transient.
	if !IsTransient(fmt.Errorf("load: %w", errors.Join(tr, tr))) {
		t.Error("wrapped transient errors not transient")
	}
	mixed := fmt.Errorf("load: %w", errors.Join(tr, e))
	if IsTransient(mixed) {
		t.Error("wrapped mix reported transient")
	}
	if inv, trs := Split(mixed); len(inv) != 1 || len(trs) != 1 {
		t.Errorf("Split(wrapped mix) = %v, %v", inv, trs)
	}
	if IsTransient(errors.New("other")) {
		t.Error("foreign error reported transient")
	}
}

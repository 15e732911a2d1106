package speaker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/announce"
	"github.com/herald-lb/herald/internal/members"
	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

// l2Fixture is a namespace with one pool announced in layer 2 and over BGP
// to peer p1, Ready nodes, and helpers for Services with one endpoint.
type l2Fixture struct {
	t        *testing.T
	env      *testenv.Env
	c        client.Client
	ns, svcN string
}

func newL2Fixture(t *testing.T, nodes ...string) *l2Fixture {
	t.Helper()
	env := testenv.Start(t)
	f := &l2Fixture{t: t, env: env, c: env.Client, ns: env.Namespace(t), svcN: env.Namespace(t)}
	ctx := context.Background()
	for i, n := range nodes {
		createReadyNode(t, f.c, n, fmt.Sprintf("198.51.100.%d", 21+i))
	}
	must(t, f.c.Create(ctx, &v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: f.ns},
		Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"198.51.100.0/28"}}}))
	must(t, f.c.Create(ctx, &v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "l2", Namespace: f.ns}}))
	must(t, f.c.Create(ctx, &v1beta1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "bgp", Namespace: f.ns}}))
	must(t, f.c.Create(ctx, &v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: f.ns},
		Spec: v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64513, PeerAddress: "203.0.113.1"}}))
	return f
}

// service creates a LoadBalancer Service holding ip with one ready
// endpoint on node endpointNode (externalTrafficPolicy Cluster, so every
// node is a candidate).
func (f *l2Fixture) service(name string, ip netip.Addr, endpointNode string) string {
	f.t.Helper()
	ctx := context.Background()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.svcN},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
	must(f.t, f.c.Create(ctx, svc))
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip.String()}}
	must(f.t, f.c.Status().Update(ctx, svc))
	node, ready := endpointNode, true
	must(f.t, f.c.Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Namespace: f.svcN, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"203.0.113.50"}, NodeName: &node,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}))
	return f.svcN + "/" + name
}

// ipWonBy returns the first address of 198.51.100.1-14 whose election
// among nodes (all serving) ranks winner first.
func ipWonBy(t *testing.T, winner string, nodes ...string) netip.Addr {
	t.Helper()
	var cands []announce.Candidate
	for _, n := range nodes {
		cands = append(cands, announce.Candidate{Node: n, Serves: 1})
	}
	for i := 1; i < 15; i++ {
		ip := netip.AddrFrom4([4]byte{198, 51, 100, byte(i)})
		if announce.Elect(ip, cands)[0] == winner {
			return ip
		}
	}
	t.Fatalf("no address of the pool is won by %s", winner)
	return netip.Addr{}
}

// bgpPrefixes returns the prefixes s advertises, sorted.
func bgpPrefixes(s *testSpeaker) []string {
	var out []string
	for _, p := range s.bgp.Paths() {
		out = append(out, p.Prefix.String())
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestLayer2WaitsForMemberlistJoin: a starting speaker whose memberlist has
// not joined the others yet knows only itself as live, so an election would
// give it every address, also those another node owns (the issue measured
// 32 of 48). It must take over no layer 2 address until it has joined
// (BGP, which has no election, is announced at once), and then take only its
// own share.
func TestLayer2WaitsForMemberlistJoin(t *testing.T) {
	f := newL2Fixture(t, "n1", "n2")
	mine, theirs := ipWonBy(t, "n1", "n1", "n2"), ipWonBy(t, "n2", "n1", "n2")
	keyMine := f.service("mine", mine, "n2")
	keyTheirs := f.service("theirs", theirs, "n2")

	// n1 starts: memberlist has not heard of n2 yet, and has not joined.
	live := &liveness{live: map[string]bool{"n1": true}}
	live.setJoined("n1", false)
	s := startSpeaker(t, f.env, f.ns, "n1", live)

	// Both Services are decided (BGP announced, not gated)...
	want := []string{netip.PrefixFrom(mine, 32).String(), netip.PrefixFrom(theirs, 32).String()}
	slices.Sort(want)
	poll.Until(t, 30*time.Second, "BGP announced before the join", func() error {
		if got := bgpPrefixes(s); !slices.Equal(got, want) {
			return fmt.Errorf("BGP prefixes %v, want %v", got, want)
		}
		return nil
	})
	// ...and nothing is taken over in layer 2. The BGP paths come from the
	// same decisions, applied after layer 2.
	for _, key := range []string{keyMine, keyTheirs} {
		if got := s.l2.announced(key); len(got) != 0 {
			t.Fatalf("before joining, n1 announces %s in layer 2: %v", key, got)
		}
	}

	// The join brings n2 into Live, then the gate opens.
	live.set("n2", true)
	live.setJoined("n1", true)
	poll.Until(t, 30*time.Second, "n1 announces its own share after the join", func() error {
		if got := s.l2.announced(keyMine); !slices.Equal(got, []string{mine.String()}) {
			return fmt.Errorf("%s announced %v", keyMine, got)
		}
		return nil
	})
	if got := s.l2.announced(keyTheirs); len(got) != 0 {
		t.Fatalf("after joining, n1 announces n2's address %v", got)
	}
	if !s.members.isActivated() {
		t.Error("memberlist was never activated although the configuration loaded")
	}
}

// TestHealReannounces: when a speaker that had been declared failed is live
// again (a partition healed), every speaker re-decides and then re-sends a
// gratuitous burst for what it owns, so clients that followed the other
// side come back; a plain failover does not.
func TestHealReannounces(t *testing.T) {
	f := newL2Fixture(t, "n1", "n2")
	ip := ipWonBy(t, "n1", "n1", "n2")
	key := f.service("web", ip, "n2")
	live := &liveness{live: map[string]bool{"n1": true, "n2": true}}
	n1 := startSpeaker(t, f.env, f.ns, "n1", live)
	n2 := startSpeaker(t, f.env, f.ns, "n2", live)
	owner := func(who *testSpeaker, other *testSpeaker) func() error {
		return func() error {
			if got := who.l2.announced(key); !slices.Equal(got, []string{ip.String()}) {
				return fmt.Errorf("%s announces %v", who.name, got)
			}
			if got := other.l2.announced(key); len(got) != 0 {
				return fmt.Errorf("%s announces %v", other.name, got)
			}
			return nil
		}
	}
	poll.Until(t, 30*time.Second, "n1 owns the address", owner(n1, n2))

	// n1 is declared failed (n2's side of a partition): n2 takes over.
	live.set("n1", false)
	poll.Until(t, 30*time.Second, "n2 takes over", owner(n2, n1))
	if r1, r2 := n1.l2.reannounces(), n2.l2.reannounces(); len(r1)+len(r2) != 0 {
		t.Fatalf("re-announced on a failover: n1 %v, n2 %v", r1, r2)
	}

	// The partition heals: n1 is back. n1 owns the address again and both
	// re-announce, after re-deciding: n1's burst covers the address, n2's
	// does not.
	live.rejoin("n1")
	poll.Until(t, 30*time.Second, "n1 owns the address again", owner(n1, n2))
	poll.Until(t, 30*time.Second, "re-announce after the heal", func() error {
		r1, r2 := n1.l2.reannounces(), n2.l2.reannounces()
		if len(r1) == 0 || len(r2) == 0 {
			return fmt.Errorf("Reannounce calls: n1 %d, n2 %d; want one each", len(r1), len(r2))
		}
		if last := r1[len(r1)-1]; !slices.Equal(last, []string{ip.String()}) {
			return fmt.Errorf("n1 re-announced %v, want %v (its owned set after the heal)", last, ip)
		}
		if last := r2[len(r2)-1]; len(last) != 0 {
			return fmt.Errorf("n2 re-announced %v, want nothing (it released the address)", last)
		}
		return nil
	})
}

// TestNoSnapshotNoMembership: a speaker whose configuration does not load
// (here an invalid BGPPeer selecting only its node got in without the
// webhook) must not become a memberlist member, or the others elect it and
// its share of the addresses goes dark. Once the configuration loads it
// activates memberlist.
func TestNoSnapshotNoMembership(t *testing.T) {
	f := newL2Fixture(t, "n1")
	ctx := context.Background()
	bad := &v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: f.ns},
		Spec: v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64513, PeerAddress: "203.0.113.9",
			HoldTime:      &metav1.Duration{Duration: 2e9}, // 2 s: invalid (0 or >= 3 s)
			NodeSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"kubernetes.io/hostname": "n1"}}}}}
	must(t, f.c.Create(ctx, bad))
	live := &liveness{live: map[string]bool{"n1": true}}
	s := startSpeaker(t, f.env, f.ns, "n1", live)
	poll.Until(t, 30*time.Second, "configuration reported invalid", func() error {
		var cs v1beta1.ConfigurationState
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "speaker-n1"}, &cs); err != nil {
			return err
		}
		if cs.Status.Result != v1beta1.ConfigurationResultInvalid || !strings.Contains(cs.Status.ErrorSummary, "BGPPeer "+f.ns+"/bad") {
			return fmt.Errorf("ConfigurationState %+v", cs.Status)
		}
		return nil
	})
	if s.members.isActivated() {
		t.Fatal("memberlist activated without a configuration snapshot")
	}
	must(t, f.c.Delete(ctx, bad))
	poll.Until(t, 30*time.Second, "memberlist activated once the configuration loads", func() error {
		if !s.members.isActivated() {
			return errors.New("not activated")
		}
		return nil
	})
}

// TestMissingPeerSecretDropsOnlyThatPeer: a speaker that boots while one
// BGPPeer's password Secret is missing announces everything else (layer 2,
// the other peer) and reports the missing Secret on the peer and in its
// ConfigurationState; the peer is added when the Secret appears, and kept
// (last good configuration) when the Secret is deleted again.
func TestMissingPeerSecretDropsOnlyThatPeer(t *testing.T) {
	f := newL2Fixture(t, "n1")
	ctx := context.Background()
	must(t, f.c.Create(ctx, &v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "p2", Namespace: f.ns},
		Spec: v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64514, PeerAddress: "203.0.113.2",
			PasswordSecret: &corev1.SecretReference{Name: "pw-p2"}}}))
	ip := netip.MustParseAddr("198.51.100.7")
	key := f.service("web", ip, "n1")
	s := startSpeaker(t, f.env, f.ns, "n1", &liveness{live: map[string]bool{"n1": true}})

	peers := func(want ...string) func() error {
		return func() error {
			var got []string
			for _, p := range s.bgp.Peers() {
				got = append(got, p.Name)
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("BGP peers %v, want %v", got, want)
			}
			return nil
		}
	}
	state := func(result v1beta1.ConfigurationResult, summary string) func() error {
		return func() error {
			var cs v1beta1.ConfigurationState
			if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "speaker-n1"}, &cs); err != nil {
				return err
			}
			if cs.Status.Result != result || !strings.Contains(cs.Status.ErrorSummary, summary) {
				return fmt.Errorf("ConfigurationState result %q summary %q", cs.Status.Result, cs.Status.ErrorSummary)
			}
			return nil
		}
	}
	missing := fmt.Sprintf(`BGPPeer %s/p2: spec.passwordSecret "%s/pw-p2": Secret not found (waiting for it)`, f.ns, f.ns)
	poll.Until(t, 30*time.Second, "layer 2 announced without the Secret", func() error {
		if got := s.l2.announced(key); !slices.Equal(got, []string{ip.String()}) {
			return fmt.Errorf("layer 2 %v", got)
		}
		return nil
	})
	poll.Until(t, 30*time.Second, "only p1 applied", peers("p1"))
	poll.Until(t, 30*time.Second, "missing Secret reported", state(v1beta1.ConfigurationResultInvalid, missing))
	poll.Until(t, 30*time.Second, "peerNotApplied on p2", func() error {
		if !s.rec.has("BGPPeer/p2 Warning peerNotApplied: not applied on node n1: " + missing) {
			return errors.New("no peerNotApplied event for the missing Secret")
		}
		return nil
	})

	pw := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pw-p2", Namespace: f.ns}, Type: corev1.SecretTypeBasicAuth,
		Data: map[string][]byte{"password": []byte("s3cret")}}
	must(t, f.c.Create(ctx, pw))
	poll.Until(t, 30*time.Second, "p2 applied once the Secret exists", peers("p1", "p2"))
	poll.Until(t, 30*time.Second, "configuration valid", state(v1beta1.ConfigurationResultValid, ""))

	must(t, f.c.Delete(ctx, pw))
	poll.Until(t, 30*time.Second, "deleted Secret reported", state(v1beta1.ConfigurationResultInvalid, "Secret not found"))
	if err := peers("p1", "p2")(); err != nil {
		t.Fatalf("after the Secret was deleted: %v (the peer in force must stay)", err)
	}
	if got := s.l2.announced(key); !slices.Equal(got, []string{ip.String()}) {
		t.Fatalf("layer 2 after the Secret was deleted: %v", got)
	}
}

// TestUndefinedAliasKeepsConfigurationInForce: the Community defining an
// alias a BGPAdvertisement in force uses is deleted (the webhook refuses
// that, but not while it is down, nor while the namespace terminates). The
// speaker reports the undefined alias in its ConfigurationState, naming
// the object, field and alias, and keeps announcing with the last good
// configuration (the path keeps its community).
func TestUndefinedAliasKeepsConfigurationInForce(t *testing.T) {
	f := newL2Fixture(t, "n1")
	ctx := context.Background()
	comms := &v1beta1.Community{ObjectMeta: metav1.ObjectMeta{Name: "comms", Namespace: f.ns},
		Spec: v1beta1.CommunitySpec{Communities: []v1beta1.CommunityAlias{{Name: "prefer", Value: "64500:300"}}}}
	must(t, f.c.Create(ctx, comms))
	var ad v1beta1.BGPAdvertisement
	must(t, f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "bgp"}, &ad))
	ad.Spec.Communities = []string{"prefer"}
	must(t, f.c.Update(ctx, &ad))
	ip := netip.MustParseAddr("198.51.100.7")
	f.service("web", ip, "n1")
	s := startSpeaker(t, f.env, f.ns, "n1", &liveness{live: map[string]bool{"n1": true}})

	const prefer = 64500<<16 | 300
	announced := func() error {
		for _, p := range s.bgp.Paths() {
			if p.Prefix == netip.PrefixFrom(ip, 32) && slices.Equal(p.Communities, []uint32{prefer}) {
				return nil
			}
		}
		return fmt.Errorf("paths %+v, want %s with community 64500:300", s.bgp.Paths(), ip)
	}
	poll.Until(t, 30*time.Second, "path with the alias's community", announced)

	must(t, f.c.Delete(ctx, comms))
	want := fmt.Sprintf(`BGPAdvertisement %s/bgp: spec.communities[0] "prefer": no Community object defines the alias "prefer" (waiting for it)`, f.ns)
	poll.Until(t, 30*time.Second, "undefined alias in ConfigurationState", func() error {
		var cs v1beta1.ConfigurationState
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "speaker-n1"}, &cs); err != nil {
			return err
		}
		if cs.Status.Result != v1beta1.ConfigurationResultInvalid || !strings.Contains(cs.Status.ErrorSummary, want) {
			return fmt.Errorf("ConfigurationState result %q summary %q", cs.Status.Result, cs.Status.ErrorSummary)
		}
		return nil
	})
	if err := announced(); err != nil {
		t.Fatalf("after the Community was deleted: %v (the configuration in force must stay)", err)
	}
}

// memberPortOn returns a port free for TCP and UDP on every one of addrs.
func memberPortOn(t *testing.T, addrs ...netip.Addr) int {
	t.Helper()
next:
	for range 50 {
		tl, err := net.ListenTCP("tcp", &net.TCPAddr{IP: addrs[0].AsSlice()})
		if err != nil {
			t.Fatal(err)
		}
		port := tl.Addr().(*net.TCPAddr).Port
		_ = tl.Close()
		for _, a := range addrs {
			tl, err := net.ListenTCP("tcp", &net.TCPAddr{IP: a.AsSlice(), Port: port})
			if err != nil {
				continue next
			}
			ul, err := net.ListenUDP("udp", &net.UDPAddr{IP: a.AsSlice(), Port: port})
			_ = tl.Close()
			if err != nil {
				continue next
			}
			_ = ul.Close()
		}
		return port
	}
	t.Fatal("no port free on every address")
	return 0
}

// TestNoSnapshotNotElected runs two speakers with real memberlists on
// loopback (127.0.0.2 and 127.0.0.3, found through their speaker Pods).
// n2 cannot load its configuration (an invalid BGPPeer selecting only n2
// got in without the webhook): it must not be a member, so n1 does not
// elect it and answers for n2's share too, instead of leaving it dark. Once
// n2's configuration loads, n2 joins and takes its share back.
func TestNoSnapshotNotElected(t *testing.T) {
	f := newL2Fixture(t, "n1", "n2")
	ctx := context.Background()
	bad := &v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: f.ns},
		Spec: v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64513, PeerAddress: "203.0.113.9",
			HoldTime:      &metav1.Duration{Duration: 2e9}, // 2 s: invalid (0 or >= 3 s)
			NodeSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"kubernetes.io/hostname": "n2"}}}}}
	must(t, f.c.Create(ctx, bad))
	mine, theirs := ipWonBy(t, "n1", "n1", "n2"), ipWonBy(t, "n2", "n1", "n2")
	keyMine, keyTheirs := f.service("mine", mine, "n2"), f.service("theirs", theirs, "n2")

	addr := map[string]netip.Addr{"n1": netip.MustParseAddr("127.0.0.2"), "n2": netip.MustParseAddr("127.0.0.3")}
	port := memberPortOn(t, addr["n1"], addr["n2"])
	speakers := map[string]*testSpeaker{}
	lists := map[string]*members.List{}
	for _, node := range []string{"n1", "n2"} {
		createSpeakerPod(t, f.c, f.ns, node, addr[node].String())

		timings := members.DefaultTimings()
		timings.AloneAfter = 500 * time.Millisecond // n1 is alone while n2 is no member
		l, err := members.New(members.Config{NodeName: node, BindAddr: addr[node], BindPort: port,
			Secret: []byte("k"), Timings: timings}, nil)
		must(t, err)
		lctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- l.Run(lctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("memberlist of %s: %v", node, err)
			}
		})
		lists[node] = l
		speakers[node] = startSpeakerWith(t, f.env, f.ns, node, l, port)
	}
	owners := func(wantN1, wantN2 []string) func() error {
		return func() error {
			for node, want := range map[string][]string{"n1": wantN1, "n2": wantN2} {
				var got []string
				for _, key := range []string{keyMine, keyTheirs} {
					got = append(got, speakers[node].l2.announced(key)...)
				}
				slices.Sort(got)
				if !slices.Equal(got, want) {
					return fmt.Errorf("%s announces %v, want %v (n1 live %v)", node, got, want, lists["n1"].Live())
				}
			}
			return nil
		}
	}
	both := []string{mine.String(), theirs.String()}
	slices.Sort(both)
	poll.Until(t, 30*time.Second, "n1 answers for everything while n2 has no configuration", owners(both, nil))
	if lists["n2"].Joined() || lists["n1"].Live()["n2"] {
		t.Fatalf("n2 without configuration: Joined %v, in n1's Live %v", lists["n2"].Joined(), lists["n1"].Live())
	}
	select {
	case <-lists["n2"].Ready():
		t.Fatal("n2's memberlist bound its port without a configuration")
	default:
	}

	must(t, f.c.Delete(ctx, bad))
	poll.Until(t, 30*time.Second, "n2 joins and takes its share once its configuration loads", owners([]string{mine.String()}, []string{theirs.String()}))
}

// TestUnsupportedPeerFieldsInConfigurationState: BGPPeers that got in
// without the webhook with what the BGP backend cannot do (dynamicASN: the
// session was never opened; holdTime 0: gobgp silently sent 90 s) are
// reported Invalid in the speaker's ConfigurationState, each with its
// object, field and reason (holdTime 0 was reported Valid before).
func TestUnsupportedPeerFieldsInConfigurationState(t *testing.T) {
	f := newL2Fixture(t, "n1")
	ctx := context.Background()
	onN1 := []metav1.LabelSelector{{MatchLabels: map[string]string{"kubernetes.io/hostname": "n1"}}}
	must(t, f.c.Create(ctx, &v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "dynamic", Namespace: f.ns},
		Spec: v1beta2.BGPPeerSpec{MyASN: 64512, DynamicASN: v1beta2.ExternalASNMode, PeerAddress: "203.0.113.8", NodeSelectors: onN1}}))
	must(t, f.c.Create(ctx, &v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "zero-hold", Namespace: f.ns},
		Spec: v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64513, PeerAddress: "203.0.113.9",
			HoldTime: &metav1.Duration{}, NodeSelectors: onN1}}))
	startSpeaker(t, f.env, f.ns, "n1", &liveness{live: map[string]bool{"n1": true}})
	want := []string{
		`BGPPeer ` + f.ns + `/dynamic: spec.dynamicASN "external": not supported by Herald's BGP backend`,
		`BGPPeer ` + f.ns + `/zero-hold: spec.holdTime "0s": a hold time of 0 (no keepalives, allowed by RFC 4271 §4.2) is not supported`,
	}
	poll.Until(t, 30*time.Second, "both peers reported invalid", func() error {
		var cs v1beta1.ConfigurationState
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "speaker-n1"}, &cs); err != nil {
			return err
		}
		if cs.Status.Result != v1beta1.ConfigurationResultInvalid {
			return fmt.Errorf("ConfigurationState %+v", cs.Status)
		}
		for _, w := range want {
			if !strings.Contains(cs.Status.ErrorSummary, w) {
				return fmt.Errorf("summary %q lacks %q", cs.Status.ErrorSummary, w)
			}
		}
		return nil
	})
}

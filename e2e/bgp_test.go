package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/e2e/lab"
	"github.com/herald-lb/herald/internal/poll"
)

// Node roles in the BGP lab (5 nodes). A node opens all its sessions from
// one ASN, so the iBGP node (n4) and the MD5 node (n5) are kept apart from
// the eBGP nodes n1-n3.
const (
	bgpRoleLabel = "herald-e2e/bgp"
	bgpNS        = "bgp-e2e"
	// bgpMD5Password is the TCP-MD5 key FRR expects from n5.
	bgpMD5Password = "herald-e2e-md5"
)

// bgpEnv is the lab the BGP tests share: Herald installed, the eBGP peers
// "ebgp4" (IPv4, graceful restart) and "ebgp6" (IPv6, no graceful restart)
// on n1-n3.
type bgpEnv struct {
	l *lab.Lab
	h *lab.Herald
	c client.Client
}

// TestBGP runs Herald's BGP mode against a real FRR router (Debian frr,
// AS 64500, dynamic eBGP neighbors from the segment) in one shared lab. Each
// subtest configures its own pool and advertisement, checks what FRR
// received with vtysh JSON, and removes its objects again.
func TestBGP(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up network namespaces, FRR, an API server and Herald")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	l := lab.UpForTest(t, lab.Config{Nodes: 5})
	roles := map[string]map[string]string{
		"n1": {bgpRoleLabel: "ebgp"}, "n2": {bgpRoleLabel: "ebgp"}, "n3": {bgpRoleLabel: "ebgp"},
		"n4": {bgpRoleLabel: "ibgp"}, "n5": {bgpRoleLabel: "md5"},
	}
	if err := l.RegisterNodes(ctx, roles); err != nil {
		t.Fatal(err)
	}
	h, err := l.InstallHerald(ctx, lab.InstallOptions{})
	if h != nil {
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("speaker and controller logs:\n%s", h.Logs(60))
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	e := &bgpEnv{l: l, h: h, c: h.Client()}
	t.Cleanup(func() {
		if t.Failed() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			t.Logf("FRR at the end:\n%s", bgpFRRDump(ctx, l))
		}
	})
	if err := l.EnsureNamespace(ctx, bgpNS); err != nil {
		t.Fatal(err)
	}
	e.applyPeer(ctx, t, "ebgp4", lab.RouterAddr, lab.NodeASN, lab.RouterASN, "ebgp", func(s *v1beta2.BGPPeerSpec) {
		s.EnableGracefulRestart = true
	})
	e.applyPeer(ctx, t, "ebgp6", lab.RouterAddrV6, lab.NodeASN, lab.RouterASN, "ebgp", nil)

	t.Run("SessionsIPv4AndIPv6", e.testSessions)
	t.Run("SessionStateObjects", e.testSessionState)
	t.Run("AttributesAndCurlThroughRouter", e.testAttributes)
	t.Run("LocalPrefOverIBGP", e.testLocalPref)
	t.Run("Aggregation", e.testAggregation)
	t.Run("PeerNodeSelectors", e.testPeerNodeSelectors)
	t.Run("ETPLocalAndEndpointLoss", e.testETPLocal)
	t.Run("WeightedECMPByLocalEndpoints", e.testWeightedECMP)
	t.Run("WithdrawOnServiceDelete", e.testWithdrawOnDelete)
	t.Run("MD5", e.testMD5)
	t.Run("GracefulRestart", e.testGracefulRestart)
	t.Run("BFD", e.testBFD)
	t.Run("BFDMultihop", e.testBFDMultihop)
	t.Run("ShutdownSendsCease", e.testShutdownCease)
}

// failDump reports, when t failed, what FRR, the client and the speakers
// showed; addrs are the Service addresses the client tries.
func (e *bgpEnv) failDump(t *testing.T, addrs ...netip.Addr) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		t.Logf("FRR:\n%s%s", bgpFRRDump(ctx, e.l), bgpCurlAll(ctx, e.l, addrs))
		t.Logf("logs:\n%s", e.h.Logs(40))
	})
}

// applyPeer creates BGPPeer name (deleted at the end of t) from every node
// labelled bgpRoleLabel=role to the router address addr.
func (e *bgpEnv) applyPeer(ctx context.Context, t testing.TB, name string, addr netip.Addr, myASN, peerASN uint32,
	role string, mod func(*v1beta2.BGPPeerSpec)) *v1beta2.BGPPeer {
	t.Helper()
	p := &v1beta2.BGPPeer{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: lab.HeraldNamespace},
		Spec: v1beta2.BGPPeerSpec{
			MyASN: myASN, PeerASN: peerASN, PeerAddress: addr.String(),
			HoldTime:      &metav1.Duration{Duration: 9 * time.Second},
			ConnectTime:   &metav1.Duration{Duration: time.Second},
			NodeSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{bgpRoleLabel: role}}},
		},
	}
	if mod != nil {
		mod(&p.Spec)
	}
	bgpApply(ctx, t, e.c, p)
	return p
}

// applyPoolAdv creates IPAddressPool name with addrs and a BGPAdvertisement
// of the same name for it (deleted at the end of t).
func (e *bgpEnv) applyPoolAdv(ctx context.Context, t testing.TB, name string, addrs []string, mod func(*v1beta1.BGPAdvertisementSpec)) {
	t.Helper()
	bgpApply(ctx, t, e.c, &v1beta1.IPAddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: lab.HeraldNamespace},
		Spec:       v1beta1.IPAddressPoolSpec{Addresses: addrs, AutoAssign: ptr.To(false)},
	})
	adv := &v1beta1.BGPAdvertisement{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: lab.HeraldNamespace},
		Spec:       v1beta1.BGPAdvertisementSpec{IPAddressPools: []string{name}},
	}
	if mod != nil {
		mod(&adv.Spec)
	}
	bgpApply(ctx, t, e.c, adv)
}

// service creates a Service in bgpNS from pool with ready endpoints on the
// given nodes, waits for its addresses and returns them (IPv4 first).
func (e *bgpEnv) service(ctx context.Context, t *testing.T, name, pool string, dual, local bool, nodes ...string) []netip.Addr {
	t.Helper()
	addrs := bgpCreateService(ctx, t, e.l, bgpSvcSpec{Namespace: bgpNS, Name: name, Pool: pool, DualStack: dual, Local: local})
	e.setEndpoints(ctx, t, name, nodes...)
	return addrs
}

func (e *bgpEnv) setEndpoints(ctx context.Context, t *testing.T, name string, nodes ...string) {
	t.Helper()
	eps := []lab.Endpoint{}
	for _, n := range nodes {
		eps = append(eps, lab.Endpoint{Node: n, Ready: true})
	}
	if err := e.l.SetEndpoints(ctx, bgpNS, name, eps); err != nil {
		t.Fatal(err)
	}
}

// testSessions proves that every eBGP node opens an IPv4 session to the
// router's IPv4 address and an IPv6 session to its IPv6 address, from
// myASN 64512, and that FRR sees them Established in the right family.
func (e *bgpEnv) testSessions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e.failDump(t)
	for fam, want := range map[string][]string{"ipv4Unicast": bgpV4Peers(1, 2, 3), "ipv6Unicast": bgpV6Peers(1, 2, 3)} {
		_, err := poll.Wait(ctx, time.Minute, "", func() error {
			got, err := bgpEstablished(ctx, e.l, fam)
			if err != nil {
				return err
			}
			for _, p := range want {
				if got[p] != lab.NodeASN {
					return fmt.Errorf("%s: established %v, want %v from AS %d", fam, got, want, lab.NodeASN)
				}
			}
			return nil
		}, bgpEvery)
		if err != nil {
			t.Fatal(err)
		}
	}
}

// testAttributes proves the content of the announcement: a dual-stack
// Service's /32 and /128 reach FRR from each eBGP node with that node as next
// hop, AS path 64512, the standard community and the large community of the
// advertisement; and the client's curl reaches the Service through the
// router (which routes it to one of the nodes).
func (e *bgpEnv) testAttributes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e.applyPoolAdv(ctx, t, "attr", []string{"203.0.113.16/28", "2001:db8:203::10/124"}, func(s *v1beta1.BGPAdvertisementSpec) {
		s.Communities = []string{"64500:100", "large:64512:1:100"}
	})
	addrs := e.service(ctx, t, "attr", "attr", true, false, "n1", "n2", "n3")
	e.failDump(t, addrs...)
	for _, a := range addrs {
		peers, nodeAddr := bgpV4Peers(1, 2, 3), lab.NodeAddr
		if a.Is6() {
			peers, nodeAddr = bgpV6Peers(1, 2, 3), lab.NodeAddrV6
		}
		paths, err := bgpWaitPrefix(ctx, e.l, bgpHostPrefix(a), peers, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range paths {
			i := slices.Index(peers, p.Peer.PeerID) + 1
			if nh := p.globalNextHop(); nh != nodeAddr(i).String() {
				t.Errorf("%s from %s: next hop %q, want the node's address %s", a, p.Peer.PeerID, nh, nodeAddr(i))
			}
			if p.ASPath.String != fmt.Sprint(lab.NodeASN) {
				t.Errorf("%s from %s: AS path %q, want %d", a, p.Peer.PeerID, p.ASPath.String, lab.NodeASN)
			}
			if p.Community == nil || p.Community.String != "64500:100" {
				t.Errorf("%s from %s: communities %+v, want 64500:100", a, p.Peer.PeerID, p.Community)
			}
			if p.LargeCommunity == nil || p.LargeCommunity.String != "64512:1:100" {
				t.Errorf("%s from %s: large communities %+v, want 64512:1:100", a, p.Peer.PeerID, p.LargeCommunity)
			}
		}
		_, err = poll.Wait(ctx, 30*time.Second, "", func() error {
			body, err := e.l.Curl(ctx, a, lab.BackendPort)
			if err != nil {
				return err
			}
			r, err := lab.ParseBackendReply(body)
			if err != nil {
				return err
			}
			if !slices.Contains([]string{"n1", "n2", "n3"}, r.Node) {
				return fmt.Errorf("curl %s answered by %q, want an announcing node", a, r.Node)
			}
			return nil
		}, bgpEvery)
		if err != nil {
			t.Errorf("client curl through the router: %v", err)
		}
	}
}

// testLocalPref proves LOCAL_PREF on iBGP: FRR gets a static iBGP neighbor
// for n4 (AS 64500 on both sides, added with vtysh and removed again), n4's
// speaker peers from myASN 64500, and the path FRR learns from n4 carries
// the advertisement's localPref 250.
func (e *bgpEnv) testLocalPref(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n4 := lab.NodeAddr(4).String()
	if _, err := e.l.Vtysh(ctx, "configure terminal", fmt.Sprintf("router bgp %d", lab.RouterASN),
		"neighbor "+n4+" remote-as internal", "neighbor "+n4+" passive",
		"address-family ipv4 unicast", "neighbor "+n4+" activate"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = e.l.Vtysh(context.Background(), "configure terminal", fmt.Sprintf("router bgp %d", lab.RouterASN),
			"no neighbor "+n4)
	})
	e.applyPeer(ctx, t, "ibgp", lab.RouterAddr, lab.RouterASN, lab.RouterASN, "ibgp", nil)
	e.applyPoolAdv(ctx, t, "lpref", []string{"203.0.113.32/28"}, func(s *v1beta1.BGPAdvertisementSpec) {
		s.LocalPref = 250
	})
	addrs := e.service(ctx, t, "lpref", "lpref", false, false, "n1", "n2", "n3", "n4")
	e.failDump(t, addrs...)
	paths, err := bgpWaitPrefix(ctx, e.l, bgpHostPrefix(addrs[0]), append(bgpV4Peers(1, 2, 3), n4), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if p.Peer.PeerID != n4 {
			continue
		}
		if p.Peer.Type != "internal" {
			t.Errorf("path from n4: peer type %q, want internal (iBGP)", p.Peer.Type)
		}
		if p.LocPrf == nil || *p.LocPrf != 250 {
			t.Errorf("path from n4 (iBGP): LOCAL_PREF %v, want 250", p.LocPrf)
		}
		if p.globalNextHop() != n4 {
			t.Errorf("path from n4: next hop %q, want %s", p.globalNextHop(), n4)
		}
	}
}

// testAggregation proves aggregationLength: two Services in a /28 pool
// announced with aggregationLength 28 give FRR the one /28 (no /32); it
// stays while one Service remains and is withdrawn with the last.
func (e *bgpEnv) testAggregation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e.applyPoolAdv(ctx, t, "agg", []string{"203.0.113.64/28"}, func(s *v1beta1.BGPAdvertisementSpec) {
		s.AggregationLength = ptr.To[int32](28)
	})
	a1 := e.service(ctx, t, "agg1", "agg", false, false, "n1", "n2", "n3")
	a2 := e.service(ctx, t, "agg2", "agg", false, false, "n1", "n2", "n3")
	e.failDump(t, a1[0], a2[0])
	agg := netip.MustParsePrefix("203.0.113.64/28")
	if _, err := bgpWaitPrefix(ctx, e.l, agg, bgpV4Peers(1, 2, 3), time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, a := range []netip.Addr{a1[0], a2[0]} {
		if paths, err := bgpFRRPrefix(ctx, e.l, bgpHostPrefix(a)); err != nil || len(paths) != 0 {
			t.Errorf("FRR has %s as a host route (%d paths, %v); want only the aggregate", a, len(paths), err)
		}
	}
	// Every speaker wrote agg1's ServiceBGPStatus (n1 to n3 at least, the
	// nodes with sessions to FRR); each deletes its own once it has decided
	// on agg1's deletion.
	agg1Statuses := func(ok func(n int) bool) func() error {
		return func() error {
			st, err := e.h.BGPStatuses(ctx, bgpNS, "agg1")
			if err != nil {
				return err
			}
			if !ok(len(st)) {
				return fmt.Errorf("%d ServiceBGPStatuses of agg1", len(st))
			}
			return nil
		}
	}
	poll.Until(t, time.Minute, "agg1's ServiceBGPStatuses on n1, n2 and n3", agg1Statuses(func(n int) bool { return n >= 3 }))
	if err := e.l.Client().CoreV1().Services(bgpNS).Delete(ctx, "agg1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// agg2 still uses the aggregate: it must stay, from every node, once
	// every speaker has withdrawn agg1.
	poll.Until(t, time.Minute, "every speaker done with agg1 (ServiceBGPStatuses gone)", agg1Statuses(func(n int) bool { return n == 0 }))
	if _, err := bgpWaitPrefix(ctx, e.l, agg, bgpV4Peers(1, 2, 3), time.Second); err != nil {
		t.Errorf("with one Service left in it: %v", err)
	}
	if err := e.l.Client().CoreV1().Services(bgpNS).Delete(ctx, "agg2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := bgpWaitPrefix(ctx, e.l, agg, nil, 30*time.Second); err != nil {
		t.Errorf("after the last Service went: %v", err)
	}
}

// testPeerNodeSelectors proves that a BGPPeer's nodeSelectors decide which
// nodes open its session: ebgp4/ebgp6 select the nodes labelled ebgp, so
// n4 and n5 never open an eBGP session; removing the label from n3 closes
// n3's sessions (and withdraws its paths), putting it back reopens them.
func (e *bgpEnv) testPeerNodeSelectors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e.applyPoolAdv(ctx, t, "sel", []string{"203.0.113.80/28"}, nil)
	addrs := e.service(ctx, t, "sel", "sel", false, false, "n1", "n2", "n3", "n4", "n5")
	e.failDump(t, addrs...)
	prefix := bgpHostPrefix(addrs[0])
	if _, err := bgpWaitPrefix(ctx, e.l, prefix, bgpV4Peers(1, 2, 3), time.Minute); err != nil {
		t.Fatal(err)
	}
	for fam, unselected := range map[string][]string{"ipv4Unicast": bgpV4Peers(4, 5), "ipv6Unicast": bgpV6Peers(4, 5)} {
		got, err := bgpEstablished(ctx, e.l, fam)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range unselected {
			if as, ok := got[p]; ok && as == lab.NodeASN {
				t.Errorf("%s: unselected node %s has an eBGP session", fam, p)
			}
		}
	}
	relabel := func(ctx context.Context, v string) {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, bgpRoleLabel, v)
		if v == "" {
			patch = fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, bgpRoleLabel)
		}
		if _, err := e.l.Client().CoreV1().Nodes().Patch(ctx, "n3", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	relabel(ctx, "")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		relabel(ctx, "ebgp")
	})
	n3 := lab.NodeAddr(3).String()
	_, err := poll.Wait(ctx, 30*time.Second, "", func() error {
		for _, fam := range []string{"ipv4Unicast", "ipv6Unicast"} {
			got, err := bgpEstablished(ctx, e.l, fam)
			if err != nil {
				return err
			}
			if _, ok := got[n3]; ok {
				return fmt.Errorf("%s: n3 still Established after losing its label", fam)
			}
			if _, ok := got[lab.NodeAddrV6(3).String()]; ok {
				return fmt.Errorf("%s: n3 (IPv6) still Established after losing its label", fam)
			}
		}
		return nil
	}, bgpEvery)
	if err != nil {
		t.Error(err)
	}
	if _, err := bgpWaitPrefix(ctx, e.l, prefix, bgpV4Peers(1, 2), 30*time.Second); err != nil {
		t.Error(err)
	}
	relabel(ctx, "ebgp")
	if _, err := bgpWaitPrefix(ctx, e.l, prefix, bgpV4Peers(1, 2, 3), time.Minute); err != nil {
		t.Errorf("after putting the label back: %v", err)
	}
}

// testETPLocal proves externalTrafficPolicy Local: only nodes with a ready
// endpoint announce (next hop = that node); moving the endpoint moves the
// announcement and the client's traffic; losing the last endpoint
// withdraws the prefix in both families.
func (e *bgpEnv) testETPLocal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e.applyPoolAdv(ctx, t, "local", []string{"203.0.113.96/28", "2001:db8:203::60/124"}, nil)
	addrs := e.service(ctx, t, "local", "local", true, true, "n2")
	e.failDump(t, addrs...)
	v4, v6 := bgpHostPrefix(addrs[0]), bgpHostPrefix(addrs[1])
	for _, step := range []struct {
		node  string
		index int
	}{{"n2", 2}, {"n3", 3}} {
		e.setEndpoints(ctx, t, "local", step.node)
		paths, err := bgpWaitPrefix(ctx, e.l, v4, bgpV4Peers(step.index), time.Minute)
		if err != nil {
			t.Fatalf("endpoint on %s: %v", step.node, err)
		}
		if nh := paths[0].globalNextHop(); nh != lab.NodeAddr(step.index).String() {
			t.Errorf("endpoint on %s: next hop %s", step.node, nh)
		}
		if _, err := bgpWaitPrefix(ctx, e.l, v6, bgpV6Peers(step.index), time.Minute); err != nil {
			t.Fatalf("endpoint on %s: %v", step.node, err)
		}
		// FRR's BGP table has the path; the router's kernel gets the route
		// from zebra a moment later ("network is unreachable" until then).
		poll.Until(t, 30*time.Second, "endpoint on "+step.node+": the client reaches it", func() error {
			r, err := e.l.Get(ctx, e.l.ClientNamespace(), addrs[0], lab.BackendPort)
			if err != nil {
				return err
			}
			if r.Node != step.node {
				return fmt.Errorf("reached %q", r.Node)
			}
			return nil
		})
	}
	// The client shares the segment with the nodes: a router that sent it
	// ICMP redirects would shortcut it to the first next hop for minutes,
	// and whether the client took one depended on timing (CI failed once
	// this way: the route had moved to n3, the client still reached n2).
	for _, ns := range []string{e.l.RouterNamespace(), e.l.ClientNamespace()} {
		in, out, err := e.l.ICMPRedirects(ctx, ns)
		if err != nil {
			t.Error(err)
		} else if in != 0 || out != 0 {
			t.Errorf("%s: ICMP redirects received %d, sent %d; want none (the client would bypass the router)", ns, in, out)
		}
	}
	e.setEndpoints(ctx, t, "local")
	for _, p := range []netip.Prefix{v4, v6} {
		if _, err := bgpWaitPrefix(ctx, e.l, p, nil, 30*time.Second); err != nil {
			t.Errorf("without endpoints: %v", err)
		}
	}
}

// dualStackOnAllNodes creates the dual-stack Service name (pool and
// advertisement of the same name must exist) with endpoints on n1–n3 and
// waits until the router has both host prefixes from all three nodes.
func (e *bgpEnv) dualStackOnAllNodes(ctx context.Context, t *testing.T, name string) (v4, v6 netip.Prefix) {
	t.Helper()
	addrs := e.service(ctx, t, name, name, true, false, "n1", "n2", "n3")
	e.failDump(t, addrs...)
	v4, v6 = bgpHostPrefix(addrs[0]), bgpHostPrefix(addrs[1])
	if _, err := bgpWaitPrefix(ctx, e.l, v4, bgpV4Peers(1, 2, 3), time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := bgpWaitPrefix(ctx, e.l, v6, bgpV6Peers(1, 2, 3), time.Minute); err != nil {
		t.Fatal(err)
	}
	return v4, v6
}

// testWithdrawOnDelete proves that deleting the Service withdraws its
// prefixes from every node and family.
func (e *bgpEnv) testWithdrawOnDelete(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e.applyPoolAdv(ctx, t, "del", []string{"203.0.113.112/28", "2001:db8:203::70/124"}, nil)
	v4, v6 := e.dualStackOnAllNodes(ctx, t, "del")
	if err := e.l.Client().CoreV1().Services(bgpNS).Delete(ctx, "del", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []netip.Prefix{v4, v6} {
		if _, err := bgpWaitPrefix(ctx, e.l, p, nil, 30*time.Second); err != nil {
			t.Errorf("after deleting the Service: %v", err)
		}
	}
}

// md5Unsupported probes TCP_MD5SIG (RFC 2385) on a loopback socket and
// returns why it cannot be used here, or "".
func md5Unsupported() string {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err != nil {
		return "socket: " + err.Error()
	}
	defer unix.Close(fd)
	sig := unix.TCPMD5Sig{Keylen: 4}
	sig.Addr.Family = unix.AF_INET
	copy(sig.Addr.Data[2:], []byte{127, 0, 0, 1})
	copy(sig.Key[:], "test")
	if err := unix.SetsockoptTCPMD5Sig(fd, unix.IPPROTO_TCP, unix.TCP_MD5SIG, &sig); err != nil {
		return "setsockopt TCP_MD5SIG: " + err.Error()
	}
	return ""
}

// testMD5 proves TCP-MD5 (RFC 2385): FRR expects key bgpMD5Password from
// n5 (a static neighbor added with vtysh); n5's speaker with that password
// reaches Established, and after the BGPPeer's password is changed to a
// wrong one the session goes down and stays down.
func (e *bgpEnv) testMD5(t *testing.T) {
	if why := md5Unsupported(); why != "" {
		t.Skipf("TCP-MD5 not available on this kernel (%s): blocked by the environment", why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e.failDump(t)
	n5 := lab.NodeAddr(5).String()
	if _, err := e.l.Vtysh(ctx, "configure terminal", fmt.Sprintf("router bgp %d", lab.RouterASN),
		"neighbor "+n5+" remote-as external", "neighbor "+n5+" passive", "neighbor "+n5+" password "+bgpMD5Password,
		"address-family ipv4 unicast", "neighbor "+n5+" activate"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = e.l.Vtysh(context.Background(), "configure terminal", fmt.Sprintf("router bgp %d", lab.RouterASN),
			"no neighbor "+n5)
	})
	peer := e.applyPeer(ctx, t, "md5", lab.RouterAddr, lab.NodeASN, lab.RouterASN, "md5", func(s *v1beta2.BGPPeerSpec) {
		s.Password = bgpMD5Password
	})
	_, err := poll.Wait(ctx, time.Minute, "", func() error {
		got, err := bgpEstablished(ctx, e.l, "ipv4Unicast")
		if err != nil {
			return err
		}
		if _, ok := got[n5]; !ok {
			return fmt.Errorf("n5 not Established with the right password (established: %v)", got)
		}
		return nil
	}, bgpEvery)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(peer), peer); err != nil {
		t.Fatal(err)
	}
	peer.Spec.Password = "wrong-password"
	if err := e.c.Update(ctx, peer); err != nil {
		t.Fatal(err)
	}
	_, err = poll.Wait(ctx, 30*time.Second, "", func() error {
		got, err := bgpEstablished(ctx, e.l, "ipv4Unicast")
		if err != nil {
			return err
		}
		if _, ok := got[n5]; ok {
			return fmt.Errorf("n5 still Established after its password changed")
		}
		return nil
	}, bgpEvery)
	if err != nil {
		t.Fatal(err)
	}
	// It must stay refused: the speaker keeps connecting (every connectTime,
	// 1 s, plus gobgp's jitter) and the router's kernel drops each signed
	// SYN. The router is passive and n5 is the only node with a key, so the
	// router namespace's TCP-MD5 drop counters count n5's SYNs alone. A
	// connect attempt lasts at most 1 s (gobgp's dial timeout, max(connectTime
	// - 1 s, 1 s)), which holds its SYN and at most one retransmission (first
	// RTO 1 s): md5Refusals drops are at least two attempts. With the right
	// password the counters would not move and the session would be
	// Established: both fail this wait.
	const md5Refusals = 4
	rtr := e.l.RouterNamespace()
	base, err := e.l.MD5Refused(ctx, rtr)
	if err != nil {
		t.Fatal(err)
	}
	_, err = poll.Wait(ctx, time.Minute, "", func() error {
		got, err := bgpEstablished(ctx, e.l, "ipv4Unicast")
		if err != nil {
			return err
		}
		if _, ok := got[n5]; ok {
			return poll.Stop(fmt.Errorf("n5 Established with a wrong TCP-MD5 password"))
		}
		n, err := e.l.MD5Refused(ctx, rtr)
		if err != nil {
			return err
		}
		if n-base < md5Refusals {
			return fmt.Errorf("the router dropped %d TCP-MD5 segments since the password changed, want %d", n-base, md5Refusals)
		}
		return nil
	}, bgpEvery)
	if err != nil {
		t.Fatal(err)
	}
	got, err := bgpEstablished(ctx, e.l, "ipv4Unicast")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got[n5]; ok {
		t.Fatal("n5 Established with a wrong TCP-MD5 password")
	}
}

// testGracefulRestart proves graceful restart (RFC 4724): the speaker on n1
// is killed (SIGKILL, no NOTIFICATION) and restarted. FRR keeps n1's path
// of the IPv4 prefix (session ebgp4 negotiated graceful restart) during
// the whole restart, while n1's IPv6 path (ebgp6, no graceful restart) is
// dropped at once — the control that shows the kept path is graceful
// restart's doing. After the restart both paths from n1 are back and not
// stale.
func (e *bgpEnv) testGracefulRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e.applyPoolAdv(ctx, t, "gr", []string{"203.0.113.128/28", "2001:db8:203::80/124"}, nil)
	v4, v6 := e.dualStackOnAllNodes(ctx, t, "gr")
	n1v4 := lab.NodeAddr(1).String()
	if err := e.h.KillSpeaker("n1"); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = e.h.StartSpeaker(context.Background(), "n1")
		}
	})
	// The IPv6 path (no graceful restart) goes at once.
	if _, err := bgpWaitPrefix(ctx, e.l, v6, bgpV6Peers(2, 3), 15*time.Second); err != nil {
		t.Errorf("control: the IPv6 path without graceful restart: %v", err)
	}
	// The IPv4 path stays, stale, while the speaker is down.
	paths, err := bgpFRRPrefix(ctx, e.l, v4)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(paths, func(p bgpFRRPath) bool { return p.Peer.PeerID == n1v4 })
	if i < 0 {
		t.Fatalf("FRR dropped n1's IPv4 path although graceful restart was negotiated; paths from %v", bgpPathPeers(paths))
	}
	if !paths[i].Stale {
		t.Errorf("n1's IPv4 path kept but not marked stale")
	}
	// Restart, watching that the IPv4 path from n1 never disappears.
	stop := make(chan struct{})
	gone := make(chan string, 1)
	go func() {
		for {
			select {
			case <-stop:
				close(gone)
				return
			case <-time.After(100 * time.Millisecond):
			}
			ps, err := bgpFRRPrefix(ctx, e.l, v4)
			if err == nil && !slices.Contains(bgpPathPeers(ps), n1v4) {
				gone <- fmt.Sprintf("n1's IPv4 path vanished during the restart (paths from %v)", bgpPathPeers(ps))
				<-stop
				close(gone)
				return
			}
		}
	}()
	err = e.h.StartSpeaker(ctx, "n1")
	restarted = err == nil
	if err == nil {
		_, err = poll.Wait(ctx, time.Minute, "", func() error {
			ps, err := bgpFRRPrefix(ctx, e.l, v4)
			if err != nil {
				return err
			}
			for _, p := range ps {
				if p.Peer.PeerID == n1v4 && !p.Stale {
					return nil
				}
			}
			return fmt.Errorf("n1's IPv4 path not refreshed (paths from %v)", bgpPathPeers(ps))
		}, bgpEvery)
	}
	close(stop)
	for msg := range gone {
		t.Error(msg)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bgpWaitPrefix(ctx, e.l, v6, bgpV6Peers(1, 2, 3), time.Minute); err != nil {
		t.Errorf("IPv6 after the restart: %v", err)
	}
}

// testShutdownCease proves the speaker's goodbye (RFC 4271 §6.7, RFC 4486):
// the speaker on n1 is stopped as the kubelet stops a Pod (SIGTERM, SIGKILL
// after the DaemonSet's terminationGracePeriodSeconds), while its
// memberlist is joining a peer that accepts the TCP connection and never
// answers (a speaker Pod whose node hung), so the join is in flight for
// the whole TCPTimeout. FRR must see both of n1's sessions closed by a Cease
// NOTIFICATION and hold no path from n1: not the IPv6 one, and not the IPv4
// one either, although that session negotiated graceful restart (a stale
// path would stay for 120 s). Before the fix the speaker closed BGP only
// after the memberlist stop, which waited for the join: the SIGKILL came
// first, FRR saw the TCP connection drop without a NOTIFICATION and kept
// n1's IPv4 path as stale.
func (e *bgpEnv) testShutdownCease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e.applyPoolAdv(ctx, t, "bye", []string{"203.0.113.144/28", "2001:db8:203::90/124"}, nil)
	v4, v6 := e.dualStackOnAllNodes(ctx, t, "bye")
	n1v4, n1v6 := lab.NodeAddr(1).String(), lab.NodeAddrV6(1).String()
	grace := e.h.SpeakerGracePeriod("n1")
	t.Logf("speaker terminationGracePeriodSeconds: %s", grace)

	// FRR logs NOTIFICATIONs with log-neighbor-changes; read its log from here on.
	if out, err := e.l.Vtysh(ctx, "configure terminal", fmt.Sprintf("router bgp %d", lab.RouterASN), "bgp log-neighbor-changes"); err != nil {
		t.Fatalf("vtysh: %v\n%s", err, out)
	}
	bgpd := e.l.Process("frr-bgpd")
	if bgpd == nil {
		t.Fatal("no frr-bgpd lab process")
	}
	logStart := fileSize(t, bgpd.Log)

	// A silent memberlist peer in the router's namespace: it accepts and
	// never answers, so a join to it blocks for TCPTimeout.
	ln, err := lab.ListenIn(e.l.RouterNamespace(), "tcp", netip.AddrPortFrom(lab.RouterAddr, 7946).String())
	if err != nil {
		t.Fatal(err)
	}
	joining := make(chan string, 16)
	var held []net.Conn
	var heldMu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			heldMu.Lock()
			held = append(held, c)
			heldMu.Unlock()
			if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
				select {
				case joining <- ap.Addr().Unmap().String():
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		heldMu.Lock()
		for _, c := range held {
			c.Close()
		}
		heldMu.Unlock()
	})
	ghost := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "herald-speaker-silent", Namespace: lab.HeraldNamespace, Labels: map[string]string{
			"app.kubernetes.io/name": "herald", "app.kubernetes.io/component": "speaker"}},
		Spec: corev1.PodSpec{ServiceAccountName: "herald-speaker", Containers: []corev1.Container{{Name: "speaker", Image: "none"}}},
	}
	if err := e.c.Create(ctx, ghost); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bgpDelete(t, e.c, ghost) })
	ghost.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: lab.RouterAddr.String(),
		PodIPs: []corev1.PodIP{{IP: lab.RouterAddr.String()}}}
	if err := e.c.Status().Update(ctx, ghost); err != nil {
		t.Fatal(err)
	}
	// Wait until n1's speaker is in the middle of that join.
	wait := time.NewTimer(time.Minute)
	defer wait.Stop()
	for from := ""; from != n1v4; {
		select {
		case from = <-joining:
		case <-wait.C:
			t.Fatal("n1's speaker never joined the silent memberlist peer")
		}
	}

	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = e.h.StartSpeaker(context.Background(), "n1")
		}
	})
	if err := e.h.StopSpeaker("n1"); err != nil { // TERM, KILL after grace
		t.Fatal(err)
	}
	for _, p := range []netip.Prefix{v4, v6} {
		peers := bgpV4Peers(2, 3)
		if p.Addr().Is6() {
			peers = bgpV6Peers(2, 3)
		}
		paths, err := bgpWaitPrefix(ctx, e.l, p, peers, 15*time.Second)
		if err != nil {
			for _, path := range paths {
				if path.Stale {
					t.Errorf("FRR kept a stale path of %s from %s", p, path.Peer.PeerID)
				}
			}
			t.Errorf("after n1's speaker stopped: %v", err)
		}
	}
	log := readFrom(t, bgpd.Log, logStart)
	for _, peer := range []string{n1v4, n1v6} {
		// bgpd: "%NOTIFICATION: received from neighbor <peer> 6/3 (Cease/Peer Unconfigured) 0 bytes"
		if !strings.Contains(log, "received from neighbor "+peer+" 6/") {
			t.Errorf("FRR received no Cease NOTIFICATION from %s; its log since the stop:\n%s", peer, log)
		}
	}
	// The silent peer goes away first, so that n1's restart does not hang on it.
	bgpDelete(t, e.c, ghost)
	err = e.h.StartSpeaker(ctx, "n1")
	restarted = err == nil
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bgpWaitPrefix(ctx, e.l, v4, bgpV4Peers(1, 2, 3), time.Minute); err != nil {
		t.Errorf("IPv4 after the restart: %v", err)
	}
}

// fileSize returns the size of the file at path.
func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// readFrom returns the file at path from byte offset off on.
func readFrom(t *testing.T, path string, off int64) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if off > int64(len(b)) {
		off = 0
	}
	return string(b[off:])
}

// ---- helpers, shared with observability_test.go: Herald objects, lab Services,
// and FRR's per-prefix view (`show bgp <afi> unicast <prefix> json`).

// bgpPoolAnnotation asks for a Service's pool by name (MetalLB's key).
const bgpPoolAnnotation = "metallb.io/address-pool"

// bgpFRRPath is one path of one prefix in FRR's detailed JSON.
type bgpFRRPath struct {
	ASPath struct {
		String string `json:"string"`
	} `json:"aspath"`
	Community *struct {
		String string `json:"string"`
	} `json:"community"`
	LargeCommunity *struct {
		String string `json:"string"`
	} `json:"largeCommunity"`
	LocPrf   *int `json:"locPrf"`
	Stale    bool `json:"stale"`
	Valid    bool `json:"valid"`
	Nexthops []struct {
		IP    string `json:"ip"`
		AFI   string `json:"afi"`
		Scope string `json:"scope"`
	} `json:"nexthops"`
	Peer struct {
		PeerID string `json:"peerId"`
		Type   string `json:"type"`
	} `json:"peer"`
}

// globalNextHop returns the path's global next hop (FRR also lists the
// link-local one of IPv6 paths).
func (p bgpFRRPath) globalNextHop() string {
	for _, n := range p.Nexthops {
		if n.Scope == "" || n.Scope == "global" {
			return n.IP
		}
	}
	return ""
}

// bgpFRRPrefix returns FRR's paths for exactly prefix (none when FRR does not
// have it).
func bgpFRRPrefix(ctx context.Context, l *lab.Lab, prefix netip.Prefix) ([]bgpFRRPath, error) {
	afi := "ipv4"
	if prefix.Addr().Is6() {
		afi = "ipv6"
	}
	out, err := l.Vtysh(ctx, fmt.Sprintf("show bgp %s unicast %s json", afi, prefix))
	if err != nil {
		return nil, err
	}
	var r struct {
		Prefix string       `json:"prefix"`
		Paths  []bgpFRRPath `json:"paths"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return nil, fmt.Errorf("parse %s: %w: %s", prefix, err, out)
	}
	// FRR answers a longest-prefix match for a prefix it does not hold.
	if r.Prefix != prefix.String() {
		return nil, nil
	}
	return r.Paths, nil
}

// bgpPathPeers returns the sorted peer IDs (session addresses) of paths.
func bgpPathPeers(paths []bgpFRRPath) []string {
	var ps []string
	for _, p := range paths {
		ps = append(ps, p.Peer.PeerID)
	}
	slices.Sort(ps)
	return ps
}

// bgpWaitPrefix waits until FRR holds prefix from exactly the sessions
// peers (session addresses; none: withdrawn everywhere) and returns the
// paths.
func bgpWaitPrefix(ctx context.Context, l *lab.Lab, prefix netip.Prefix, peers []string, timeout time.Duration) ([]bgpFRRPath, error) {
	want := slices.Clone(peers)
	slices.Sort(want)
	var paths []bgpFRRPath
	_, err := poll.Wait(ctx, timeout, "", func() error {
		var err error
		if paths, err = bgpFRRPrefix(ctx, l, prefix); err != nil {
			return err
		}
		if got := bgpPathPeers(paths); !slices.Equal(got, want) {
			return fmt.Errorf("FRR has %s from %v, want from %v", prefix, got, want)
		}
		return nil
	}, bgpEvery)
	return paths, err
}

// bgpEvery is the interval of the BGP tests' waits: each check runs vtysh
// or a request, so they check every 100 ms (poll.Every), not at the growing
// 1 ms to 50 ms of internal/poll.
var bgpEvery = poll.Every(100 * time.Millisecond)

// bgpHostPrefix returns the host prefix (/32 or /128) of a.
func bgpHostPrefix(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

// bgpV4Peers and bgpV6Peers name the FRR sessions of lab nodes (their addresses).
func bgpV4Peers(nodes ...int) []string {
	var ps []string
	for _, i := range nodes {
		ps = append(ps, lab.NodeAddr(i).String())
	}
	return ps
}

func bgpV6Peers(nodes ...int) []string {
	var ps []string
	for _, i := range nodes {
		ps = append(ps, lab.NodeAddrV6(i).String())
	}
	return ps
}

// bgpEstablished returns FRR's Established sessions of one address family
// ("ipv4Unicast", "ipv6Unicast") with their remote ASN.
func bgpEstablished(ctx context.Context, l *lab.Lab, family string) (map[string]uint32, error) {
	s, err := l.BGPSummary(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]uint32{}
	for addr, p := range s[family].Peers {
		if p.State == "Established" {
			out[addr] = p.RemoteAS
		}
	}
	return out, nil
}

// bgpSvcSpec describes a LoadBalancer Service the tests create.
type bgpSvcSpec struct {
	Namespace, Name, Pool string
	DualStack             bool
	Local                 bool // externalTrafficPolicy Local
	Labels                map[string]string
}

// bgpCreateService creates s (port 80, no node ports), waits until Herald
// gave it its addresses (one per family) and returns them, IPv4 first. The
// Service is deleted at the end of t.
func bgpCreateService(ctx context.Context, t testing.TB, l *lab.Lab, s bgpSvcSpec) []netip.Addr {
	t.Helper()
	if err := l.EnsureNamespace(ctx, s.Namespace); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, Labels: s.Labels,
			Annotations: map[string]string{bgpPoolAnnotation: s.Pool}},
		Spec: corev1.ServiceSpec{
			Type:                          corev1.ServiceTypeLoadBalancer,
			AllocateLoadBalancerNodePorts: ptr.To(false),
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(80),
				Protocol: corev1.ProtocolTCP}},
		},
	}
	want := 1
	if s.DualStack {
		svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
		svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
		want = 2
	}
	if s.Local {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	c := l.Client().CoreV1().Services(s.Namespace)
	if _, err := c.Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create service %s/%s: %v", s.Namespace, s.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete service %s/%s: %v", s.Namespace, s.Name, err)
		}
	})
	var addrs []netip.Addr
	_, err := poll.Wait(ctx, 30*time.Second, "", func() error {
		got, err := c.Get(ctx, s.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		addrs = addrs[:0]
		for _, in := range got.Status.LoadBalancer.Ingress {
			a, err := netip.ParseAddr(in.IP)
			if err != nil {
				return fmt.Errorf("ingress %q: %w", in.IP, err)
			}
			addrs = append(addrs, a)
		}
		if len(addrs) != want {
			return fmt.Errorf("service %s/%s has ingress %v (conditions %v), want %d addresses",
				s.Namespace, s.Name, addrs, got.Status.Conditions, want)
		}
		return nil
	}, bgpEvery)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(addrs, func(a, b netip.Addr) int { return a.BitLen() - b.BitLen() })
	return addrs
}

// bgpApply creates obj, or replaces the spec of the existing object, and
// deletes it at the end of t.
func bgpApply(ctx context.Context, t testing.TB, c client.Client, obj client.Object) {
	t.Helper()
	err := c.Create(ctx, obj)
	if apierrors.IsAlreadyExists(err) {
		cur := obj.DeepCopyObject().(client.Object)
		if err = c.Get(ctx, client.ObjectKeyFromObject(obj), cur); err == nil {
			obj.SetResourceVersion(cur.GetResourceVersion())
			err = c.Update(ctx, obj)
		}
	}
	if err != nil {
		t.Fatalf("apply %T %s: %v", obj, obj.GetName(), err)
	}
	t.Cleanup(func() { bgpDelete(t, c, obj) })
}

// bgpDelete deletes obj, ignoring that it is already gone.
func bgpDelete(t testing.TB, c client.Client, obj client.Object) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete %T %s: %v", obj, obj.GetName(), err)
	}
}

// bgpFRRDump returns what FRR shows (summary and both tables), for
// failure reports.
func bgpFRRDump(ctx context.Context, l *lab.Lab) string {
	var b strings.Builder
	// Short, decisive views first: CI keeps only part of a long log.
	for _, c := range []struct {
		ns   string
		args []string
	}{
		{l.RouterNamespace(), []string{"ip", "route", "show", "proto", "bgp"}},
		{l.RouterNamespace(), []string{"ip", "-6", "route", "show", "proto", "bgp"}},
		{l.ClientNamespace(), []string{"ip", "neigh", "show"}},
	} {
		out, err := l.Exec(ctx, c.ns, c.args...)
		if err != nil {
			out = err.Error()
		}
		fmt.Fprintf(&b, "--- %s: %s\n%s\n", c.ns, strings.Join(c.args, " "), out)
	}
	for _, cmd := range []string{"show bgp summary", "show bgp ipv4 unicast json", "show bgp ipv6 unicast json",
		"show running-config"} {
		out, err := l.Vtysh(ctx, cmd)
		if err != nil {
			out = err.Error()
		}
		fmt.Fprintf(&b, "--- vtysh %s\n%s\n", cmd, out)
	}
	return b.String()
}

// bgpCurlAll curls every address from the client and reports what answered.
func bgpCurlAll(ctx context.Context, l *lab.Lab, addrs []netip.Addr) string {
	var b strings.Builder
	for _, a := range addrs {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		out, err := l.Curl(ctx, a, lab.BackendPort)
		cancel()
		fmt.Fprintf(&b, "--- client curl %s: %q err=%v\n", a, strings.TrimSpace(out), err)
	}
	return b.String()
}

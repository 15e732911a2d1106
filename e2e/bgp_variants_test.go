package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/api/v1alpha1"
	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/e2e/lab"
	"github.com/herald-lb/herald/internal/poll"
)

// The links TestBGPPeerVariants adds between n1 and the router, besides
// the shared segment: a VRF link (IPv6, 2001:db8:fe01::/64).
const (
	variantVRF        = "vrf-red"
	variantVRFTable   = "100"
	variantVRFNode    = "red0"   // n1's end, in VRF vrf-red
	variantVRFRouter  = "red-n1" // the router's end, in its own vrf-red
	variantVRFPrefixN = "2001:db8:fe01::2/64"
	variantVRFPrefixR = "2001:db8:fe01::1/64"
)

var variantVRFRouterAddr = netip.MustParseAddr("2001:db8:fe01::1")

// The two forms of TestBGPPeerVariants/VRF (its subtest names).
const (
	variantFormVRF   = "VRF_device"
	variantFormPlain = "plain_device_standing_in_for_the_VRF"
)

// TestBGPPeerVariants puts BGPPeer's vrf and dualStackAddressFamily on
// the wire against FRR, from one node (n1), and checks that the webhook
// refuses interface (unnumbered), which did not work on the wire:
//
//   - vrf, on a kernel with VRF devices (CONFIG_NET_VRF): n1 has a VRF
//     device vrf-red with a link to the router, whose end is in the
//     router's own VRF vrf-red ("router bgp 64500 vrf vrf-red"); the
//     session is bound to the VRF (SO_BINDTODEVICE on its master device).
//   - vrf, on a kernel without (subtest VRF/plain_device_...): n1's end of
//     the link is a plain device named vrf-red, the router's end is in its
//     default instance, and a more specific route in n1's main table sends
//     the router's link address another way (variantPlainLink). This
//     proves what Herald does with spec.vrf, binding the session to the
//     device of that name, not the VRF's routing table.
//   - interface: refused (see UnnumberedRefused for what the wire showed).
//   - dualStackAddressFamily: the IPv4 session to the router's segment
//     address negotiates IPv6 unicast too but announces no IPv6 prefix.
//
// One dual-stack Service is announced; the test reads what FRR holds in
// each table and with which next hop.
func TestBGPPeerVariants(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up network namespaces, FRR, an API server and Herald")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	l := lab.UpForTest(t, lab.Config{Nodes: 1})
	if err := l.RegisterNodes(ctx, map[string]map[string]string{"n1": {bgpRoleLabel: "variants"}}); err != nil {
		t.Fatal(err)
	}
	n1, _ := l.Node("n1")
	rtr := l.RouterNamespace()
	vrfErr := variantVRFLink(ctx, l, n1.Namespace, rtr)
	if vrfErr != nil && !strings.Contains(vrfErr.Error(), "Unknown device type") {
		t.Fatal(vrfErr)
	}
	// frrVRF is the router's VRF holding the session: its own vrf-red, or
	// the default one opposite the plain stand-in.
	form, frrVRF := variantFormVRF, variantVRF
	if vrfErr != nil {
		form, frrVRF = variantFormPlain, "default"
		t.Logf("this kernel has no VRF devices (CONFIG_NET_VRF: %v): spec.vrf runs on a plain device standing in for the VRF: proves the session binding, not the VRF's routing table", vrfErr)
		if err := variantPlainLink(ctx, l, n1.Namespace, rtr, n1.IPv6); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Logf("spec.vrf runs on a VRF device (%s, table %s) on n1 and in the router", variantVRF, variantVRFTable)
	}
	h, err := l.InstallHerald(ctx, lab.InstallOptions{})
	if h != nil {
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("speaker and controller logs:\n%s", h.Logs(80))
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
			for _, c := range []string{"show bgp vrf " + frrVRF + " summary", "show bgp vrf " + frrVRF + " ipv6 unicast"} {
				out, _ := l.Vtysh(ctx, c)
				t.Logf("%s:\n%s", c, out)
			}
			for _, ns := range []string{n1.Namespace, rtr} {
				out, _ := l.Exec(ctx, ns, "ip", "-6", "neigh", "show")
				t.Logf("%s neighbours:\n%s", ns, out)
				out, _ = l.Exec(ctx, ns, "ip", "-6", "route", "show", "table", "all")
				t.Logf("%s IPv6 routes:\n%s", ns, out)
			}
		}
	})
	nodeVRF := netip.MustParsePrefix(variantVRFPrefixN).Addr()
	routerBGP := "router bgp " + fmt.Sprint(lab.RouterASN)
	if vrfErr == nil {
		routerBGP += " vrf " + variantVRF
	}
	frrConf := []string{"configure terminal", routerBGP}
	if vrfErr == nil {
		// The default instance already has these.
		frrConf = append(frrConf, "bgp router-id "+lab.RouterAddr.String(), "no bgp ebgp-requires-policy", "no bgp default ipv4-unicast")
	}
	frrConf = append(frrConf,
		"neighbor "+nodeVRF.String()+" remote-as "+fmt.Sprint(lab.NodeASN),
		"address-family ipv6 unicast",
		"neighbor "+nodeVRF.String()+" activate",
		"exit-address-family",
	)
	if _, err := l.Vtysh(ctx, frrConf...); err != nil {
		t.Fatal(err)
	}
	if err := l.EnsureNamespace(ctx, bgpNS); err != nil {
		t.Fatal(err)
	}
	wantPeers := []string{"dual", "in-vrf"}
	e.applyPeer(ctx, t, "in-vrf", variantVRFRouterAddr, lab.NodeASN, lab.RouterASN, "variants", func(s *v1beta2.BGPPeerSpec) {
		s.VRF = variantVRF
	})
	e.applyPeer(ctx, t, "dual", lab.RouterAddr, lab.NodeASN, lab.RouterASN, "variants", func(s *v1beta2.BGPPeerSpec) {
		s.DualStackAddressFamily = true
	})
	e.applyPoolAdv(ctx, t, "variants", []string{"203.0.113.224/28", "2001:db8:203::e0/124"}, func(s *v1beta1.BGPAdvertisementSpec) {})
	addrs := e.service(ctx, t, "variants", "variants", true, false, "n1")
	v4, v6 := bgpHostPrefix(addrs[0]), bgpHostPrefix(addrs[1])
	t.Logf("Service addresses %s and %s", v4, v6)

	t.Run("VRF", func(t *testing.T) {
		t.Run(form, func(t *testing.T) {
			variantTestVRF(ctx, t, e, frrVRF, nodeVRF, v4, v6)
		})
	})
	// On the wire (a point-to-point veth to FRR, FRR naming n1's
	// link-local address on it and sending Router Advertisements) the
	// unnumbered session came up once the speaker resolved the neighbor
	// itself (gobgp's AddPeer failed before: "NeighborAddress is not
	// configured"), but gobgp announced both families with next hop "::"
	// and FRR accepted none of the paths ("0 accepted prefixes"). The
	// webhook refuses such a peer.
	t.Run("UnnumberedRefused", func(t *testing.T) {
		p := &v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "unnumbered", Namespace: lab.HeraldNamespace},
			Spec: v1beta2.BGPPeerSpec{MyASN: lab.NodeASN, PeerASN: lab.RouterASN, Interface: "eth0"}}
		err := e.c.Create(ctx, p)
		if err == nil {
			bgpDelete(t, e.c, p)
			t.Fatal("webhook admitted an unnumbered BGPPeer")
		}
		if !strings.Contains(err.Error(), `spec.interface "eth0": unnumbered BGP is not supported by Herald's BGP backend`) {
			t.Errorf("refusal %v does not name the field and the reason", err)
		}
	})
	// Before, the IPv6 prefix went over the IPv4 session with the next hop
	// ::ffff:198.51.100.11 (IPv4-mapped): FRR held it as valid, installed
	// no kernel route, and the client got "network is unreachable".
	t.Run("DualStackOverIPv4", func(t *testing.T) {
		if _, err := variantWait(ctx, func() ([]bgpFRRPath, error) {
			ps, err := bgpFRRPrefix(ctx, l, v4)
			return variantFrom(ps, n1.IPv4.String()), err
		}); err != nil {
			t.Fatal(err)
		}
		// The session negotiates IPv6 unicast too, and carries no IPv6 path.
		sum, err := l.BGPSummary(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := sum["ipv6Unicast"].Peers[n1.IPv4.String()]; !ok || p.State != "Established" {
			t.Errorf("IPv6 unicast not negotiated on the IPv4 session: %+v", sum["ipv6Unicast"].Peers)
		}
		ps, err := bgpFRRPrefix(ctx, l, v6)
		if err != nil {
			t.Fatal(err)
		}
		if got := variantFrom(ps, n1.IPv4.String()); len(got) != 0 {
			t.Errorf("IPv6 path of %s over the IPv4 session: next hops %+v", v6, got[0].Nexthops)
		}
	})
	t.Run("ServiceBGPStatus", func(t *testing.T) {
		st, err := h.BGPStatuses(ctx, bgpNS, "variants")
		if err != nil || len(st) != 1 {
			t.Fatalf("ServiceBGPStatuses %v, %v", st, err)
		}
		got := slices.Clone(st[0].Status.Peers)
		slices.Sort(got)
		if want := wantPeers; !slices.Equal(got, want) {
			t.Errorf("ServiceBGPStatus peers %v, want %v", got, want)
		}
	})
}

// variantVRFLink adds the VRF devices and the VRF link between the node
// namespace and the router namespace (never the root namespace: each veth
// is created in the node's namespace with its peer end placed in the
// router's). They go away with the namespaces.
func variantVRFLink(ctx context.Context, l *lab.Lab, node, rtr string) error {
	return variantIP(ctx, l, []variantCmd{
		{node, "link add " + variantVRF + " type vrf table " + variantVRFTable},
		{node, "link set " + variantVRF + " up"},
		{node, "link add name " + variantVRFNode + " type veth peer name " + variantVRFRouter + " netns " + rtr},
		{node, "link set " + variantVRFNode + " master " + variantVRF},
		{node, "addr add " + variantVRFPrefixN + " dev " + variantVRFNode + " nodad"},
		{node, "link set " + variantVRFNode + " up"},
		{rtr, "link add " + variantVRF + " type vrf table " + variantVRFTable},
		{rtr, "link set " + variantVRF + " up"},
		{rtr, "link set " + variantVRFRouter + " master " + variantVRF},
		{rtr, "addr add " + variantVRFPrefixR + " dev " + variantVRFRouter + " nodad"},
		{rtr, "link set " + variantVRFRouter + " up"},
	})
}

// variantPlainLink stands in for variantVRFLink on a kernel without VRF
// devices: n1's end of the link is a plain veth named like the VRF
// (vrf-red, 2001:db8:fe01::2/64), the router's end (red-n1,
// 2001:db8:fe01::1/64) is in its default namespace table. A /128 route in
// n1's main table sends the router's link address the other way, over eth0
// (the shared segment) via the router's segment address from nodeV6, n1's
// segment address. An unbound socket follows it: FRR sees the connection
// come from nodeV6 (a dynamic neighbor of its listen range), the configured
// neighbor 2001:db8:fe01::2 stays down and the path's next hop is nodeV6.
// A socket bound to vrf-red (SO_BINDTODEVICE) has its IPv6 route lookup
// restricted to that device (RT6_LOOKUP_F_IFACE: routes through other
// devices are skipped, the lookup backtracks to vrf-red's /64) and its
// source address taken from it. The routes go with the namespaces.
func variantPlainLink(ctx context.Context, l *lab.Lab, node, rtr string, nodeV6 netip.Addr) error {
	routerAddr := variantVRFRouterAddr.String()
	err := variantIP(ctx, l, []variantCmd{
		{node, "link add name " + variantVRF + " type veth peer name " + variantVRFRouter + " netns " + rtr},
		{node, "addr add " + variantVRFPrefixN + " dev " + variantVRF + " nodad"},
		{node, "link set " + variantVRF + " up"},
		{rtr, "addr add " + variantVRFPrefixR + " dev " + variantVRFRouter + " nodad"},
		{rtr, "link set " + variantVRFRouter + " up"},
		{node, "-6 route add " + routerAddr + "/128 via " + lab.RouterAddrV6.String() + " dev eth0 src " + nodeV6.String()},
	})
	if err != nil {
		return err
	}
	// What the kernel chooses, unbound and bound to the device (ip route
	// get with oif and no source is a strict-interface lookup, as for a
	// bound socket).
	for _, c := range []struct{ args, want string }{
		{"", "dev eth0 src " + nodeV6.String()},
		{" oif " + variantVRF, "dev " + variantVRF + " "},
	} {
		out, err := l.Exec(ctx, node, append([]string{"ip", "-6", "route", "get", routerAddr}, strings.Fields(c.args)...)...)
		if err != nil {
			return err
		}
		if !strings.Contains(out, c.want) {
			return fmt.Errorf("ip -6 route get %s%s in %s: %q, want %q", routerAddr, c.args, node, out, c.want)
		}
		if c.args != "" && !strings.Contains(out, "src "+netip.MustParsePrefix(variantVRFPrefixN).Addr().String()) {
			return fmt.Errorf("ip -6 route get %s%s in %s: %q, want the source %s", routerAddr, c.args, node, out, variantVRFPrefixN)
		}
	}
	return nil
}

// variantTestVRF checks the in-vrf session (BGPPeer in-vrf, vrf vrf-red)
// from the router's VRF frrVRF ("default" opposite the plain stand-in):
// FRR's configured neighbor nodeVRF (n1's address on the link) is
// Established, FRR holds the Service's IPv6 prefix v6 from it with next
// hop nodeVRF, not the IPv4 one v4, and the BGPSessionState says
// Established in vrf-red.
func variantTestVRF(ctx context.Context, t *testing.T, e *bgpEnv, frrVRF string, nodeVRF netip.Addr, v4, v6 netip.Prefix) {
	t.Helper()
	l := e.l
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := l.Kubectl(context.Background(), "get", "bgpsessionstates.herald.io", "-A", "-o", "wide")
			t.Logf("kubectl get bgpsessionstates.herald.io -A -o wide:\n%s", out)
		}
	})
	_, err := poll.Wait(ctx, time.Minute, "", func() error {
		out, err := l.Vtysh(ctx, "show bgp vrf "+frrVRF+" ipv6 unicast summary json")
		if err != nil {
			return err
		}
		var sum struct {
			Peers map[string]lab.BGPPeer `json:"peers"`
		}
		if err := json.Unmarshal([]byte(out), &sum); err != nil {
			return fmt.Errorf("parse: %w: %s", err, out)
		}
		if p, ok := sum.Peers[nodeVRF.String()]; !ok || p.State != "Established" {
			return fmt.Errorf("FRR's neighbor %s (VRF %s) is %+v, want Established; neighbors %+v", nodeVRF, frrVRF, p, sum.Peers)
		}
		return nil
	}, bgpEvery)
	if err != nil {
		t.Fatal(err)
	}
	paths, err := variantWait(ctx, func() ([]bgpFRRPath, error) {
		ps, err := variantPrefix(ctx, l, frrVRF, v6)
		return variantFrom(ps, nodeVRF.String()), err
	})
	if err != nil {
		t.Fatalf("%s from %s in FRR's VRF %s: %v", v6, nodeVRF, frrVRF, err)
	}
	if got := paths[0].globalNextHop(); got != nodeVRF.String() || !paths[0].Valid {
		t.Errorf("path of %s from %s: next hop %s valid %v, want %s (n1's address on the link)", v6, nodeVRF, got, paths[0].Valid, nodeVRF)
	}
	// The session is IPv6 without dualStackAddressFamily.
	if p, err := variantPrefix(ctx, l, frrVRF, v4); err != nil || len(variantFrom(p, nodeVRF.String())) != 0 {
		t.Errorf("%s from %s in FRR's VRF %s (%d paths, %v); the session does not carry IPv4", v4, nodeVRF, frrVRF, len(p), err)
	}
	e.waitSessionStates(ctx, t, "in-vrf", []string{"n1"}, "BGPSessionState of in-vrf", func(st v1alpha1.BGPSessionStateStatus) error {
		if st.BGPStatus != "Established" || st.VRF != variantVRF || st.Peer != variantVRFRouterAddr.String() {
			return fmt.Errorf("want Established, vrf %q, peer %s", variantVRF, variantVRFRouterAddr)
		}
		return nil
	})
}

// variantCmd is one `ip` command line run in namespace ns.
type variantCmd struct{ ns, args string }

func variantIP(ctx context.Context, l *lab.Lab, cmds []variantCmd) error {
	for _, c := range cmds {
		if _, err := l.Exec(ctx, c.ns, append([]string{"ip"}, strings.Fields(c.args)...)...); err != nil {
			return err
		}
	}
	return nil
}

// variantPrefix returns FRR's paths for exactly prefix in a VRF's table.
func variantPrefix(ctx context.Context, l *lab.Lab, vrf string, prefix netip.Prefix) ([]bgpFRRPath, error) {
	afi := "ipv4"
	if prefix.Addr().Is6() {
		afi = "ipv6"
	}
	out, err := l.Vtysh(ctx, fmt.Sprintf("show bgp vrf %s %s unicast %s json", vrf, afi, prefix))
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
	if r.Prefix != prefix.String() {
		return nil, nil
	}
	return r.Paths, nil
}

// variantFrom keeps the paths learned from the session peer (FRR's peerId:
// the session's address).
func variantFrom(paths []bgpFRRPath, peer string) []bgpFRRPath {
	var out []bgpFRRPath
	for _, p := range paths {
		if p.Peer.PeerID == peer {
			out = append(out, p)
		}
	}
	return out
}

// variantWait waits up to a minute until get returns at least one path.
func variantWait(ctx context.Context, get func() ([]bgpFRRPath, error)) ([]bgpFRRPath, error) {
	var paths []bgpFRRPath
	_, err := poll.Wait(ctx, time.Minute, "", func() error {
		var err error
		if paths, err = get(); err != nil {
			return err
		}
		if len(paths) == 0 {
			return fmt.Errorf("no path yet")
		}
		return nil
	}, bgpEvery)
	return paths, err
}

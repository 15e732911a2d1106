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

// TestBGPPeerVariants puts BGPPeer's vrf and dualStackAddressFamily on
// the wire against FRR, from one node (n1), and checks that the webhook
// refuses interface (unnumbered), which did not work on the wire:
//
//   - vrf: n1 has a VRF device vrf-red with a link to the router, whose
//     end is in the router's own VRF vrf-red ("router bgp 64500 vrf
//     vrf-red"); the session is bound to the VRF (SO_BINDTODEVICE).
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
			for _, c := range []string{"show bgp vrf " + variantVRF + " summary", "show bgp vrf " + variantVRF + " ipv6 unicast",
				"show bgp ipv6 unicast"} {
				out, _ := l.Vtysh(ctx, c)
				t.Logf("%s:\n%s", c, out)
			}
			for _, ns := range []string{n1.Namespace, rtr} {
				out, _ := l.Exec(ctx, ns, "ip", "-6", "neigh", "show")
				t.Logf("%s neighbours:\n%s", ns, out)
			}
		}
	})
	nodeVRF := netip.MustParsePrefix(variantVRFPrefixN).Addr()
	if vrfErr == nil {
		if _, err := l.Vtysh(ctx, "configure terminal",
			"router bgp "+fmt.Sprint(lab.RouterASN)+" vrf "+variantVRF,
			"bgp router-id "+lab.RouterAddr.String(),
			"no bgp ebgp-requires-policy",
			"no bgp default ipv4-unicast",
			"neighbor "+nodeVRF.String()+" remote-as "+fmt.Sprint(lab.NodeASN),
			"address-family ipv6 unicast",
			"neighbor "+nodeVRF.String()+" activate",
			"exit-address-family",
		); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.EnsureNamespace(ctx, bgpNS); err != nil {
		t.Fatal(err)
	}
	wantPeers := []string{"dual"}
	if vrfErr == nil {
		e.applyPeer(ctx, t, "in-vrf", variantVRFRouterAddr, lab.NodeASN, lab.RouterASN, "variants", func(s *v1beta2.BGPPeerSpec) {
			s.VRF = variantVRF
		})
		wantPeers = []string{"dual", "in-vrf"}
	}
	e.applyPeer(ctx, t, "dual", lab.RouterAddr, lab.NodeASN, lab.RouterASN, "variants", func(s *v1beta2.BGPPeerSpec) {
		s.DualStackAddressFamily = true
	})
	e.applyPoolAdv(ctx, t, "variants", []string{"203.0.113.224/28", "2001:db8:203::e0/124"}, func(s *v1beta1.BGPAdvertisementSpec) {})
	addrs := e.service(ctx, t, "variants", "variants", true, false, "n1")
	v4, v6 := bgpHostPrefix(addrs[0]), bgpHostPrefix(addrs[1])
	t.Logf("Service addresses %s and %s", v4, v6)

	t.Run("VRF", func(t *testing.T) {
		if vrfErr != nil {
			t.Skipf("this kernel has no VRF devices (CONFIG_NET_VRF): %v", vrfErr)
		}
		paths, err := variantWait(ctx, func() ([]bgpFRRPath, error) { return variantPrefix(ctx, l, variantVRF, v6) })
		if err != nil {
			t.Fatal(err)
		}
		if got := paths[0].globalNextHop(); got != nodeVRF.String() || !paths[0].Valid {
			t.Errorf("VRF path of %s: next hop %s valid %v, want %s (n1's address in the VRF)", v6, got, paths[0].Valid, nodeVRF)
		}
		// The VRF session is IPv6 without dualStackAddressFamily.
		if p, err := variantPrefix(ctx, l, variantVRF, v4); err != nil || len(p) != 0 {
			t.Errorf("VRF table has %s (%d paths, %v); the session does not carry IPv4", v4, len(p), err)
		}
		// Not leaked into the default VRF through the VRF session.
		out, _ := l.Vtysh(ctx, "show bgp vrf "+variantVRF+" summary json")
		if !strings.Contains(out, nodeVRF.String()) {
			t.Errorf("VRF summary lacks %s: %s", nodeVRF, out)
		}
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

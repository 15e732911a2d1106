package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/herald-lb/herald/internal/poll"
)

// FRR paths: one instance per lab, with its own path space ("-N <name>").
const (
	frrBin     = "/usr/lib/frr"
	frrEtc     = "/etc/frr"
	frrRun     = "/var/run/frr"
	frrVtysh   = "vtysh"
	frrMaxECMP = 8
)

// RouterNamespace returns the router's namespace, which is also its FRR
// instance name (vtysh -N <name>).
func (l *Lab) RouterNamespace() string { return nsName(l.cfg.Prefix, "rtr") }

// frrConfig is the router's configuration: eBGP with every node through
// dynamic neighbors (listen ranges), IPv4 and IPv6 unicast, ECMP across
// nodes (RFC 4271 decision process with FRR's multipath relax for peers in
// different ASNs). Weighted ECMP: when every multipath of a prefix carries
// the link bandwidth extended community (RFC 10005; Herald's
// herald.io/weighted-ecmp), bgpd weighs the next hops by it and zebra
// installs the weights as kernel next-hop weights. That is FRR's default
// `bgp bestpath bandwidth` handling (seen with the lab's FRR 8.4), which has no
// keyword of its own (the others are ignore, skip-missing and
// default-weight-for-missing), so the configuration does not name it.
func (l *Lab) frrConfig() string {
	var b strings.Builder
	fmt.Fprintf(&b, `frr defaults traditional
hostname %s
log stdout informational
!
router bgp %d
 bgp router-id %s
 no bgp ebgp-requires-policy
 no bgp default ipv4-unicast
 bgp bestpath as-path multipath-relax
 neighbor NODES peer-group
 neighbor NODES remote-as external
 neighbor NODES6 peer-group
 neighbor NODES6 remote-as external
 bgp listen range %s peer-group NODES
 bgp listen range %s peer-group NODES6
 bgp listen limit 200
`, l.RouterNamespace(), RouterASN, RouterAddr, Segment, SegmentV6)
	for _, af := range []string{"ipv4", "ipv6"} {
		fmt.Fprintf(&b, ` address-family %s unicast
  neighbor NODES activate
  neighbor NODES6 activate
  maximum-paths %d
 exit-address-family
`, af, frrMaxECMP)
	}
	b.WriteString("!\n")
	return b.String()
}

// startFRR writes the router's configuration and starts its zebra and bgpd.
func (l *Lab) startFRR(ctx context.Context) error {
	return l.startFRRInstance(ctx, l.RouterNamespace(), l.frrConfig())
}

// StartNodeFRR runs an FRR instance (zebra + bgpd, "-N <node namespace>")
// inside node's namespace with the given frr.conf body, e.g. a reference
// BGP speaker that peers with the router. Its processes are lab processes
// "frr-zebra-<node>" and "frr-bgpd-<node>"; Down removes them and its
// directories. Query it with vtysh -N <node namespace>.
func (l *Lab) StartNodeFRR(ctx context.Context, node, frrConf string) error {
	n, ok := l.Node(node)
	if !ok {
		return fmt.Errorf("start frr: no lab node %q", node)
	}
	return l.startFRRInstance(ctx, n.Namespace, frrConf)
}

// startFRRInstance runs zebra and bgpd in network namespace ns with FRR
// path space ns (/etc/frr/<ns>, /var/run/frr/<ns>), in the foreground
// (logs in StateDir), and waits until vtysh answers.
func (l *Lab) startFRRInstance(ctx context.Context, ns, frrConf string) error {
	etc, vrun := filepath.Join(frrEtc, ns), filepath.Join(frrRun, ns)
	l.mu.Lock()
	l.st.Dirs = append(l.st.Dirs, etc, vrun)
	err := l.st.save()
	l.mu.Unlock()
	if err != nil {
		return err
	}
	u, err := user.Lookup("frr")
	if err != nil {
		return fmt.Errorf("frr: user frr (is FRR installed? run hack/install-deps.sh): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	// The router also runs bfdd (BFD, RFC 5880), idle until a test
	// configures "bfd" and "neighbor ... bfd" through Vtysh.
	daemons := []string{"zebra", "bgpd"}
	if ns == l.RouterNamespace() {
		daemons = append(daemons, "bfdd")
	}
	files := map[string]string{
		"frr.conf":   frrConf,
		"zebra.conf": "hostname " + ns + "\nlog stdout informational\n",
		"bfdd.conf":  "hostname " + ns + "\nlog stdout informational\n",
		"daemons":    strings.Join(daemons, "=yes\n") + "=yes\n",
		"vtysh.conf": "service integrated-vtysh-config\n",
	}
	for _, d := range []string{etc, vrun} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("frr: %w", err)
		}
		if err := os.Chown(d, uid, gid); err != nil {
			return fmt.Errorf("frr: %w", err)
		}
	}
	for name, body := range files {
		p := filepath.Join(etc, name)
		if err := os.WriteFile(p, []byte(body), 0o640); err != nil {
			return fmt.Errorf("frr: %w", err)
		}
		if err := os.Chown(p, uid, gid); err != nil {
			return fmt.Errorf("frr: %w", err)
		}
	}
	suffix := ""
	if ns != l.RouterNamespace() {
		suffix = "-" + strings.TrimPrefix(ns, l.cfg.Prefix+"-")
	}
	for _, d := range daemons {
		conf := "frr.conf"
		if d != "bgpd" {
			conf = d + ".conf" // zebra and bfdd would log every bgp line of frr.conf as unknown
		}
		args := []string{filepath.Join(frrBin, d), "-N", ns, "-f", filepath.Join(etc, conf),
			"-i", filepath.Join(vrun, d+".pid"), "-P", "0", "-u", "frr", "-g", "frr"}
		if _, err := l.Start(ns, "frr-"+d+suffix, args, nil); err != nil {
			return fmt.Errorf("frr: %w", err)
		}
	}
	_, err = poll.Wait(ctx, 15*time.Second, "", func() error {
		for _, d := range daemons {
			if p := l.Process("frr-" + d + suffix); p != nil && !p.Alive() {
				return poll.Stop(fmt.Errorf("frr: %s in %s exited, see %s", d, ns, p.Log))
			}
		}
		_, err := run(ctx, "", frrVtysh, "-N", ns, "-c", "show bgp summary json")
		return err
	}, labEvery)
	return err
}

// Vtysh runs vtysh commands against the router ("-c" each, in order), e.g.
// Vtysh(ctx, "configure terminal", "router bgp 64500", "neighbor ... password x").
func (l *Lab) Vtysh(ctx context.Context, cmds ...string) (string, error) {
	args := []string{frrVtysh, "-N", l.RouterNamespace()}
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	return run(ctx, "", args...)
}

// BGPPeer is one neighbor in `show bgp summary json`.
type BGPPeer struct {
	RemoteAS     uint32 `json:"remoteAs"`
	State        string `json:"state"` // "Established", "Active", ...
	PfxRcd       int    `json:"pfxRcd"`
	PfxSnt       int    `json:"pfxSnt"`
	PeerUptimeMs int64  `json:"peerUptimeMsec"`
	DynamicPeer  bool   `json:"dynamicPeer"`
	IDType       string `json:"idType"`
}

// BGPSummary maps address family ("ipv4Unicast", "ipv6Unicast") to the
// router's neighbors by address.
type BGPSummary map[string]struct {
	RouterID string             `json:"routerId"`
	AS       uint32             `json:"as"`
	Peers    map[string]BGPPeer `json:"peers"`
}

// BGPSummary returns the router's `show bgp summary json`.
func (l *Lab) BGPSummary(ctx context.Context) (BGPSummary, error) {
	out, err := l.Vtysh(ctx, "show bgp summary json")
	if err != nil {
		return nil, err
	}
	var s BGPSummary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		return nil, fmt.Errorf("parse bgp summary: %w", err)
	}
	return s, nil
}

// BGPPath is one path of a prefix in `show bgp <afi> unicast json`.
type BGPPath struct {
	Valid     bool   `json:"valid"`
	Best      bool   `json:"bestpath"`
	Multipath bool   `json:"multipath"`
	PeerID    string `json:"peerId"`
	ASPath    string `json:"path"`
	LocalPref *int   `json:"locPrf"`
	Metric    *int   `json:"metric"`
	NextHops  []struct {
		IP   string `json:"ip"`
		AFI  string `json:"afi"`
		Used bool   `json:"used"`
	} `json:"nexthops"`
}

// BGPRoutes returns the router's BGP table for family "ipv4" or "ipv6":
// prefix ("203.0.113.5/32") to its paths. For communities and other
// attributes of one prefix use Vtysh(ctx, "show bgp ipv4 unicast <prefix> json").
func (l *Lab) BGPRoutes(ctx context.Context, family string) (map[string][]BGPPath, error) {
	out, err := l.Vtysh(ctx, "show bgp "+family+" unicast json")
	if err != nil {
		return nil, err
	}
	var t struct {
		Routes map[string][]BGPPath `json:"routes"`
	}
	if err := json.Unmarshal([]byte(out), &t); err != nil {
		return nil, fmt.Errorf("parse bgp %s routes: %w", family, err)
	}
	return t.Routes, nil
}

// KernelRoutes returns the router namespace's kernel routes for family
// "-4" or "-6" (`ip route show`), which shows what zebra installed (ECMP
// routes list several "nexthop via" lines).
func (l *Lab) KernelRoutes(ctx context.Context, family string) (string, error) {
	return run(ctx, l.RouterNamespace(), "ip", family, "route", "show")
}

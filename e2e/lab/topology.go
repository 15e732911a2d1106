package lab

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"golang.org/x/sync/errgroup"
)

// Node is one lab node: a network namespace playing a Kubernetes node.
type Node struct {
	// Name is the Kubernetes Node name ("n1").
	Name string
	// Namespace is the network namespace ("<prefix>-n1").
	Namespace string
	// IPv4 and IPv6 are the addresses on eth0 (the node's InternalIPs).
	IPv4, IPv6 netip.Addr
	// MAC is eth0's hardware address, 02:00:c6:33:64:<last IPv4 octet>.
	MAC net.HardwareAddr
}

// member is one namespace attached to the switch.
type member struct {
	role    string // "ctl", "rtr", "cl", "n1", ...
	ns      string
	v4, v6  netip.Addr
	sysctls []string
	routes  [][]string // extra `ip` argument lists, run in ns
}

// labMAC derives a stable, locally administered MAC from a segment address.
func labMAC(a netip.Addr) net.HardwareAddr {
	b := a.As4()
	return net.HardwareAddr{0x02, 0x00, b[0], b[1], b[2], b[3]}
}

func nsName(prefix, role string) string { return prefix + "-" + role }

// isLabNamespace reports whether name is one of the namespaces a lab with
// prefix creates: <prefix>-{sw,ctl,rtr,cl,n<digits>}.
func isLabNamespace(prefix, name string) bool {
	role, ok := strings.CutPrefix(name, prefix+"-")
	if !ok {
		return false
	}
	switch role {
	case "sw", "ctl", "rtr", "cl":
		return true
	}
	if n, ok := strings.CutPrefix(role, "n"); ok {
		_, err := strconv.Atoi(n)
		return err == nil
	}
	return false
}

var (
	commonSysctls = []string{
		"net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0",
		"net.ipv6.conf.all.accept_ra=0", "net.ipv6.conf.default.accept_ra=0",
	}
	// Nodes accept the Service ranges as local routes; the kernel must not
	// answer ARP for them (that is the speaker's job): arp_ignore=1 answers
	// only for addresses configured on the receiving interface, and
	// arp_announce=2 keeps Service addresses out of the node's own ARP requests.
	nodeSysctls = []string{
		"net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.default.arp_ignore=1",
		"net.ipv4.conf.all.arp_announce=2", "net.ipv4.conf.default.arp_announce=2",
	}
	// The router forwards, and spreads ECMP flows by layer 4 hash (policy 1)
	// so that one client's connections reach several nodes. The client
	// shares the segment with the nodes, so a forwarding router would send
	// it ICMP redirects (RFC 792; RFC 4861 §8 for IPv6) to the node that is
	// the next hop, and the client would cache that shortcut for minutes
	// (Linux keeps a redirect exception ip_rt_gc_timeout, 300 s): a route
	// moved to another node would stay invisible to the client. Routers
	// in front of a Service range do not redirect in practice; the lab's
	// neither sends nor accepts redirects.
	routerSysctls = []string{"net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1",
		"net.ipv4.fib_multipath_hash_policy=1", "net.ipv6.fib_multipath_hash_policy=1",
		"net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf.default.send_redirects=0"}
	clientSysctls = []string{
		"net.ipv4.conf.all.accept_redirects=0", "net.ipv4.conf.default.accept_redirects=0",
		"net.ipv6.conf.all.accept_redirects=0", "net.ipv6.conf.default.accept_redirects=0",
	}
)

func (l *Lab) members() []member {
	p := l.cfg.Prefix
	ms := []member{
		{role: "ctl", ns: nsName(p, "ctl"), v4: APIServerAddr, v6: netip.MustParseAddr("2001:db8:100::254")},
		{role: "rtr", ns: nsName(p, "rtr"), v4: RouterAddr, v6: RouterAddrV6, sysctls: routerSysctls},
		{role: "cl", ns: nsName(p, "cl"), v4: ClientAddr, v6: ClientAddrV6, sysctls: clientSysctls, routes: [][]string{
			{"route", "add", BGPPrefixV4.String(), "via", RouterAddr.String()},
			{"route", "add", BGPPrefixV6.String(), "via", RouterAddrV6.String()},
		}},
	}
	for _, n := range l.Nodes {
		m := member{role: strings.TrimPrefix(n.Namespace, p+"-"), ns: n.Namespace, v4: n.IPv4, v6: n.IPv6, sysctls: nodeSysctls}
		// Lab scaffolding (plays kube-proxy): the node accepts traffic for
		// every Service range as local, so its backend answers for them.
		for _, pfx := range ServiceLocalPrefixes() {
			m.routes = append(m.routes, []string{"route", "add", "local", pfx.String(), "dev", "lo", "table", "local"})
		}
		ms = append(ms, m)
	}
	return ms
}

// buildTopology creates the switch and every member namespace. Namespace
// names are recorded in state.json before they are created.
func (l *Lab) buildTopology(ctx context.Context) error {
	sw := nsName(l.cfg.Prefix, "sw")
	ms := l.members()
	l.mu.Lock()
	l.st.Namespaces = append(l.st.Namespaces, sw)
	for _, m := range ms {
		l.st.Namespaces = append(l.st.Namespaces, m.ns)
	}
	err := l.st.save()
	l.mu.Unlock()
	if err != nil {
		return err
	}
	ipc := func(args ...string) error { _, err := run(ctx, "", args...); return err }
	if err := ipc("ip", "netns", "add", sw); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"ip", "-n", sw, "link", "set", "lo", "up"},
		{"ip", "-n", sw, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", sw, "link", "set", "br0", "up"},
	} {
		if err := ipc(args...); err != nil {
			return err
		}
	}
	// Members are independent of each other: set them up in parallel.
	g, gctx := errgroup.WithContext(ctx)
	for _, m := range ms {
		g.Go(func() error { return l.addMember(gctx, sw, m) })
	}
	return g.Wait()
}

func (l *Lab) addMember(ctx context.Context, sw string, m member) error {
	if _, err := run(ctx, "", "ip", "netns", "add", m.ns); err != nil {
		return err
	}
	if err := setSysctls(m.ns, append(append([]string{}, commonSysctls...), m.sysctls...)); err != nil {
		return err
	}
	// The veth is created with its ends already in place, so its names
	// never meet the root namespace's.
	if _, err := run(ctx, "", "ip", "link", "add", "name", "v-"+m.role, "netns", sw, "type", "veth",
		"peer", "name", "eth0", "address", labMAC(m.v4).String(), "netns", m.ns); err != nil {
		return fmt.Errorf("namespace %s: %w", m.ns, err)
	}
	if _, err := run(ctx, "", "ip", "-n", sw, "link", "set", "v-"+m.role, "master", "br0", "up"); err != nil {
		return fmt.Errorf("namespace %s: %w", m.ns, err)
	}
	// Everything inside the namespace in one `ip -batch`.
	batch := []string{
		"link set lo up",
		"addr add " + m.v4.String() + "/24 dev eth0",
		"addr add " + m.v6.String() + "/64 dev eth0 nodad",
		"link set eth0 up",
	}
	for _, r := range m.routes {
		batch = append(batch, strings.Join(r, " "))
	}
	if err := ipBatch(ctx, m.ns, batch); err != nil {
		return fmt.Errorf("namespace %s: %w", m.ns, err)
	}
	return nil
}

// ipBatch runs `ip -n ns -batch -` with lines (no per-line options such as
// -6: the family follows from the addresses).
func ipBatch(ctx context.Context, ns string, lines []string) error {
	cmd := exec.CommandContext(ctx, "ip", "-n", ns, "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ip -n %s -batch: %w: %s", ns, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// setSysctls writes "key=value" sysctls of network namespace ns through
// /proc/sys from a thread inside it.
func setSysctls(ns string, kvs []string) error {
	return inNetns(ns, func() error {
		for _, kv := range kvs {
			k, v, _ := strings.Cut(kv, "=")
			p := "/proc/sys/" + strings.ReplaceAll(k, ".", "/")
			if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
				return fmt.Errorf("sysctl %s in %s: %w", kv, ns, err)
			}
		}
		return nil
	})
}

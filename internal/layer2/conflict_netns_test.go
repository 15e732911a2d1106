package layer2

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/packet"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/herald-lb/herald/internal/poll"
)

// bridgedLab is a segment with a switch: a Linux bridge in its own network
// namespace, with the node (eth0, and eth1 when asked), the client and a
// rogue host (eth0 each) as ports. The rogue claims the node's IPs from its
// own MAC address, as another node that believes it owns them would; the
// bridge forwards unicast frames only to the port that learned the
// destination, like a switch.
type bridgedLab struct {
	*lab
	rogue     string
	rogueMAC  net.HardwareAddr
	rogueLink linkInfo
	rogueNS   netns.NsHandle
}

func newBridgedLab(t *testing.T, twoNICs bool) *bridgedLab {
	t.Helper()
	if testing.Short() {
		t.Skip("needs root and network namespaces; skipped under -short")
	}
	if os.Geteuid() != 0 {
		t.Fatal("needs root (CAP_NET_ADMIN, CAP_NET_RAW); run as root or with -short")
	}
	for _, tool := range []string{"ip", "arping"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: run hack/install-deps.sh (apt-get install -y iproute2 arping)", tool)
		}
	}
	p := fmt.Sprintf("hl2-%d-%d", os.Getpid(), labSeq.Add(1))
	b := &bridgedLab{lab: &lab{node: p + "-n", client: p + "-c"}, rogue: p + "-r"}
	sw := p + "-s"
	for _, ns := range []string{sw, b.node, b.client, b.rogue} {
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	}
	// No multicast snooping: the bridge floods ff02::1 and the
	// solicited-node groups to every port, as a switch without a querier.
	run(t, "ip", "-n", sw, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0")
	run(t, "ip", "-n", sw, "link", "set", "br0", "up")
	type port struct{ ns, ifname, last string }
	ports := []port{{b.node, "eth0", "1"}, {b.client, "eth0", "100"}, {b.rogue, "eth0", "50"}}
	if twoNICs {
		ports = append(ports, port{b.node, "eth1", ""})
	}
	for i, pt := range ports {
		sp := fmt.Sprintf("p%d", i)
		run(t, "ip", "-n", sw, "link", "add", sp, "type", "veth", "peer", "name", pt.ifname, "netns", pt.ns)
		run(t, "ip", "-n", sw, "link", "set", sp, "master", "br0")
		run(t, "ip", "-n", sw, "link", "set", sp, "up")
		run(t, "ip", "netns", "exec", pt.ns, "sysctl", "-qw", "net.ipv6.conf."+pt.ifname+".accept_dad=0")
		if pt.last != "" {
			run(t, "ip", "-n", pt.ns, "addr", "add", "198.51.100."+pt.last+"/24", "dev", pt.ifname)
			run(t, "ip", "-n", pt.ns, "addr", "add", "2001:db8::"+pt.last+"/64", "dev", pt.ifname, "nodad")
		}
		run(t, "ip", "-n", pt.ns, "link", "set", "lo", "up")
		run(t, "ip", "-n", pt.ns, "link", "set", pt.ifname, "up")
	}
	b.open(t)
	var err error
	if b.rogueNS, err = netns.GetFromName(b.rogue); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.rogueNS.Close() })
	h, err := netlink.NewHandleAt(b.rogueNS)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	b.rogueLink = b.eth0(t, h)
	b.rogueMAC = b.rogueLink.MAC
	return b
}

// rogueConn opens a raw socket on the rogue's eth0 that sends whole
// Ethernet frames.
func (b *bridgedLab) rogueConn(t *testing.T) net.PacketConn {
	t.Helper()
	var pc net.PacketConn
	err := inNetNS(b.rogueNS, func() error {
		var err error
		pc, err = packet.Listen(b.rogueLink.netInterface(), packet.Raw, etherTypeARP, nil)
		return err
	})
	if err != nil {
		t.Fatalf("rogue socket: %v", err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc
}

// claimFrames returns the frames with which the rogue claims ip: a
// gratuitous ARP request and reply for IPv4, an unsolicited neighbor
// advertisement for IPv6.
func (b *bridgedLab) claimFrames(t *testing.T, ip netip.Addr) [][]byte {
	t.Helper()
	if ip.Is4() {
		f, err := gratuitousARP(b.rogueMAC, ip)
		if err != nil {
			t.Fatal(err)
		}
		return f[:]
	}
	f, err := ndpFrame(b.rogueMAC, allNodesMAC, ip, allNodes, unsolicitedNA(b.rogueMAC, ip))
	if err != nil {
		t.Fatal(err)
	}
	return [][]byte{f}
}

func send(t *testing.T, pc net.PacketConn, frames [][]byte) {
	t.Helper()
	for _, f := range frames {
		if _, err := pc.WriteTo(f, &packet.Addr{HardwareAddr: f[:6]}); err != nil {
			t.Fatalf("rogue send: %v", err)
		}
	}
}

// conflictLog records the OnConflict calls.
type conflictLog struct {
	mu    sync.Mutex
	calls []string
}

func (c *conflictLog) record(ip netip.Addr, mac net.HardwareAddr, iface string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, fmt.Sprintf("%s %s %s", ip, mac, iface))
}

func (c *conflictLog) count(call string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, got := range c.calls {
		if got == call {
			n++
		}
	}
	return n
}

func (c *conflictLog) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls)
}

// idle reports whether no gratuitous burst is running on any link.
func (a *Announcer) idle() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, l := range a.links {
		for _, st := range l.active {
			if st.bursting() {
				return false
			}
		}
	}
	return true
}

func conflicts(a *Announcer, ip netip.Addr, iface string) int {
	return int(testutil.ToFloat64(a.m.conflicts.WithLabelValues(ip.String(), iface)))
}

func gratuitousSent(a *Announcer, ip netip.Addr) int {
	return int(testutil.ToFloat64(a.m.gratuitous.WithLabelValues(ip.String())))
}

// TestRealConflictReannounce: the client's neighbour entry points at the
// node; a rogue host on the same segment claims the node's IPs (Debian's
// arping -U for IPv4, an unsolicited neighbor advertisement for IPv6), so the
// client's kernel moves the entry to the rogue. The node sees the claim,
// re-announces, counts the conflict and reports it, and the client's entry
// ends on the node again.
func TestRealConflictReannounce(t *testing.T) {
	t.Parallel()
	b := newBridgedLab(t, false)
	var cl conflictLog
	a, reg := b.start(t, Options{GratuitousCount: 3, GratuitousInterval: 20 * time.Millisecond, ConflictInterval: time.Hour, OnConflict: cl.record})
	v4 := netip.MustParseAddr("198.51.100.200")
	v6 := netip.MustParseAddr("2001:db8::200")
	mac := b.nodeMAC.String()
	setIPs(t, a, "ns/svc", v4, v6)
	waitActive(t, a, v4, true)
	waitActive(t, a, v6, true)
	poll.Until(t, 10*time.Second, "takeover bursts to end", a.idle)
	pc := b.rogueConn(t)
	for _, ip := range []netip.Addr{v4, v6} {
		run(t, "ip", "-n", b.client, "neigh", "replace", ip.String(), "lladdr", mac, "dev", "eth0", "nud", "stale")
		if ip.Is4() {
			// Exit status 1: nobody answers an unsolicited ARP.
			_ = exec.Command("ip", "netns", "exec", b.rogue, "arping", "-U", "-c", "1", "-w", "1", "-i", "eth0", "-S", ip.String(), ip.String()).Run()
		} else {
			send(t, pc, b.claimFrames(t, ip))
		}
		poll.Until(t, 10*time.Second, fmt.Sprintf("client's neighbour entry for %s back on the node (%s; now %s, rogue %s)", ip, mac, b.clientNeigh(t, ip), b.rogueMAC),
			func() bool { return a.idle() && b.clientNeigh(t, ip) == mac })
		if n := conflicts(a, ip, "eth0"); n < 1 {
			t.Errorf("herald_layer2_conflicts_total{ip=%s,interface=eth0} = %d, want >= 1", ip, n)
		}
		if want := fmt.Sprintf("%s %s eth0", ip, b.rogueMAC); cl.count(want) != 1 {
			t.Errorf("OnConflict calls %q, want one %q", cl.all(), want)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "herald_layer2_conflicts_total"); err != nil || n != 2 {
		t.Errorf("herald_layer2_conflicts_total series = %d (%v), want 2", n, err)
	}
	// The series go with the announcement.
	setIPs(t, a, "ns/svc", v6)
	waitActive(t, a, v4, false)
	if n, _ := testutil.GatherAndCount(reg, "herald_layer2_conflicts_total"); n != 1 {
		t.Errorf("herald_layer2_conflicts_total series after withdrawing %s = %d, want 1", v4, n)
	}
}

// TestRealConflictRateLimit: a stream of claims, first while the conflict
// re-announcement runs and then after it ended, costs one burst and one
// OnConflict call per IP within ConflictInterval; every claim is counted.
func TestRealConflictRateLimit(t *testing.T) {
	t.Parallel()
	b := newBridgedLab(t, false)
	var cl conflictLog
	const count = 3
	a, _ := b.start(t, Options{GratuitousCount: count, GratuitousInterval: 20 * time.Millisecond, ConflictInterval: time.Hour, OnConflict: cl.record})
	v4 := netip.MustParseAddr("198.51.100.201")
	v6 := netip.MustParseAddr("2001:db8::201")
	setIPs(t, a, "ns/svc", v4, v6)
	waitActive(t, a, v4, true)
	waitActive(t, a, v6, true)
	poll.Until(t, 10*time.Second, "takeover bursts to end", a.idle)
	before4, before6 := gratuitousSent(a, v4), gratuitousSent(a, v6)
	pc := b.rogueConn(t)
	const stream = 20
	var frames [][]byte
	for range stream {
		frames = append(frames, b.claimFrames(t, v4)...)
		frames = append(frames, b.claimFrames(t, v6)...)
	}
	for round := 1; round <= 2; round++ {
		send(t, pc, frames)
		poll.Until(t, 10*time.Second, fmt.Sprintf("round %d: conflicts counted", round), func() error {
			n4, n6 := conflicts(a, v4, "eth0"), conflicts(a, v6, "eth0")
			if n4 == round*2*stream && n6 == round*stream {
				return nil
			}
			err := fmt.Errorf("%d and %d for %s and %s, want %d and %d", n4, n6, v4, v6, round*2*stream, round*stream)
			if n4 > round*2*stream || n6 > round*stream {
				return poll.Stop(err)
			}
			return err
		}, poll.Every(5*time.Millisecond))
		poll.Until(t, 10*time.Second, "re-announcements to end", a.idle)
	}
	if got := gratuitousSent(a, v4) - before4; got != 2*count {
		t.Errorf("%s: %d gratuitous ARP frames sent for %d claims, want one burst (%d)", v4, got, 4*stream, 2*count)
	}
	if got := gratuitousSent(a, v6) - before6; got != count {
		t.Errorf("%s: %d unsolicited NAs sent for %d claims, want one burst (%d)", v6, got, 2*stream, count)
	}
	for _, ip := range []netip.Addr{v4, v6} {
		if want := fmt.Sprintf("%s %s eth0", ip, b.rogueMAC); cl.count(want) != 1 {
			t.Errorf("OnConflict calls %q, want one %q", cl.all(), want)
		}
	}
}

// TestRealOwnInterfacesNoConflict: a node with two interfaces on one
// segment hears its own gratuitous packets from the other interface's MAC;
// that is no conflict.
func TestRealOwnInterfacesNoConflict(t *testing.T) {
	t.Parallel()
	b := newBridgedLab(t, true)
	var cl conflictLog
	a, _ := b.start(t, Options{GratuitousCount: 3, GratuitousInterval: 20 * time.Millisecond, ConflictInterval: time.Hour, OnConflict: cl.record})
	v4 := netip.MustParseAddr("198.51.100.202")
	v6 := netip.MustParseAddr("2001:db8::202")
	marker := netip.MustParseAddr("198.51.100.203")
	setIPs(t, a, "ns/svc", v4, v6, marker)
	poll.Until(t, 10*time.Second, "every IP answered on eth0 and eth1", func() bool {
		return slices.Equal(a.Interfaces(v4), []string{"eth0", "eth1"}) && slices.Equal(a.Interfaces(v6), []string{"eth0", "eth1"}) &&
			slices.Equal(a.Interfaces(marker), []string{"eth0", "eth1"})
	})
	a.Reannounce()
	poll.Until(t, 10*time.Second, "bursts to end", a.idle)
	// The rogue's claim reaches both interfaces after the node's own
	// packets: once it is counted on both, those were read too.
	send(t, b.rogueConn(t), b.claimFrames(t, marker))
	poll.Until(t, 10*time.Second, "the rogue's claim counted on eth0 and eth1", func() bool {
		return conflicts(a, marker, "eth0") > 0 && conflicts(a, marker, "eth1") > 0
	})
	for _, ip := range []netip.Addr{v4, v6} {
		for _, ifname := range []string{"eth0", "eth1"} {
			if n := conflicts(a, ip, ifname); n != 0 {
				t.Errorf("%d conflicts counted for %s on %s from the node's own packets", n, ip, ifname)
			}
		}
	}
	if calls := cl.all(); len(calls) != 2 {
		t.Errorf("OnConflict calls %q, want only the rogue's claim on eth0 and eth1", calls)
	}
}

// TestRealReannounce: Reannounce sends one burst for every answered IP on
// the interface it is answered on, and nothing for a withdrawn one.
func TestRealReannounce(t *testing.T) {
	t.Parallel()
	l := newLab(t)
	const count = 3
	a, _ := l.start(t, Options{GratuitousCount: count, GratuitousInterval: 20 * time.Millisecond})
	a.Reannounce() // nothing answered yet: nothing to do
	ips := []netip.Addr{netip.MustParseAddr("198.51.100.204"), netip.MustParseAddr("198.51.100.205"), netip.MustParseAddr("2001:db8::204")}
	gone := netip.MustParseAddr("198.51.100.206")
	setIPs(t, a, "ns/svc", append(slices.Clone(ips), gone)...)
	for _, ip := range append(slices.Clone(ips), gone) {
		waitActive(t, a, ip, true)
	}
	setIPs(t, a, "ns/svc", ips...) // withdraw gone
	waitActive(t, a, gone, false)
	poll.Until(t, 10*time.Second, "takeover bursts to end", a.idle)

	c := l.capture(t)
	a.Reannounce()
	want := func(ip netip.Addr) (arpN, naN int) {
		if ip.Is4() {
			return 2 * count, 0
		}
		return 0, count
	}
	poll.Until(t, 10*time.Second, "one burst per IP captured", func() bool {
		for _, ip := range ips {
			a4, n6 := c.counts(ip)
			w4, w6 := want(ip)
			if a4 < w4 || n6 < w6 {
				return false
			}
		}
		return a.idle()
	})
	// Frames sent after the bursts arrive after theirs: once the markers'
	// bursts are captured, anything more of the re-announcement would be.
	markers := []netip.Addr{netip.MustParseAddr("198.51.100.207"), netip.MustParseAddr("2001:db8::207")}
	setIPs(t, a, "ns/marker", markers...)
	poll.Until(t, 10*time.Second, "markers' bursts captured", func() bool {
		a4, _ := c.counts(markers[0])
		_, n6 := c.counts(markers[1])
		return a4 == 2*count && n6 == count
	})
	for _, ip := range ips {
		a4, n6 := c.counts(ip)
		if w4, w6 := want(ip); a4 != w4 || n6 != w6 {
			t.Errorf("%s: re-announced with %d ARP frames and %d NAs, want %d and %d", ip, a4, n6, w4, w6)
		}
	}
	if a4, n6 := c.counts(gone); a4 != 0 || n6 != 0 {
		t.Errorf("withdrawn %s re-announced (%d ARP frames, %d NAs)", gone, a4, n6)
	}
}

package lab

// Lab primitives for the chaos scenarios (e2e/chaos): what a node put on the
// wire (an ARP capture on its switch port), who answers the client's ARP
// requests for many addresses at once, the client's whole neighbour table,
// and a bounded CPU load in a namespace.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// ethPAll is packet(7)'s ETH_P_ALL: every protocol. A socket for
// ETH_P_ARP alone sees nothing on a bridge port (the bridge consumes the
// frame before protocol handlers run; only ETH_P_ALL taps come first).
const ethPAll = 0x0003

// ARPFrame is one ARP packet (RFC 826) seen on the wire.
type ARPFrame struct {
	// At is when the capture read it.
	At time.Time
	// SourceMAC is the Ethernet source address.
	SourceMAC net.HardwareAddr
	// Operation is arp.OperationRequest or arp.OperationReply.
	Operation arp.Operation
	// SenderMAC and SenderIP are the ARP sender fields: the binding the
	// frame claims.
	SenderMAC net.HardwareAddr
	SenderIP  netip.Addr
	// TargetIP is the ARP target protocol address.
	TargetIP netip.Addr
}

// Gratuitous reports whether f is a gratuitous ARP: a request or reply
// whose sender and target protocol addresses are equal (RFC 5227 §3
// "ARP Announcement").
func (f ARPFrame) Gratuitous() bool { return f.SenderIP == f.TargetIP }

// Claims reports whether f tells its receivers that SenderIP is at
// SenderMAC: any reply, and any gratuitous request. An ordinary request
// (a host resolving someone else) claims nothing about the target.
func (f ARPFrame) Claims() bool { return f.Operation == arp.OperationReply || f.Gratuitous() }

// ARPCapture records the ARP frames on one switch port (see
// [Lab.CaptureARP]) until Close.
type ARPCapture struct {
	conn *packet.Conn
	done chan struct{}

	mu      sync.Mutex
	frames  []ARPFrame
	err     error
	closing bool
}

// CaptureARP starts recording every ARP frame that crosses node's switch
// port (the veth v-<node> in the switch namespace) in either direction,
// with an AF_PACKET socket (packet(7)) that reads every frame and keeps
// the ARP ones. Frames the node sent have its MAC
// as SourceMAC. Close stops the capture.
func (l *Lab) CaptureARP(node string) (*ARPCapture, error) {
	if _, ok := l.Node(node); !ok {
		return nil, fmt.Errorf("capture ARP: no lab node %q", node)
	}
	return l.capturePort("v-" + node)
}

// CaptureClientARP is [Lab.CaptureARP] on the client's switch port (v-cl):
// every ARP frame the client sends (its requests, SenderIP [ClientAddr])
// and every one it receives (the nodes' replies to it and every broadcast,
// such as gratuitous ARP), in the order the switch passed them. Close
// stops the capture.
func (l *Lab) CaptureClientARP() (*ARPCapture, error) {
	return l.capturePort("v-cl")
}

// capturePort starts an ARP capture on port, a veth in the switch namespace.
func (l *Lab) capturePort(port string) (*ARPCapture, error) {
	var conn *packet.Conn
	err := inNetns(l.SwitchNamespace(), func() error {
		ifi, err := net.InterfaceByName(port)
		if err != nil {
			return err
		}
		conn, err = packet.Listen(ifi, packet.Raw, ethPAll, nil)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("capture ARP on %s/%s: %w", l.SwitchNamespace(), port, err)
	}
	c := &ARPCapture{conn: conn, done: make(chan struct{})}
	go c.read()
	return c, nil
}

func (c *ARPCapture) read() {
	defer close(c.done)
	buf := make([]byte, 1500)
	for {
		n, _, err := c.conn.ReadFrom(buf)
		if err != nil {
			c.mu.Lock()
			if !c.closing {
				c.err = err
			}
			c.mu.Unlock()
			return
		}
		if f, ok := parseARPFrame(buf[:n]); ok {
			f.At = time.Now()
			c.mu.Lock()
			c.frames = append(c.frames, f)
			c.mu.Unlock()
		}
	}
}

// parseARPFrame decodes an Ethernet frame carrying an IPv4-over-Ethernet
// ARP packet.
func parseARPFrame(b []byte) (ARPFrame, bool) {
	var eth ethernet.Frame
	if err := eth.UnmarshalBinary(b); err != nil || eth.EtherType != ethernet.EtherTypeARP {
		return ARPFrame{}, false
	}
	var p arp.Packet
	if err := p.UnmarshalBinary(eth.Payload); err != nil {
		return ARPFrame{}, false
	}
	return ARPFrame{SourceMAC: eth.Source, Operation: p.Operation, SenderMAC: p.SenderHardwareAddr,
		SenderIP: p.SenderIP, TargetIP: p.TargetIP}, true
}

// Frames returns the frames recorded so far, oldest first.
func (c *ARPCapture) Frames() []ARPFrame {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]ARPFrame(nil), c.frames...)
}

// Reset forgets the frames recorded so far.
func (c *ARPCapture) Reset() {
	c.mu.Lock()
	c.frames = nil
	c.mu.Unlock()
}

// Close stops the capture and returns the read error that ended it early,
// if any.
func (c *ARPCapture) Close() error {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	cerr := c.conn.Close()
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	return errors.Join(c.err, cerr)
}

// dialClientARP opens an ARP client (an AF_PACKET socket) on the client
// namespace's eth0.
func (l *Lab) dialClientARP() (*arp.Client, error) {
	var c *arp.Client
	err := inNetns(l.ClientNamespace(), func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		c, err = arp.Dial(ifi)
		return err
	})
	return c, err
}

// ProbeARP sends one ARP request (RFC 826) for each of addrs from the
// client's eth0 (an AF_PACKET socket; the client's kernel is not asked) and
// collects the replies for wait. It returns, per address, every node (or
// foreign MAC) that replied, sorted and without duplicates; an address
// nobody answered maps to an empty list. Replies update the client's
// neighbour entries that exist, as any ARP reply does.
func (l *Lab) ProbeARP(ctx context.Context, addrs []netip.Addr, wait time.Duration) (map[netip.Addr][]string, error) {
	c, err := l.dialClientARP()
	if err != nil {
		return nil, fmt.Errorf("probe ARP from %s: %w", l.ClientNamespace(), err)
	}
	defer c.Close()
	want := map[netip.Addr]map[string]bool{}
	for _, a := range addrs {
		if !a.Is4() {
			return nil, fmt.Errorf("probe ARP %s: not an IPv4 address", a)
		}
		want[a] = map[string]bool{}
	}
	deadline := time.Now().Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := c.SetReadDeadline(deadline); err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if err := c.Request(a); err != nil {
			return nil, fmt.Errorf("probe ARP %s: %w", a, err)
		}
	}
	for {
		p, _, err := c.Read()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				break
			}
			return nil, fmt.Errorf("probe ARP: read: %w", err)
		}
		seen, ok := want[p.SenderIP]
		if !ok || p.Operation != arp.OperationReply || p.TargetIP != ClientAddr {
			continue
		}
		who := l.NodeByMAC(p.SenderHardwareAddr)
		if who == "" {
			who = p.SenderHardwareAddr.String()
		}
		seen[who] = true
	}
	out := map[netip.Addr][]string{}
	for a, seen := range want {
		who := []string{}
		for w := range seen {
			who = append(who, w)
		}
		sort.Strings(who)
		out[a] = who
	}
	return out, ctx.Err()
}

// RequestARP sends, from the client's eth0, one ARP request (RFC 826) for
// each of addrs every interval (the first at once) until ctx is done, and
// returns nil then. It reads no reply: use it with a capture
// ([Lab.CaptureClientARP]) that sees the requests and every answer, or
// with [Lab.ProbeARP], whose window collects these replies too. It is a
// traffic source paced by a ticker, not a wait.
func (l *Lab) RequestARP(ctx context.Context, addrs []netip.Addr, interval time.Duration) error {
	for _, a := range addrs {
		if !a.Is4() {
			return fmt.Errorf("request ARP %s: not an IPv4 address", a)
		}
	}
	c, err := l.dialClientARP()
	if err != nil {
		return fmt.Errorf("request ARP from %s: %w", l.ClientNamespace(), err)
	}
	defer c.Close()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		for _, a := range addrs {
			if err := c.Request(a); err != nil {
				return fmt.Errorf("request ARP %s: %w", a, err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// NeighborTable returns the IPv4 and IPv6 neighbour entries of network
// namespace ns that carry a link-layer address (netlink RTM_GETNEIGH):
// address to MAC. Entries without one (INCOMPLETE, FAILED) are left out.
func (l *Lab) NeighborTable(ns string) (map[netip.Addr]net.HardwareAddr, error) {
	h, err := netns.GetFromName(ns)
	if err != nil {
		return nil, fmt.Errorf("neighbours of %s: %w", ns, err)
	}
	defer h.Close()
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		return nil, fmt.Errorf("neighbours of %s: %w", ns, err)
	}
	defer nl.Close()
	list, err := nl.NeighList(0, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("neighbours of %s: %w", ns, err)
	}
	out := map[netip.Addr]net.HardwareAddr{}
	for _, n := range list {
		a, ok := netip.AddrFromSlice(n.IP)
		if !ok || len(n.HardwareAddr) == 0 || n.State&(netlink.NUD_INCOMPLETE|netlink.NUD_FAILED) != 0 {
			continue
		}
		out[a.Unmap()] = n.HardwareAddr
	}
	return out, nil
}

// BurnCPU starts workers busy loops (`sh -c 'while :; do :; done'`) in
// network namespace ns as lab processes named <name>-<i>, each under
// `timeout` so that it ends by itself after d (SIGKILL 5 s later if it
// ignores SIGTERM), also when the caller crashes. The namespace does not
// confine CPU: the loops compete with every process of the machine, which
// is the point (a node under full load).
func (l *Lab) BurnCPU(ns, name string, workers int, d time.Duration) ([]*Process, error) {
	if d <= 0 || workers <= 0 {
		return nil, fmt.Errorf("burn CPU: want workers > 0 and a duration > 0, got %d, %s", workers, d)
	}
	secs := strconv.FormatFloat(d.Seconds(), 'f', 3, 64)
	var ps []*Process
	for i := range workers {
		p, err := l.Start(ns, fmt.Sprintf("%s-%d", name, i), []string{"timeout", "-k", "5", secs,
			"sh", "-c", "while :; do :; done"}, nil)
		if err != nil {
			for _, q := range ps {
				_ = l.StopProcess(q.Name)
			}
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// WaitGone waits until every process in ps has exited (they end by
// themselves, e.g. those of BurnCPU) and forgets them; ctx ending stops
// them first.
func (l *Lab) WaitGone(ctx context.Context, ps []*Process) error {
	var errs []error
	for _, p := range ps {
		if d := p.Done(); d != nil {
			select {
			case <-d:
			case <-ctx.Done():
			}
		}
		if err := l.StopProcess(p.Name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

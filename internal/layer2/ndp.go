package layer2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/mdlayher/ndp"
	"golang.org/x/net/ipv6"
)

// allNodes is the link-local all-nodes multicast group ff02::1, the
// destination of unsolicited neighbor advertisements (RFC 4861 §7.2.6).
var allNodes = netip.MustParseAddr("ff02::1")

// handleNDP decides how to answer one received ICMPv6 message (RFC 4861).
// msg is the ICMPv6 message (without IPv6 header), hopLimit the IPv6 hop limit
// it arrived with (negative when unknown), src its IPv6 source address. It
// answers only Neighbor Solicitations that carry a source link-layer address
// option and whose target is announced on this interface, with a solicited
// Neighbor Advertisement (Solicited=1, Override=1, target link-layer address
// option = interface MAC) sent to the solicitation's source (RFC 4861 §7.2.4).
// It returns the advertisement, its destination, the target and the drop
// reason (DropNone when an advertisement is returned).
func handleNDP(msg []byte, hopLimit int, src netip.Addr, ifc ifaceView, lookup lookupFunc) (na *ndp.NeighborAdvertisement, dst, target netip.Addr, reason DropReason) {
	m, err := ndp.ParseMessage(msg)
	if err != nil {
		return nil, dst, target, DropMalformed
	}
	ns, ok := m.(*ndp.NeighborSolicitation)
	if !ok {
		return nil, dst, target, DropNotRequest
	}
	target = ns.TargetAddress.WithZone("")
	if hopLimit >= 0 && hopLimit != ndp.HopLimit {
		return nil, dst, target, DropBadHopLimit
	}
	if target.IsMulticast() {
		return nil, dst, target, DropMalformed
	}
	var sll net.HardwareAddr
	for _, o := range ns.Options {
		if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == ndp.Source {
			sll = lla.Addr
		}
	}
	if sll == nil {
		return nil, dst, target, DropNoSourceLinkLayer
	}
	if src.IsUnspecified() {
		// RFC 4861 §7.1.1: an unspecified source must not carry a source
		// link-layer address option.
		return nil, dst, target, DropMalformed
	}
	if bytes.Equal(sll, ifc.MAC) {
		return nil, dst, target, DropFromUs
	}
	announced, onIface := lookup(target, ifc.Name)
	switch {
	case !announced:
		return nil, dst, target, DropUnknownTarget
	case !onIface:
		return nil, dst, target, DropWrongInterface
	}
	return &ndp.NeighborAdvertisement{
		Solicited:     true,
		Override:      true,
		TargetAddress: target,
		Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: ifc.MAC}},
	}, src, target, DropNone
}

// unsolicitedNA returns the unsolicited neighbor advertisement announcing
// that ip is at mac (RFC 4861 §7.2.6: Solicited=0, Override=1, target
// link-layer address option), to be sent to ff02::1.
func unsolicitedNA(mac net.HardwareAddr, ip netip.Addr) *ndp.NeighborAdvertisement {
	return &ndp.NeighborAdvertisement{
		Override:      true,
		TargetAddress: ip,
		Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: mac}},
	}
}

// ndpResponder answers Neighbor Solicitations on one interface through an
// ICMPv6 raw socket bound to the interface's link-local address. It joins the
// solicited-node multicast group of every announced IPv6 address; groups are
// refcounted since several addresses share one group.
type ndpResponder struct {
	ifc    ifaceView
	conn   *ndp.Conn
	log    *slog.Logger
	lookup lookupFunc
	m      *metrics

	mu     sync.Mutex
	groups map[netip.Addr]int
}

// listenNDP opens the ICMPv6 socket, accepting only Neighbor Solicitations and
// reporting the hop limit. It must run in the target network namespace.
func listenNDP(ifi *net.Interface) (*ndp.Conn, error) {
	c, _, err := ndp.Listen(ifi, ndp.LinkLocal)
	if err != nil {
		return nil, fmt.Errorf("listen NDP on %s: %w", ifi.Name, err)
	}
	var f ipv6.ICMPFilter
	f.SetAll(true)
	f.Accept(ipv6.ICMPTypeNeighborSolicitation)
	if err := c.SetICMPFilter(&f); err != nil {
		c.Close()
		return nil, fmt.Errorf("set ICMPv6 filter on %s: %w", ifi.Name, err)
	}
	if err := c.SetControlMessage(ipv6.FlagHopLimit, true); err != nil {
		c.Close()
		return nil, fmt.Errorf("enable hop limit control messages on %s: %w", ifi.Name, err)
	}
	return c, nil
}

// join adds a reference to the solicited-node multicast group of ip.
func (r *ndpResponder) join(ip netip.Addr) error {
	g, err := ndp.SolicitedNodeMulticast(ip)
	if err != nil {
		return fmt.Errorf("solicited-node group of %s: %w", ip, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.groups[g] == 0 {
		if err := r.conn.JoinGroup(g); err != nil {
			return fmt.Errorf("join %s on %s: %w", g, r.ifc.Name, err)
		}
	}
	r.groups[g]++
	return nil
}

// leave drops a reference to the solicited-node multicast group of ip and
// leaves the group with the last one.
func (r *ndpResponder) leave(ip netip.Addr) error {
	g, err := ndp.SolicitedNodeMulticast(ip)
	if err != nil {
		return fmt.Errorf("solicited-node group of %s: %w", ip, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch r.groups[g] {
	case 0:
		return nil
	case 1:
		delete(r.groups, g)
		if err := r.conn.LeaveGroup(g); err != nil {
			return fmt.Errorf("leave %s on %s: %w", g, r.ifc.Name, err)
		}
	default:
		r.groups[g]--
	}
	return nil
}

// run reads and answers solicitations until the socket is closed or ctx ends.
func (r *ndpResponder) run(ctx context.Context) {
	buf := make([]byte, 1500)
	for {
		n, cm, src, err := r.conn.ReadRaw(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return
			}
			r.log.Debug("read NDP", "error", err)
			if !sleepCtx(ctx, 100*time.Millisecond) {
				return
			}
			continue
		}
		hop := -1
		if cm != nil {
			hop = cm.HopLimit
		}
		na, dst, ip, reason := handleNDP(buf[:n], hop, src.WithZone(""), r.ifc, r.lookup)
		if reason != DropNone {
			if reason >= DropUnknownTarget {
				r.log.Debug("neighbor solicitation not answered", "ip", ip, "reason", reason)
			}
			continue
		}
		r.m.requests.WithLabelValues(ip.String()).Inc()
		if err := r.conn.WriteTo(na, nil, dst); err != nil {
			r.log.Warn("send neighbor advertisement", "ip", ip, "error", err)
			continue
		}
		r.m.responses.WithLabelValues(ip.String()).Inc()
	}
}

// gratuitous sends one unsolicited neighbor advertisement for ip.
func (r *ndpResponder) gratuitous(ip netip.Addr) error {
	if err := r.conn.WriteTo(unsolicitedNA(r.ifc.MAC, ip), nil, allNodes); err != nil {
		return fmt.Errorf("send unsolicited neighbor advertisement for %s on %s: %w", ip, r.ifc.Name, err)
	}
	r.m.gratuitous.WithLabelValues(ip.String()).Inc()
	return nil
}

package layer2

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"
	"golang.org/x/net/bpf"
	"golang.org/x/net/ipv6"
)

// allNodes is the link-local all-nodes multicast group ff02::1, the
// destination of unsolicited neighbor advertisements (RFC 4861 §7.2.6).
var allNodes = netip.MustParseAddr("ff02::1")

// allNodesMAC is the Ethernet multicast address of ff02::1 (RFC 2464 §7).
var allNodesMAC = net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}

// ndpReply is the answer handleNDP computes: a Neighbor Advertisement and
// where to send it.
type ndpReply struct {
	NA     *ndp.NeighborAdvertisement
	Dst    netip.Addr       // the solicitation's source
	DstMAC net.HardwareAddr // its source link-layer address
}

// handleNDP decides how to answer one received ICMPv6 message (RFC 4861).
// msg is the ICMPv6 message (without IPv6 header), hopLimit the IPv6 hop limit
// it arrived with (negative when unknown), src its IPv6 source address. It
// answers only Neighbor Solicitations that carry a source link-layer address
// option and whose target is announced on this interface, with a solicited
// Neighbor Advertisement (Solicited=1, Override=1, target link-layer address
// option = interface MAC) sent to the solicitation's source (RFC 4861 §7.2.4).
// It returns the reply, the target and the drop reason (DropNone when a reply
// is returned).
func handleNDP(msg []byte, hopLimit int, src netip.Addr, ifc ifaceView, lookup lookupFunc) (reply ndpReply, target netip.Addr, reason DropReason) {
	m, err := ndp.ParseMessage(msg)
	if err != nil {
		return reply, target, DropMalformed
	}
	ns, ok := m.(*ndp.NeighborSolicitation)
	if !ok {
		return reply, target, DropNotRequest
	}
	target = ns.TargetAddress.WithZone("")
	if hopLimit >= 0 && hopLimit != ndp.HopLimit {
		return reply, target, DropBadHopLimit
	}
	if target.IsMulticast() {
		return reply, target, DropMalformed
	}
	var sll net.HardwareAddr
	for _, o := range ns.Options {
		if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == ndp.Source {
			sll = lla.Addr
		}
	}
	if sll == nil {
		return reply, target, DropNoSourceLinkLayer
	}
	if src.IsUnspecified() {
		// RFC 4861 §7.1.1: an unspecified source must not carry a source
		// link-layer address option.
		return reply, target, DropMalformed
	}
	if bytes.Equal(sll, ifc.MAC) {
		return reply, target, DropFromUs
	}
	announced, onIface := lookup(target, ifc.Name)
	switch {
	case !announced:
		return reply, target, DropUnknownTarget
	case !onIface:
		return reply, target, DropWrongInterface
	}
	return ndpReply{
		NA: &ndp.NeighborAdvertisement{
			Solicited:     true,
			Override:      true,
			TargetAddress: target,
			Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: ifc.MAC}},
		},
		Dst:    src.WithZone(""),
		DstMAC: sll,
	}, target, DropNone
}

// handleNDPFrame decides how to answer one Ethernet frame received on the
// AF_PACKET socket: it checks the Ethernet and IPv6 framing (IPv6 next header
// ICMPv6, destination MAC ours or IPv6 multicast, destination IP the target or
// its solicited-node multicast group, RFC 4861 §7.2.3) and hands the ICMPv6
// message to handleNDP.
func handleNDPFrame(frame []byte, ifc ifaceView, lookup lookupFunc) (reply ndpReply, target netip.Addr, reason DropReason) {
	const ipv6Hdr = 40
	if len(frame) < 14+ipv6Hdr || binary.BigEndian.Uint16(frame[12:14]) != 0x86dd || frame[14]>>4 != 6 || frame[14+6] != 58 {
		return reply, target, DropMalformed
	}
	ip := frame[14:]
	plen := int(binary.BigEndian.Uint16(ip[4:6]))
	if len(ip) < ipv6Hdr+plen {
		return reply, target, DropMalformed
	}
	dstMAC := net.HardwareAddr(frame[0:6])
	if !bytes.Equal(dstMAC, ifc.MAC) && !(dstMAC[0] == 0x33 && dstMAC[1] == 0x33) {
		return reply, target, DropNotForUs
	}
	src := netip.AddrFrom16([16]byte(ip[8:24]))
	dst := netip.AddrFrom16([16]byte(ip[24:40]))
	reply, target, reason = handleNDP(ip[ipv6Hdr:ipv6Hdr+plen], int(ip[7]), src, ifc, lookup)
	if reason != DropNone {
		return reply, target, reason
	}
	if snm, _ := ndp.SolicitedNodeMulticast(target); dst != target && dst != snm {
		return ndpReply{}, target, DropNotForUs
	}
	return reply, target, DropNone
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

// ndpFrame builds the Ethernet frame carrying m in an IPv6 packet from src to
// dst with hop limit 255 (RFC 4861 §7.1.2) and the ICMPv6 checksum
// (RFC 4443 §2.3). The advertisements are sent with the announced address
// itself as IPv6 source, as a host owning it would (the kernel cannot do so:
// the address is not assigned to the interface), and straight to the
// solicitor's MAC, so no neighbour resolution delays the answer.
func ndpFrame(srcMAC, dstMAC net.HardwareAddr, src, dst netip.Addr, m ndp.Message) ([]byte, error) {
	body, err := ndp.MarshalMessageChecksum(m, src, dst)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, 14+40+len(body))
	b = append(b, dstMAC...)
	b = append(b, srcMAC...)
	b = append(b, 0x86, 0xdd)    // EtherType IPv6
	b = append(b, 0x60, 0, 0, 0) // version 6, traffic class 0, flow label 0
	b = binary.BigEndian.AppendUint16(b, uint16(len(body)))
	b = append(b, 58, ndp.HopLimit) // next header ICMPv6, hop limit
	s, d := src.As16(), dst.As16()
	b = append(b, s[:]...)
	b = append(b, d[:]...)
	return append(b, body...), nil
}

// ndpResponder answers Neighbor Solicitations on one interface through an
// ICMPv6 raw socket bound to the interface's link-local address. It joins the
// solicited-node multicast group of every announced IPv6 address; groups are
// refcounted since several addresses share one group.
type ndpResponder struct {
	ifc    ifaceView
	conn   *ndp.Conn      // holds the multicast group memberships only
	pc     net.PacketConn // AF_PACKET socket: receives solicitations, sends advertisements
	log    *slog.Logger
	lookup lookupFunc
	m      *metrics
	// claimed receives what every Neighbor Advertisement from another host
	// claims.
	claimed func(ifname string, c claim)

	mu     sync.Mutex
	groups map[netip.Addr]int
}

// listenNDP opens the ICMPv6 socket that holds the solicited-node multicast
// memberships (so that the interface accepts those frames). It receives
// nothing: its ICMPv6 filter blocks every type. It must run in the target
// network namespace.
//
// ndp.Conn uses the interface name as IPv6 zone, and Go resolves a zone name
// to an index in the network namespace of whichever OS thread runs the call.
// The Conn is therefore given the decimal interface index as name, which Go
// resolves without a lookup.
func listenNDP(ifi *net.Interface) (*ndp.Conn, error) {
	byIndex := *ifi
	byIndex.Name = strconv.Itoa(ifi.Index)
	c, _, err := ndp.Listen(&byIndex, ndp.LinkLocal)
	if err != nil {
		return nil, fmt.Errorf("listen NDP on %s: %w", ifi.Name, err)
	}
	var f ipv6.ICMPFilter
	f.SetAll(true)
	if err := c.SetICMPFilter(&f); err != nil {
		c.Close()
		return nil, fmt.Errorf("set ICMPv6 filter on %s: %w", ifi.Name, err)
	}
	return c, nil
}

// nsFilter is a classic BPF program for an AF_PACKET socket in raw mode that
// keeps only Ethernet frames carrying IPv6 (EtherType 0x86dd) whose next
// header is ICMPv6 (58) and whose ICMPv6 type is Neighbor Solicitation (135)
// or Neighbor Advertisement (136, for conflict detection). Neighbor
// Discovery messages carry no extension headers in practice.
func nsFilter() ([]bpf.RawInstruction, error) {
	return bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 12, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x86dd, SkipFalse: 6},
		bpf.LoadAbsolute{Off: 14 + 6, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 58, SkipFalse: 4},
		bpf.LoadAbsolute{Off: 14 + 40, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 135, SkipTrue: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 136, SkipFalse: 1},
		bpf.RetConstant{Val: 1514},
		bpf.RetConstant{Val: 0},
	})
}

// listenNDPPacket opens the AF_PACKET socket that receives Neighbor
// Solicitations, multicast and unicast alike (an ICMPv6 socket misses the
// unicast neighbour-unreachability probes addressed to the Service IP, since
// the kernel does not deliver packets for addresses it does not own), and
// sends the advertisements. It must run in the target network namespace.
func listenNDPPacket(ifi *net.Interface) (net.PacketConn, error) {
	filter, err := nsFilter()
	if err != nil {
		return nil, fmt.Errorf("assemble BPF filter: %w", err)
	}
	c, err := packet.Listen(ifi, packet.Raw, 0x86dd, &packet.Config{Filter: filter})
	if err != nil {
		return nil, fmt.Errorf("listen IPv6 on %s: %w", ifi.Name, err)
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

// run reads and answers solicitations, and hands the claims of
// advertisements from other hosts to r.claimed, until the socket is closed
// or ctx ends.
func (r *ndpResponder) run(ctx context.Context) {
	buf := make([]byte, 1514)
	for {
		n, _, err := r.pc.ReadFrom(buf)
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
		if c, ok := ndpClaim(buf[:n]); ok {
			if !bytes.Equal(c.MAC, r.ifc.MAC) && r.claimed != nil {
				r.claimed(r.ifc.Name, c)
			}
			continue
		}
		reply, ip, reason := handleNDPFrame(buf[:n], r.ifc, r.lookup)
		if reason != DropNone {
			if reason == DropWrongInterface {
				r.log.Debug("neighbor solicitation not answered", "ip", ip, "reason", reason)
			}
			continue
		}
		r.m.requests.WithLabelValues(ip.String()).Inc()
		if err := r.send(reply.DstMAC, ip, reply.Dst, reply.NA); err != nil {
			r.log.Warn("send neighbor advertisement", "ip", ip, "error", err)
			continue
		}
		r.m.responses.WithLabelValues(ip.String()).Inc()
	}
}

// send writes m from src to dst (at dstMAC) on the interface.
func (r *ndpResponder) send(dstMAC net.HardwareAddr, src, dst netip.Addr, m ndp.Message) error {
	f, err := ndpFrame(r.ifc.MAC, dstMAC, src, dst, m)
	if err != nil {
		return err
	}
	_, err = r.pc.WriteTo(f, &packet.Addr{HardwareAddr: dstMAC})
	return err
}

// gratuitous sends one unsolicited neighbor advertisement for ip.
func (r *ndpResponder) gratuitous(ip netip.Addr) error {
	if err := r.send(allNodesMAC, ip, allNodes, unsolicitedNA(r.ifc.MAC, ip)); err != nil {
		return fmt.Errorf("send unsolicited neighbor advertisement for %s on %s: %w", ip, r.ifc.Name, err)
	}
	r.m.gratuitous.WithLabelValues(ip.String()).Inc()
	return nil
}

package layer2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/packet"
)

// etherTypeARP is the EtherType of ARP (RFC 826), used to bind the AF_PACKET
// socket.
const etherTypeARP = 0x0806

// ifaceView is what the request handlers know about the receiving interface.
type ifaceView struct {
	Name string
	MAC  net.HardwareAddr
}

// lookupFunc reports whether ip is announced by this node at all, and whether
// it is announced on the interface named ifname.
type lookupFunc func(ip netip.Addr, ifname string) (announced, onIface bool)

// handleARP decides how to answer one received Ethernet frame carrying ARP
// (RFC 826). It answers only requests that are broadcast or unicast to the
// interface MAC and whose target protocol address is announced on this
// interface; the reply carries the interface MAC as sender hardware address
// and is addressed to the requester. It returns the reply frame, the target IP
// (valid once the ARP payload parsed) and the drop reason (DropNone when a
// reply is returned).
func handleARP(frame []byte, ifc ifaceView, lookup lookupFunc) (reply []byte, target netip.Addr, reason DropReason) {
	var f ethernet.Frame
	if err := f.UnmarshalBinary(frame); err != nil || f.EtherType != ethernet.EtherTypeARP {
		return nil, target, DropMalformed
	}
	var p arp.Packet
	if err := p.UnmarshalBinary(f.Payload); err != nil ||
		p.ProtocolType != uint16(ethernet.EtherTypeIPv4) || !p.TargetIP.Is4() || !p.SenderIP.Is4() {
		return nil, target, DropMalformed
	}
	target = p.TargetIP
	if p.Operation != arp.OperationRequest {
		return nil, target, DropNotRequest
	}
	if !bytes.Equal(f.Destination, ethernet.Broadcast) && !bytes.Equal(f.Destination, ifc.MAC) {
		return nil, target, DropNotForUs
	}
	if bytes.Equal(p.SenderHardwareAddr, ifc.MAC) || bytes.Equal(f.Source, ifc.MAC) {
		return nil, target, DropFromUs
	}
	if p.SenderIP == p.TargetIP {
		return nil, target, DropGratuitous
	}
	announced, onIface := lookup(target, ifc.Name)
	switch {
	case !announced:
		return nil, target, DropUnknownTarget
	case !onIface:
		return nil, target, DropWrongInterface
	}
	out, err := arpFrame(arp.OperationReply, ifc.MAC, target, p.SenderHardwareAddr, p.SenderIP, f.Source)
	if err != nil {
		return nil, target, DropMalformed
	}
	return out, target, DropNone
}

// arpFrame builds an Ethernet frame from srcMAC to dst carrying an ARP
// packet.
func arpFrame(op arp.Operation, sha net.HardwareAddr, spa netip.Addr, tha net.HardwareAddr, tpa netip.Addr, dst net.HardwareAddr) ([]byte, error) {
	p, err := arp.NewPacket(op, sha, spa, tha, tpa)
	if err != nil {
		return nil, err
	}
	pb, err := p.MarshalBinary()
	if err != nil {
		return nil, err
	}
	f := ethernet.Frame{Destination: dst, Source: sha, EtherType: ethernet.EtherTypeARP, Payload: pb}
	return f.MarshalBinary()
}

// gratuitousARP returns the two broadcast frames that announce that ip is at
// mac: an ARP request with sender and target protocol address both ip and a
// zero target hardware address (RFC 5227 §2.3 "ARP Announcement"), and an ARP
// reply with target hardware address equal to the sender's (RFC 5944 §4.6).
// Linux accepts both as gratuitous (it overrides an existing neighbour entry
// even within its locktime).
func gratuitousARP(mac net.HardwareAddr, ip netip.Addr) ([2][]byte, error) {
	var out [2][]byte
	zero := make(net.HardwareAddr, len(mac))
	req, err := arpFrame(arp.OperationRequest, mac, ip, zero, ip, ethernet.Broadcast)
	if err != nil {
		return out, fmt.Errorf("gratuitous ARP request for %s: %w", ip, err)
	}
	rep, err := arpFrame(arp.OperationReply, mac, ip, mac, ip, ethernet.Broadcast)
	if err != nil {
		return out, fmt.Errorf("gratuitous ARP reply for %s: %w", ip, err)
	}
	out[0], out[1] = req, rep
	return out, nil
}

// arpResponder answers ARP requests on one interface through an AF_PACKET
// socket bound to EtherType ARP.
type arpResponder struct {
	ifc    ifaceView
	conn   net.PacketConn
	log    *slog.Logger
	lookup lookupFunc
	m      *metrics
	// claimed receives what every ARP packet from another host claims.
	claimed func(ifname string, c claim)
}

// listenARP opens the raw socket. It must run in the target network
// namespace.
func listenARP(ifi *net.Interface) (net.PacketConn, error) {
	c, err := packet.Listen(ifi, packet.Raw, etherTypeARP, nil)
	if err != nil {
		return nil, fmt.Errorf("listen ARP on %s: %w", ifi.Name, err)
	}
	return c, nil
}

// run reads and answers requests, and hands the claims of packets from
// other hosts to r.claimed, until the socket is closed or ctx ends.
func (r *arpResponder) run(ctx context.Context) {
	buf := make([]byte, 1514)
	for {
		n, _, err := r.conn.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return
			}
			r.log.Debug("read ARP", "error", err)
			if !sleepCtx(ctx, 100*time.Millisecond) {
				return
			}
			continue
		}
		if c, ok := arpClaim(buf[:n]); ok && !bytes.Equal(c.MAC, r.ifc.MAC) && r.claimed != nil {
			r.claimed(r.ifc.Name, c)
		}
		reply, ip, reason := handleARP(buf[:n], r.ifc, r.lookup)
		if reason != DropNone {
			if reason == DropWrongInterface {
				r.log.Debug("ARP request not answered", "ip", ip, "reason", reason)
			}
			continue
		}
		r.m.requests.WithLabelValues(ip.String()).Inc()
		if _, err := r.conn.WriteTo(reply, &packet.Addr{HardwareAddr: reply[:6]}); err != nil {
			r.log.Warn("send ARP reply", "ip", ip, "error", err)
			continue
		}
		r.m.responses.WithLabelValues(ip.String()).Inc()
	}
}

// gratuitous sends one gratuitous ARP request and reply for ip.
func (r *arpResponder) gratuitous(ip netip.Addr) error {
	frames, err := gratuitousARP(r.ifc.MAC, ip)
	if err != nil {
		return err
	}
	for _, f := range frames {
		if _, err := r.conn.WriteTo(f, &packet.Addr{HardwareAddr: ethernet.Broadcast}); err != nil {
			return fmt.Errorf("send gratuitous ARP for %s on %s: %w", ip, r.ifc.Name, err)
		}
		r.m.gratuitous.WithLabelValues(ip.String()).Inc()
	}
	return nil
}

// sleepCtx waits d or until ctx ends; it reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

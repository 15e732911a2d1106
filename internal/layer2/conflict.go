package layer2

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
)

// claim is what a received packet says about an IP: that it is at MAC.
type claim struct {
	IP  netip.Addr
	MAC net.HardwareAddr
}

// arpClaim returns the claim one received Ethernet frame carrying ARP makes:
// any ARP packet, request or reply, says that its sender protocol address is
// at its sender hardware address (RFC 826; the conflicting packet of
// RFC 5227 §2.4; gratuitous ARP, RFC 5227 §3 and RFC 5944 §4.6, is the
// common case). Probes (sender protocol address 0.0.0.0, RFC 5227 §2.1.1)
// and packets with a zero, broadcast or multicast sender hardware address
// claim nothing. ok is false when the frame claims nothing.
func arpClaim(frame []byte) (c claim, ok bool) {
	var f ethernet.Frame
	if err := f.UnmarshalBinary(frame); err != nil || f.EtherType != ethernet.EtherTypeARP {
		return c, false
	}
	var p arp.Packet
	if err := p.UnmarshalBinary(f.Payload); err != nil ||
		p.ProtocolType != uint16(ethernet.EtherTypeIPv4) || !p.SenderIP.Is4() {
		return c, false
	}
	if !usableIP(p.SenderIP) || !unicastMAC(p.SenderHardwareAddr) {
		return c, false
	}
	return claim{IP: p.SenderIP, MAC: slices.Clone(p.SenderHardwareAddr)}, true
}

// ndpClaim returns the claim one received Ethernet frame carrying a Neighbor
// Advertisement makes (RFC 4861 §4.4): that its target address is at its
// target link-layer address option or, without that option, at the frame's
// Ethernet source. Solicited and unsolicited (RFC 4861 §7.2.6)
// advertisements claim alike. Frames that are not a valid advertisement (hop
// limit not 255, RFC 4861 §7.1.2; multicast target) claim nothing.
func ndpClaim(frame []byte) (c claim, ok bool) {
	const ipv6Hdr = 40
	if len(frame) < 14+ipv6Hdr || binary.BigEndian.Uint16(frame[12:14]) != 0x86dd || frame[14]>>4 != 6 || frame[14+6] != 58 {
		return c, false
	}
	ip := frame[14:]
	plen := int(binary.BigEndian.Uint16(ip[4:6]))
	if len(ip) < ipv6Hdr+plen || ip[7] != ndp.HopLimit {
		return c, false
	}
	m, err := ndp.ParseMessage(ip[ipv6Hdr : ipv6Hdr+plen])
	if err != nil {
		return c, false
	}
	na, ok := m.(*ndp.NeighborAdvertisement)
	if !ok {
		return c, false
	}
	target := na.TargetAddress.WithZone("")
	if !usableIP(target) {
		return c, false
	}
	mac := net.HardwareAddr(frame[6:12])
	for _, o := range na.Options {
		if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == ndp.Target {
			mac = lla.Addr
		}
	}
	if !unicastMAC(mac) {
		return c, false
	}
	return claim{IP: target, MAC: slices.Clone(mac)}, true
}

// usableIP reports whether ip could be an announced IP.
func usableIP(ip netip.Addr) bool {
	_, ok := normalize(ip)
	return ok
}

// unicastMAC reports whether mac is a 6-byte unicast, non-zero address.
func unicastMAC(mac net.HardwareAddr) bool {
	return len(mac) == 6 && mac[0]&1 == 0 && !bytes.Equal(mac, make(net.HardwareAddr, 6))
}

// claimed handles a claim read on interface ifname by a responder: it is
// an answer to the running probes of its IP (probe.go), and when ip
// is answered on that interface and mac is none of this node's interface
// addresses, another host answers for an IP this node announces. The
// conflict is counted (herald_layer2_conflicts_total{ip,interface}), and
// unless a conflict re-announcement of ip on ifname is still running or
// started less than Options.ConflictInterval ago, one gratuitous burst is
// sent there at once (replacing a takeover burst still running), the
// conflict is logged and Options.OnConflict is called. Claims while a
// conflict re-announcement runs are covered by it: it started after the
// first of them, so, against a burst of the same length, its last packet is
// the last one. The rate limit keeps two nodes that both believe they own
// ip (or a host that keeps claiming it) from sending bursts in a loop.
func (a *Announcer) claimed(ifname string, c claim) {
	a.probeHeard(ifname, c)
	if _, onIface := a.tbl.lookup(c.IP, ifname); !onIface {
		return
	}
	a.mu.Lock()
	l := a.links[ifname]
	var st *activeIP
	if l != nil {
		st = l.active[c.IP]
	}
	if st == nil || a.ownMACs[string(c.MAC)] {
		a.mu.Unlock()
		return
	}
	a.m.conflicts.WithLabelValues(c.IP.String(), ifname).Inc()
	now := time.Now()
	if (st.conflict && st.bursting()) || (!st.lastConflict.IsZero() && now.Sub(st.lastConflict) < a.opts.conflictInterval) {
		a.mu.Unlock()
		a.log.Debug("address conflict, re-announcement rate-limited", "interface", ifname, "ip", c.IP, "mac", c.MAC.String())
		return
	}
	st.lastConflict = now
	a.burst(l, c.IP, st, true)
	a.mu.Unlock()
	a.log.Warn("another host answers for an announced IP; re-announcing", "interface", ifname, "ip", c.IP, "mac", c.MAC.String())
	if a.opts.onConflict != nil {
		a.opts.onConflict(c.IP, c.MAC, ifname)
	}
}

package layer2

import (
	"net"
	"net/netip"
	"testing"
)

// rawNA builds an ICMPv6 Neighbor Advertisement byte by byte (RFC 4861
// §4.4) with flags (R=0x80, S=0x40, O=0x20) and a target link-layer address
// option when tll is not nil.
func rawNA(flags byte, target netip.Addr, tll net.HardwareAddr) []byte {
	b := []byte{136, 0, 0, 0, flags, 0, 0, 0}
	b = append(b, target.AsSlice()...)
	if tll != nil {
		b = append(b, 2, 1)
		b = append(b, tll...)
	}
	return b
}

func TestARPClaim(t *testing.T) {
	zero := make(net.HardwareAddr, 6)
	mcast := net.HardwareAddr{0x01, 0, 0x5e, 0, 0, 1}
	tests := []struct {
		name  string
		frame []byte
		want  claim
		ok    bool
	}{
		{"gratuitous request (RFC 5227 announcement)", rawARP(bcast, otherMAC, 1, otherMAC, vip4, zero, vip4), claim{vip4, otherMAC}, true},
		{"gratuitous reply (RFC 5944 §4.6)", rawARP(bcast, otherMAC, 2, otherMAC, vip4, otherMAC, vip4), claim{vip4, otherMAC}, true},
		{"reply to a request", rawARP(peerMAC, otherMAC, 2, otherMAC, vip4, peerMAC, peer4), claim{vip4, otherMAC}, true},
		{"request using the IP as source", rawARP(bcast, otherMAC, 1, otherMAC, vip4, zero, peer4), claim{vip4, otherMAC}, true},
		{"plain request claims its sender", rawARP(bcast, peerMAC, 1, peerMAC, peer4, zero, vip4), claim{peer4, peerMAC}, true},
		{"probe (sender 0.0.0.0, RFC 5227 §2.1.1)", rawARP(bcast, otherMAC, 1, otherMAC, netip.IPv4Unspecified(), zero, vip4), claim{}, false},
		{"zero sender MAC", rawARP(bcast, otherMAC, 2, zero, vip4, zero, vip4), claim{}, false},
		{"multicast sender MAC", rawARP(bcast, otherMAC, 2, mcast, vip4, zero, vip4), claim{}, false},
		{"truncated", rawARP(bcast, otherMAC, 2, otherMAC, vip4, otherMAC, vip4)[:30], claim{}, false},
		{"not ARP", rawNSFrame(ourMAC, peerMAC, peer6, vip6, 255, rawNA(0x20, vip6, otherMAC)), claim{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := arpClaim(tt.frame)
			if ok != tt.ok || got.IP != tt.want.IP || got.MAC.String() != tt.want.MAC.String() {
				t.Fatalf("arpClaim = %v %s, %v; want %v %s, %v", got.IP, got.MAC, ok, tt.want.IP, tt.want.MAC, tt.ok)
			}
		})
	}
}

func TestNDPClaim(t *testing.T) {
	unsolicited, err := ndpFrame(otherMAC, allNodesMAC, vip6, allNodes, unsolicitedNA(otherMAC, vip6))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		frame []byte
		want  claim
		ok    bool
	}{
		{"unsolicited (RFC 4861 §7.2.6)", unsolicited, claim{vip6, otherMAC}, true},
		{"solicited, target option", rawNSFrame(peerMAC, otherMAC, vip6, peer6, 255, rawNA(0x60, vip6, otherMAC)), claim{vip6, otherMAC}, true},
		{"target option differs from Ethernet source", rawNSFrame(allNodesMAC, peerMAC, vip6, allNodes, 255, rawNA(0x20, vip6, otherMAC)), claim{vip6, otherMAC}, true},
		{"no target option: Ethernet source", rawNSFrame(allNodesMAC, otherMAC, vip6, allNodes, 255, rawNA(0x20, vip6, nil)), claim{vip6, otherMAC}, true},
		{"hop limit not 255 (RFC 4861 §7.1.2)", rawNSFrame(allNodesMAC, otherMAC, vip6, allNodes, 64, rawNA(0x20, vip6, otherMAC)), claim{}, false},
		{"multicast target", rawNSFrame(allNodesMAC, otherMAC, vip6, allNodes, 255, rawNA(0x20, allNodes, otherMAC)), claim{}, false},
		{"solicitation", rawNSFrame(ourMAC, otherMAC, peer6, vip6, 255, rawNS(vip6, otherMAC)), claim{}, false},
		{"truncated", unsolicited[:60], claim{}, false},
		{"ARP", rawARP(bcast, otherMAC, 2, otherMAC, vip4, otherMAC, vip4), claim{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ndpClaim(tt.frame)
			if ok != tt.ok || got.IP != tt.want.IP || got.MAC.String() != tt.want.MAC.String() {
				t.Fatalf("ndpClaim = %v %s, %v; want %v %s, %v", got.IP, got.MAC, ok, tt.want.IP, tt.want.MAC, tt.ok)
			}
		})
	}
}

func FuzzClaims(f *testing.F) {
	f.Add(rawARP(bcast, otherMAC, 2, otherMAC, vip4, otherMAC, vip4))
	f.Add(rawNSFrame(allNodesMAC, otherMAC, vip6, netip.MustParseAddr("ff02::1"), 255, rawNA(0x20, vip6, otherMAC)))
	f.Fuzz(func(t *testing.T, frame []byte) {
		for _, fn := range []func([]byte) (claim, bool){arpClaim, ndpClaim} {
			if c, ok := fn(frame); ok && (!usableIP(c.IP) || !unicastMAC(c.MAC)) {
				t.Fatalf("claim %v %s accepted", c.IP, c.MAC)
			}
		}
	})
}

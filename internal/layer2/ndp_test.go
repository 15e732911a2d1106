package layer2

import (
	"bytes"
	"net"
	"net/netip"
	"testing"

	"github.com/mdlayher/ndp"
	"golang.org/x/net/bpf"
)

var (
	vip6  = netip.MustParseAddr("2001:db8::10")
	peer6 = netip.MustParseAddr("fe80::2")
)

// rawNS builds an ICMPv6 Neighbor Solicitation byte by byte (RFC 4861 §4.3),
// with a source link-layer address option when sll is not nil.
func rawNS(target netip.Addr, sll net.HardwareAddr) []byte {
	b := []byte{135, 0, 0, 0, 0, 0, 0, 0}
	b = append(b, target.AsSlice()...)
	if sll != nil {
		b = append(b, 1, 1)
		b = append(b, sll...)
	}
	return b
}

func TestHandleNDP(t *testing.T) {
	unspec := netip.IPv6Unspecified()
	na, err := ndp.MarshalMessage(unsolicitedNA(peerMAC, vip6))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		msg    []byte
		hop    int
		src    netip.Addr
		reason DropReason
	}{
		{"solicitation for announced IP", rawNS(vip6, peerMAC), 255, peer6, DropNone},
		{"hop limit unknown", rawNS(vip6, peerMAC), -1, peer6, DropNone},
		{"advertisement is not a solicitation", na, 255, peer6, DropNotRequest},
		{"hop limit below 255", rawNS(vip6, peerMAC), 64, peer6, DropBadHopLimit},
		{"DAD probe without source link-layer option", rawNS(vip6, nil), 255, unspec, DropNoSourceLinkLayer},
		{"unspecified source with source link-layer option", rawNS(vip6, peerMAC), 255, unspec, DropMalformed},
		{"our own solicitation", rawNS(vip6, ourMAC), 255, peer6, DropFromUs},
		{"unknown target", rawNS(netip.MustParseAddr("2001:db8::99"), peerMAC), 255, peer6, DropUnknownTarget},
		{"announced on another interface", rawNS(netip.MustParseAddr("2001:db8::11"), peerMAC), 255, peer6, DropWrongInterface},
		{"multicast target", rawNS(netip.MustParseAddr("ff02::1"), peerMAC), 255, peer6, DropMalformed},
		{"truncated", rawNS(vip6, peerMAC)[:12], 255, peer6, DropMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reply, _, reason := handleNDP(tt.msg, tt.hop, tt.src, eth0, fakeLookup)
			if reason != tt.reason {
				t.Fatalf("reason = %s, want %s", reason, tt.reason)
			}
			if (reply.NA != nil) != (reason == DropNone) {
				t.Fatalf("advertisement %v with reason %s", reply.NA, reason)
			}
			if reply.NA != nil && (reply.Dst != tt.src || !bytes.Equal(reply.DstMAC, peerMAC)) {
				t.Fatalf("advertisement sent to %s at %s, want the solicitation source %s at %s", reply.Dst, reply.DstMAC, tt.src, peerMAC)
			}
		})
	}
}

func TestHandleNDPReplyBytes(t *testing.T) {
	reply, target, reason := handleNDP(rawNS(vip6, peerMAC), 255, peer6, eth0, fakeLookup)
	if reason != DropNone || reply.Dst != peer6 || target != vip6 {
		t.Fatalf("reason %s dst %s target %s", reason, reply.Dst, target)
	}
	got, err := ndp.MarshalMessage(reply.NA)
	if err != nil {
		t.Fatal(err)
	}
	// Type 136, code 0, checksum (left to the kernel), flags S|O = 0x60,
	// target, target link-layer address option (type 2, length 1).
	want := unhex(t, "88 00 0000 | 60000000 | 20010db8000000000000000000000010 | 02 01 020000000001")
	if !bytes.Equal(got, want) {
		t.Fatalf("solicited advertisement\n got %x\nwant %x", got, want)
	}
}

func TestUnsolicitedNAGolden(t *testing.T) {
	got, err := ndp.MarshalMessage(unsolicitedNA(ourMAC, vip6))
	if err != nil {
		t.Fatal(err)
	}
	// Flags: Override only (0x20); R=0, S=0 (RFC 4861 §7.2.6).
	want := unhex(t, "88 00 0000 | 20000000 | 20010db8000000000000000000000010 | 02 01 020000000001")
	if !bytes.Equal(got, want) {
		t.Fatalf("unsolicited advertisement\n got %x\nwant %x", got, want)
	}
	if allNodes.String() != "ff02::1" {
		t.Fatalf("unsolicited advertisements go to %s", allNodes)
	}
}

// icmp6Checksum is an independent RFC 4443 §2.3 checksum: the one's
// complement sum over the IPv6 pseudo-header (RFC 8200 §8.1) and the message.
func icmp6Checksum(src, dst netip.Addr, msg []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	s, d := src.As16(), dst.As16()
	add(s[:])
	add(d[:])
	add([]byte{0, 0, byte(len(msg) >> 8), byte(len(msg)), 0, 0, 0, 58})
	add(msg)
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

func TestUnsolicitedNAFrameGolden(t *testing.T) {
	f, err := ndpFrame(ourMAC, allNodesMAC, vip6, allNodes, unsolicitedNA(ourMAC, vip6))
	if err != nil {
		t.Fatal(err)
	}
	icmp := unhex(t, "88 00 0000 | 20000000 | 20010db8000000000000000000000010 | 02 01 020000000001")
	c := icmp6Checksum(vip6, allNodes, icmp)
	icmp[2], icmp[3] = byte(c>>8), byte(c)
	want := unhex(t, "333300000001 020000000001 86dd | 60000000 0020 3a ff | "+
		"20010db8000000000000000000000010 | ff020000000000000000000000000001")
	want = append(want, icmp...)
	if !bytes.Equal(f, want) {
		t.Fatalf("unsolicited NA frame\n got %x\nwant %x", f, want)
	}
	// Self-check of the reference checksum: summing a message that carries
	// its checksum gives zero.
	if icmp6Checksum(vip6, allNodes, icmp) != 0 {
		t.Fatal("reference checksum does not verify")
	}
}

// rawNSFrame wraps rawNS in IPv6 (hop limit hop) and Ethernet.
func rawNSFrame(dstMAC, srcMAC net.HardwareAddr, src, dst netip.Addr, hop byte, msg []byte) []byte {
	b := append([]byte{}, dstMAC...)
	b = append(b, srcMAC...)
	b = append(b, 0x86, 0xdd, 0x60, 0, 0, 0, 0, byte(len(msg)), 58, hop)
	s, d := src.As16(), dst.As16()
	b = append(b, s[:]...)
	b = append(b, d[:]...)
	return append(b, msg...)
}

func TestHandleNDPFrame(t *testing.T) {
	snm := netip.MustParseAddr("ff02::1:ff00:10") // solicited-node group of 2001:db8::10
	snmMAC := net.HardwareAddr{0x33, 0x33, 0xff, 0, 0, 0x10}
	ns := rawNS(vip6, peerMAC)
	tests := []struct {
		name   string
		frame  []byte
		reason DropReason
	}{
		{"multicast to the solicited-node group", rawNSFrame(snmMAC, peerMAC, peer6, snm, 255, ns), DropNone},
		{"unicast probe to the target (NUD)", rawNSFrame(ourMAC, peerMAC, peer6, vip6, 255, ns), DropNone},
		{"unicast to another MAC", rawNSFrame(otherMAC, peerMAC, peer6, vip6, 255, ns), DropNotForUs},
		{"IPv6 destination neither target nor its group", rawNSFrame(snmMAC, peerMAC, peer6, netip.MustParseAddr("ff02::1:ff00:99"), 255, ns), DropNotForUs},
		{"hop limit 64", rawNSFrame(snmMAC, peerMAC, peer6, snm, 64, ns), DropBadHopLimit},
		{"unknown target", rawNSFrame(snmMAC, peerMAC, peer6, snm, 255, rawNS(netip.MustParseAddr("2001:db8::99"), peerMAC)), DropUnknownTarget},
		{"truncated payload", rawNSFrame(snmMAC, peerMAC, peer6, snm, 255, ns)[:70], DropMalformed},
		{"not IPv6", func() []byte {
			f := rawNSFrame(snmMAC, peerMAC, peer6, snm, 255, ns)
			f[12], f[13] = 0x08, 0x00
			return f
		}(), DropMalformed},
		{"next header not ICMPv6", func() []byte {
			f := rawNSFrame(snmMAC, peerMAC, peer6, snm, 255, ns)
			f[20] = 17
			return f
		}(), DropMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reply, _, reason := handleNDPFrame(tt.frame, eth0, fakeLookup)
			if reason != tt.reason {
				t.Fatalf("reason = %s, want %s", reason, tt.reason)
			}
			if (reply.NA != nil) != (reason == DropNone) {
				t.Fatalf("advertisement %v with reason %s", reply.NA, reason)
			}
		})
	}
}

func TestNSFilter(t *testing.T) {
	prog, err := nsFilter()
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(disassemble(t, prog))
	if err != nil {
		t.Fatal(err)
	}
	ns := rawNSFrame(ourMAC, peerMAC, peer6, vip6, 255, rawNS(vip6, peerMAC))
	na, err := ndpFrame(peerMAC, ourMAC, vip6, peer6, unsolicitedNA(peerMAC, vip6))
	if err != nil {
		t.Fatal(err)
	}
	arpReq := rawARP(bcast, peerMAC, 1, peerMAC, peer4, make(net.HardwareAddr, 6), vip4)
	for name, tc := range map[string]struct {
		frame []byte
		keep  bool
	}{
		"neighbor solicitation":  {ns, true},
		"neighbor advertisement": {na, true},
		"echo request":           {rawNSFrame(ourMAC, peerMAC, peer6, vip6, 64, []byte{128, 0, 0, 0, 0, 1, 0, 1}), false},
		"ARP":                    {arpReq, false},
	} {
		n, err := vm.Run(tc.frame)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if (n > 0) != tc.keep {
			t.Errorf("%s: filter returned %d, want keep=%v", name, n, tc.keep)
		}
	}
}

func disassemble(t *testing.T, raw []bpf.RawInstruction) []bpf.Instruction {
	t.Helper()
	out, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("filter does not disassemble")
	}
	return out
}

func FuzzHandleNDPFrame(f *testing.F) {
	snmMAC := net.HardwareAddr{0x33, 0x33, 0xff, 0, 0, 0x10}
	f.Add(rawNSFrame(snmMAC, peerMAC, peer6, netip.MustParseAddr("ff02::1:ff00:10"), 255, rawNS(vip6, peerMAC)))
	f.Add(rawNSFrame(ourMAC, peerMAC, peer6, vip6, 255, rawNS(vip6, nil)))
	f.Fuzz(func(t *testing.T, frame []byte) {
		reply, _, reason := handleNDPFrame(frame, eth0, fakeLookup)
		if (reply.NA != nil) != (reason == DropNone) {
			t.Fatalf("advertisement %v with reason %s", reply.NA, reason)
		}
	})
}

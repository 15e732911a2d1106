package layer2

import (
	"bytes"
	"encoding/hex"
	"net"
	"net/netip"
	"strings"
	"testing"
)

var (
	ourMAC   = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	peerMAC  = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
	otherMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x03}
	bcast    = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	vip4     = netip.MustParseAddr("198.51.100.10")
	peer4    = netip.MustParseAddr("198.51.100.100")
	eth0     = ifaceView{Name: "eth0", MAC: ourMAC}
)

// unhex decodes a hex string with spaces and '|' as separators.
func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.NewReplacer(" ", "", "|", "", "\n", "", "\t", "").Replace(s))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// rawARP builds an Ethernet+ARP frame byte by byte (RFC 826 layout), without
// the code under test.
func rawARP(dst, src net.HardwareAddr, op byte, sha net.HardwareAddr, spa netip.Addr, tha net.HardwareAddr, tpa netip.Addr) []byte {
	b := append([]byte{}, dst...)
	b = append(b, src...)
	b = append(b, 0x08, 0x06)             // EtherType ARP
	b = append(b, 0, 1, 0x08, 0x00, 6, 4) // htype Ethernet, ptype IPv4, hlen, plen
	b = append(b, 0, op)
	b = append(b, sha...)
	b = append(b, spa.AsSlice()...)
	b = append(b, tha...)
	b = append(b, tpa.AsSlice()...)
	return append(b, make([]byte, 18)...) // pad to 60 bytes
}

// fakeLookup announces vip4 and 2001:db8::10 on eth0 only and 198.51.100.11
// on eth1 only.
func fakeLookup(ip netip.Addr, ifname string) (bool, bool) {
	switch ip {
	case vip4, netip.MustParseAddr("2001:db8::10"):
		return true, ifname == "eth0"
	case netip.MustParseAddr("198.51.100.11"), netip.MustParseAddr("2001:db8::11"):
		return true, ifname == "eth1"
	}
	return false, false
}

func TestHandleARP(t *testing.T) {
	zero := make(net.HardwareAddr, 6)
	tests := []struct {
		name   string
		frame  []byte
		reason DropReason
	}{
		{"broadcast request for announced IP", rawARP(bcast, peerMAC, 1, peerMAC, peer4, zero, vip4), DropNone},
		{"unicast request to our MAC", rawARP(ourMAC, peerMAC, 1, peerMAC, peer4, ourMAC, vip4), DropNone},
		{"probe with zero sender IP (RFC 5227)", rawARP(bcast, peerMAC, 1, peerMAC, netip.MustParseAddr("0.0.0.0"), zero, vip4), DropNone},
		{"reply is not a request", rawARP(bcast, peerMAC, 2, peerMAC, peer4, zero, vip4), DropNotRequest},
		{"unicast to another MAC", rawARP(otherMAC, peerMAC, 1, peerMAC, peer4, otherMAC, vip4), DropNotForUs},
		{"our own frame", rawARP(bcast, ourMAC, 1, ourMAC, vip4, zero, vip4), DropFromUs},
		{"gratuitous from another host", rawARP(bcast, peerMAC, 1, peerMAC, vip4, zero, vip4), DropGratuitous},
		{"unknown target", rawARP(bcast, peerMAC, 1, peerMAC, peer4, zero, netip.MustParseAddr("198.51.100.99")), DropUnknownTarget},
		{"announced on another interface", rawARP(bcast, peerMAC, 1, peerMAC, peer4, zero, netip.MustParseAddr("198.51.100.11")), DropWrongInterface},
		{"truncated", rawARP(bcast, peerMAC, 1, peerMAC, peer4, zero, vip4)[:20], DropMalformed},
		{"not ARP ethertype", func() []byte {
			b := rawARP(bcast, peerMAC, 1, peerMAC, peer4, zero, vip4)
			b[12], b[13] = 0x08, 0x00
			return b
		}(), DropMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reply, _, reason := handleARP(tt.frame, eth0, fakeLookup)
			if reason != tt.reason {
				t.Fatalf("reason = %s, want %s", reason, tt.reason)
			}
			if (reply != nil) != (reason == DropNone) {
				t.Fatalf("reply %x with reason %s", reply, reason)
			}
		})
	}
}

func TestHandleARPReplyBytes(t *testing.T) {
	req := rawARP(bcast, peerMAC, 1, peerMAC, peer4, make(net.HardwareAddr, 6), vip4)
	reply, target, reason := handleARP(req, eth0, fakeLookup)
	if reason != DropNone || target != vip4 {
		t.Fatalf("reason %s target %s", reason, target)
	}
	// Reply to the requester: our MAC/VIP as sender, requester as target.
	want := rawARP(peerMAC, ourMAC, 2, ourMAC, vip4, peerMAC, peer4)
	if !bytes.Equal(reply, want) {
		t.Fatalf("reply\n got %x\nwant %x", reply, want)
	}
}

func TestGratuitousARPGolden(t *testing.T) {
	frames, err := gratuitousARP(ourMAC, vip4)
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("00", 18)
	wantReq := unhex(t, "ffffffffffff 020000000001 0806 | 0001 0800 06 04 0001 | 020000000001 c633640a | 000000000000 c633640a"+pad)
	wantRep := unhex(t, "ffffffffffff 020000000001 0806 | 0001 0800 06 04 0002 | 020000000001 c633640a | 020000000001 c633640a"+pad)
	if !bytes.Equal(frames[0], wantReq) {
		t.Errorf("gratuitous request\n got %x\nwant %x", frames[0], wantReq)
	}
	if !bytes.Equal(frames[1], wantRep) {
		t.Errorf("gratuitous reply\n got %x\nwant %x", frames[1], wantRep)
	}
	// Our own gratuitous packets, seen again by the raw socket, are ignored.
	for i, f := range frames {
		if _, _, r := handleARP(f, eth0, fakeLookup); r == DropNone {
			t.Errorf("frame %d of our own burst would be answered", i)
		}
	}
}

func TestDropReasonString(t *testing.T) {
	seen := map[string]bool{}
	for r := DropNone; r <= DropBadHopLimit; r++ {
		s := r.String()
		if s == "" || s == "unknown" || seen[s] {
			t.Errorf("DropReason(%d).String() = %q", r, s)
		}
		seen[s] = true
	}
	if DropReason(200).String() != "unknown" {
		t.Error("out of range reason not reported as unknown")
	}
}

func FuzzHandleARP(f *testing.F) {
	f.Add(rawARP(bcast, peerMAC, 1, peerMAC, peer4, make(net.HardwareAddr, 6), vip4))
	f.Add(rawARP(ourMAC, peerMAC, 2, peerMAC, peer4, ourMAC, vip4))
	f.Fuzz(func(t *testing.T, frame []byte) {
		reply, _, reason := handleARP(frame, eth0, fakeLookup)
		if (reply != nil) != (reason == DropNone) {
			t.Fatalf("reply %x with reason %s", reply, reason)
		}
	})
}

func BenchmarkHandleARP(b *testing.B) {
	req := rawARP(bcast, peerMAC, 1, peerMAC, peer4, make(net.HardwareAddr, 6), vip4)
	tb := newTable()
	tb.setOwner("ns/svc", map[netip.Addr][]string{vip4: nil})
	b.ReportAllocs()
	for b.Loop() {
		if _, _, r := handleARP(req, eth0, tb.lookup); r != DropNone {
			b.Fatal(r)
		}
	}
}

package lab

import (
	"net"
	"net/netip"
	"testing"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
)

// TestParseARPFrame: an Ethernet frame carrying ARP decodes to its
// fields; a gratuitous one (sender = target) is a claim, an ordinary
// request is not; other EtherTypes are skipped.
func TestParseARPFrame(t *testing.T) {
	node := net.HardwareAddr{2, 0, 198, 51, 100, 12}
	svc, cl := netip.MustParseAddr("198.51.100.200"), netip.MustParseAddr("198.51.100.100")
	build := func(op arp.Operation, sender, target netip.Addr, et ethernet.EtherType) []byte {
		p, err := arp.NewPacket(op, node, sender, ethernet.Broadcast, target)
		if err != nil {
			t.Fatal(err)
		}
		pb, err := p.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		fb, err := (&ethernet.Frame{Destination: ethernet.Broadcast, Source: node, EtherType: et, Payload: pb}).MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return fb
	}
	f, ok := parseARPFrame(build(arp.OperationRequest, svc, svc, ethernet.EtherTypeARP))
	if !ok || f.SourceMAC.String() != node.String() || f.SenderIP != svc || f.TargetIP != svc || !f.Gratuitous() || !f.Claims() {
		t.Errorf("gratuitous request: %+v %v", f, ok)
	}
	f, ok = parseARPFrame(build(arp.OperationReply, svc, cl, ethernet.EtherTypeARP))
	if !ok || f.Gratuitous() || !f.Claims() {
		t.Errorf("reply: %+v %v", f, ok)
	}
	f, ok = parseARPFrame(build(arp.OperationRequest, NodeAddr(2), cl, ethernet.EtherTypeARP))
	if !ok || f.Claims() {
		t.Errorf("ordinary request: %+v %v", f, ok)
	}
	if _, ok := parseARPFrame(build(arp.OperationReply, svc, cl, ethernet.EtherTypeIPv4)); ok {
		t.Error("an IPv4 frame parsed as ARP")
	}
	if _, ok := parseARPFrame([]byte{1, 2, 3}); ok {
		t.Error("a runt parsed")
	}
}

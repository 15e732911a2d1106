package announce

import (
	"net/netip"
	"testing"
)

func TestEventMessagesRoundTrip(t *testing.T) {
	ip, other := netip.MustParseAddr("198.51.100.200"), netip.MustParseAddr("198.51.100.201")
	msg := AnnounceFailedMessage(ip.String(), "n1", "layer2", "node n1 won the election for 198.51.100.200 but ...")
	if msg != `failed to announce 198.51.100.200 from node "n1" with protocol "layer2": node n1 won the election for 198.51.100.200 but ...` {
		t.Errorf("announceFailed message %q", msg)
	}
	for _, tc := range []struct {
		ip             netip.Addr
		node, protocol string
		ok             bool
	}{{ip, "n1", "layer2", true}, {other, "n1", "layer2", false}, {ip, "n2", "layer2", false}, {ip, "n1", "bgp", false}} {
		if d, ok := ParseAnnounceFailed(msg, tc.ip, tc.node, tc.protocol); ok != tc.ok || (ok && d != "node n1 won the election for 198.51.100.200 but ...") {
			t.Errorf("ParseAnnounceFailed(%s, %s, %s) = %q, %v; want ok %v", tc.ip, tc.node, tc.protocol, d, ok, tc.ok)
		}
	}
	assigned := NodeAssignedMessage("n1", "layer2", []string{"198.51.100.200", "2001:db8::1"})
	if assigned != `announcing from node "n1" with protocol "layer2": 198.51.100.200, 2001:db8::1` {
		t.Errorf("nodeAssigned message %q", assigned)
	}
	if !NodeAssignedIncludes(assigned, "n1", "layer2", ip) || NodeAssignedIncludes(assigned, "n1", "layer2", other) ||
		NodeAssignedIncludes(assigned, "n2", "layer2", ip) || NodeAssignedIncludes(assigned, "n1", "bgp", ip) {
		t.Error("NodeAssignedIncludes")
	}
}

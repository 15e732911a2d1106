package announce

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// The speaker's per-address event messages on a Service. They are written
// and read here only, so that the speaker (which emits them) and kubectl
// herald (which reads them back to learn what the speaker could not do) never
// disagree on the text.

// AnnounceFailedMessage is the announceFailed event message for ip, which
// node could not announce with protocol ("layer2", "bgp"): `failed to
// announce <ip> from node "<node>" with protocol "<protocol>": <detail>`.
func AnnounceFailedMessage(ip, node, protocol, detail string) string {
	return fmt.Sprintf("failed to announce %s from node %q with protocol %q: %s", ip, node, protocol, detail)
}

// ParseAnnounceFailed returns the detail of an [AnnounceFailedMessage] for
// ip, node and protocol; ok false when msg is not one.
func ParseAnnounceFailed(msg string, ip netip.Addr, node, protocol string) (detail string, ok bool) {
	return strings.CutPrefix(msg, AnnounceFailedMessage(ip.String(), node, protocol, ""))
}

// NodeAssignedMessage is the nodeAssigned event message: node announces ips
// with protocol, `announcing from node "<node>" with protocol "<protocol>":
// <ip>, <ip>`.
func NodeAssignedMessage(node, protocol string, ips []string) string {
	return fmt.Sprintf("announcing from node %q with protocol %q: %s", node, protocol, strings.Join(ips, ", "))
}

// NodeAssignedIncludes reports whether msg is a [NodeAssignedMessage] of
// node and protocol that names ip.
func NodeAssignedIncludes(msg, node, protocol string, ip netip.Addr) bool {
	rest, ok := strings.CutPrefix(msg, "announcing from node "+strconv.Quote(node)+" with protocol "+strconv.Quote(protocol)+": ")
	return ok && slices.Contains(strings.Split(rest, ", "), ip.String())
}

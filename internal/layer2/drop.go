package layer2

// DropReason says why a received ARP or NDP packet was not answered.
// DropNone means it was answered.
type DropReason uint8

// Drop reasons returned by the request handlers.
const (
	// DropNone: the packet is a request for an IP announced on this
	// interface; a reply was produced.
	DropNone DropReason = iota
	// DropMalformed: the bytes do not parse as an Ethernet/ARP frame or an
	// NDP message, or violate RFC 4861 §7.1.1 validity rules.
	DropMalformed
	// DropNotRequest: an ARP packet that is not a request (RFC 826 ar$op),
	// or an NDP message that is not a Neighbor Solicitation.
	DropNotRequest
	// DropNotForUs: the Ethernet destination is neither broadcast nor this
	// interface's MAC address.
	DropNotForUs
	// DropFromUs: the sender hardware address is this interface's own MAC
	// (our own packets seen by the raw socket).
	DropFromUs
	// DropGratuitous: a gratuitous ARP from another host (sender IP equals
	// target IP); it announces, it does not ask.
	DropGratuitous
	// DropUnknownTarget: the target IP is not announced by this node.
	DropUnknownTarget
	// DropWrongInterface: the target IP is announced, but not on the
	// interface the request arrived on.
	DropWrongInterface
	// DropNoSourceLinkLayer: a Neighbor Solicitation without a source
	// link-layer address option, for example duplicate address detection
	// (RFC 4862 §5.4.2); it is not answered, like MetalLB.
	DropNoSourceLinkLayer
	// DropBadHopLimit: an NDP message whose IPv6 hop limit is not 255
	// (RFC 4861 §7.1.1): it may come from off-link.
	DropBadHopLimit
)

var dropNames = [...]string{
	DropNone:              "none",
	DropMalformed:         "malformed",
	DropNotRequest:        "notRequest",
	DropNotForUs:          "notForUs",
	DropFromUs:            "fromUs",
	DropGratuitous:        "gratuitous",
	DropUnknownTarget:     "unknownTarget",
	DropWrongInterface:    "wrongInterface",
	DropNoSourceLinkLayer: "noSourceLinkLayer",
	DropBadHopLimit:       "badHopLimit",
}

// String returns the camelCase name of the reason, for logs.
func (r DropReason) String() string {
	if int(r) < len(dropNames) {
		return dropNames[r]
	}
	return "unknown"
}

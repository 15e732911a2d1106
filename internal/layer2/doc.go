// Package layer2 is the network I/O of Herald's layer 2 announcer: it answers
// ARP requests (RFC 826) and IPv6 Neighbor Solicitations (RFC 4861) for the
// Service IPs this node has been elected to announce, and sends a burst of
// gratuitous ARP / unsolicited neighbor advertisements when an IP starts being
// announced here (takeover), so that clients and switches move to this node's
// MAC address quickly.
//
// The package makes no decisions: the speaker glue tells an [Announcer] which
// owner (a Service key) announces which IP on which interfaces, through
// [Announcer.Announce], [Announcer.Withdraw] or the declarative
// [Announcer.SetOwner]. Several owners may announce the same IP; the IP stays
// announced until the last owner withdraws it (refcount).
//
// No kernel state is changed: no address is added to an interface, no route
// or neighbour entry is written. The responders use raw sockets (AF_PACKET for
// ARP, ICMPv6 for NDP) and therefore need CAP_NET_RAW.
//
// The request handling functions (handleARP, handleNDP) are pure: they take
// the received bytes and the node's view of the interface and return either a
// reply or a typed [DropReason], so they are table-tested without root.
//
// Unlike MetalLB, the NDP responder reads solicitations from an AF_PACKET
// socket (with a BPF filter for Neighbor Solicitations), so it also answers
// the unicast neighbour-unreachability probes a client sends to the Service
// IP, and it sends advertisements with the Service IP as IPv6 source, as a
// host owning the address does. An ICMPv6 socket only holds the
// solicited-node multicast memberships.
package layer2

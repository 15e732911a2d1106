// Package layer2 is the network I/O of Herald's layer 2 announcer: it answers
// ARP requests (RFC 826) and IPv6 Neighbor Solicitations (RFC 4861) for the
// Service IPs this node has been elected to announce, and sends a burst of
// gratuitous ARP / unsolicited neighbor advertisements when an IP starts being
// announced here (takeover), so that clients and switches move to this node's
// MAC address quickly.
//
// # Use
//
// The package makes no decisions: the speaker glue tells an [Announcer] which
// owner (a Service key, "namespace/name") announces which IP on which
// interfaces, and the Announcer applies it idempotently:
//
//	a, err := layer2.New(log, registry, layer2.Options{})
//	go a.Run(ctx)                                        // owns every goroutine and socket
//	a.SetOwner("ns/svc", []announce.L2Target{{IP: ip}})  // declarative, per Service
//	a.SetOwner("ns/svc", nil)                            // withdraw everything of ns/svc
//	a.Interfaces(ip)                                     // where ip is answered now
//	a.Owners(ip)                                         // which Services announce ip
//	a.EligibleInterfaces()                               // where IPs can be answered (nil before the first scan)
//	a.Reannounce()                                       // burst again for every answered IP
//
// The targets are the decision's (announce.Decision.L2Targets), so the
// speaker glue hands them over unconverted.
//
// Several owners may announce the same IP; the IP stays announced until the
// last owner withdraws it (refcount). An empty interface list means every
// eligible interface; the interfaces of several owners are unioned. A
// withdrawal takes effect for the next received request. An IP that starts
// being answered on an interface (new announcement, or a new eligible
// interface) gets a gratuitous burst there; a second owner of an IP already
// answered does not.
//
// # Interfaces
//
// An interface is eligible when it is up, not enslaved (bond, bridge or team
// port), not NOARP, has an Ethernet address and matches none of
// [Options.ExcludeInterfaces] ([DefaultExcludeInterfaces], MetalLB's list by default).
// ARP also needs IFF_BROADCAST; NDP needs a usable (not tentative) IPv6
// link-local address. No IPv4 address is needed on the interface. The
// interfaces are listed through netlink every [Options.RescanInterval], and
// every second while a link-local address is still tentative. The interfaces
// with an open responder are [Announcer.EligibleInterfaces]; the speaker
// decides with them (announce.Input.Interfaces) so that an elected node with
// none of an L2Advertisement's interfaces reports announceFailed instead of
// claiming an announcement nobody answers, and [Options.OnInterfaces] tells
// it when they change.
//
// # Wire behaviour
//
// No kernel state is changed: no address is added to an interface, no route
// or neighbour entry is written. The responders use raw sockets and need
// CAP_NET_RAW:
//   - ARP: an AF_PACKET socket bound to EtherType 0x0806. Requests that are
//     broadcast or unicast to the interface MAC and target an announced IP
//     are answered with the interface MAC. A gratuitous packet is an ARP
//     request (sender IP = target IP, zero target MAC, RFC 5227 §2.3) plus an
//     ARP reply (target MAC = sender MAC, RFC 5944 §4.6), both broadcast.
//   - NDP: an AF_PACKET socket bound to EtherType 0x86dd with a BPF filter for
//     Neighbor Solicitations receives solicitations (multicast and the unicast
//     neighbour-unreachability probes MetalLB misses) and sends solicited
//     advertisements (S=1, O=1, target link-layer option) from the Service IP
//     itself, straight to the solicitor's MAC. An ICMPv6 socket
//     (mdlayher/ndp) holds the solicited-node multicast memberships,
//     refcounted per group. A gratuitous packet is an unsolicited neighbor
//     advertisement (O=1, S=0) to ff02::1 (RFC 4861 §7.2.6).
//
// Solicitations without a source link-layer address option (duplicate
// address detection) are not answered, like MetalLB.
//
// [Announcer.Reannounce] sends the burst again for every IP answered, on
// every interface it is answered on (for example after a partition healed).
//
// # Conflicts
//
// The responders also read what other hosts claim: every ARP packet says
// its sender protocol address is at its sender hardware address (RFC 826,
// RFC 5227 §2.4), every Neighbor Advertisement that its target is at its
// target link-layer address (RFC 4861 §4.4; the NDP socket's filter keeps
// advertisements too). A claim for an IP answered on the receiving
// interface from a MAC address that is none of the node's interfaces' is a
// conflict: it is counted, and unless a conflict burst for that IP and
// interface is still running or started less than
// [Options.ConflictInterval] ago, a gratuitous burst is sent there at once,
// the conflict is logged and [Options.OnConflict] is called. On a switched
// segment only broadcast and multicast claims (gratuitous ARP, ARP requests
// from the IP, unsolicited advertisements) reach the node. The request handlers
// (handleARP, handleNDPFrame) are pure: they take the received bytes and
// return a reply or a typed [DropReason], so they are table-tested without
// root.
//
// # Metrics
//
// Counters with MetalLB's names, labelled by ip, registered on the
// prometheus.Registerer given to [New]: metallb_layer2_requests_received and
// metallb_layer2_responses_sent (requests for an IP announced on the
// receiving interface, and the replies sent), metallb_layer2_gratuitous_sent
// (every gratuitous ARP frame or unsolicited advertisement), and Herald's
// herald_layer2_conflicts_total{ip,interface} (every conflicting claim
// received). The series of an IP are deleted when it is no longer announced
// anywhere.
package layer2

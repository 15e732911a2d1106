// Package announce is the speaker's decision function: given one
// configuration snapshot, this node, every node, the live speakers, one
// Service and its endpoints, [Decide] returns which of the Service's IPs this
// node announces, in which mode (layer 2 and/or BGP), on which interfaces or
// with which BGP paths, and, when it does not announce, a typed [Reason].
//
// The package is pure: no client, no sockets, no goroutines, no clock. The
// only file that imports Kubernetes API types is convert.go, whose
// converters ([ServiceFromK8s], [EndpointsFromSlices], [NodeFromK8s]) turn
// informer objects into the small views the algorithm works on.
//
// # Layer 2 election
//
// In layer 2 mode exactly one live, eligible node announces each IP. Every
// speaker runs the same deterministic election, so no coordination is
// needed. The election is per IP, not per Service (MetalLB elects per
// Service using its first IP, which lets Services sharing an IP elect
// different nodes: metallb#968). Candidates for an IP are the nodes that
//
//   - are live (Input.Live; nil means every node is live, as in MetalLB
//     without memberlist),
//   - do not have the NetworkUnavailable condition,
//   - do not carry the node.kubernetes.io/exclude-from-external-load-balancers
//     label (unless Options.IgnoreExcludeLB),
//   - are selected by the nodeSelectors of an L2Advertisement that covers
//     one of the Services holding the IP, and
//   - for externalTrafficPolicy Local, run a serving endpoint of that
//     Service.
//
// They are ranked by (1) how many of the Services holding the IP they can
// serve, descending; (2) the preferredNodeSelectors score (sum of the
// weights of every matching preference of every advertisement that selects
// the node), descending; (3) SHA-256 of node name + "#" + IP text,
// ascending. The first node wins. Rule (1) makes the candidate set of a
// shared IP the union of its Services' candidate sets and still elects one
// node for the IP, preferring a node that serves all of them; it only
// matters when Input.Sharing is given and the Services' candidate sets
// differ (externalTrafficPolicy Local Services with endpoints on different
// nodes). For a single Service with one IP and no preferences, the winner
// is the node MetalLB elects.
//
// Rendezvous hashing (rule 3) makes failover minimal: removing a node that
// is not the winner of an IP never moves that IP, removing the winner moves
// only the IPs it won, and adding a node moves an IP only to that node.
//
// # Balanced layer 2 election
//
// [ElectBalanced] is rendezvous hashing with bounded loads over the whole
// set of layer 2 addresses ([L2Ballots]): no node above [BalancedCapacity]
// among the nodes tied on rules (1) and (2), at the price of a few extra
// moves when a node fails and of coupling between addresses. Decide follows
// its result when given Input.L2Winners. See docs/l2-failover.md.
//
// # BGP
//
// Every eligible node announces. For each IP and each BGPAdvertisement of
// its pool that matches the Service and this node, [Decide] emits one
// [bgp.Path]: the IP masked to aggregationLength / aggregationLengthV6, the
// advertisement's communities (standard and large, aliases already
// resolved by internal/config), LOCAL_PREF and the peer restriction. Paths
// are per Service and per advertisement; the same prefix from several
// advertisements or Services is merged by [bgp.MergePaths] (communities
// unioned, withdrawn when the last reason goes), which the caller applies to
// the paths of every Service.
//
// Which BGP sessions a node opens is decided here too: [Sessions] turns
// the snapshot's BGPPeers that select the node into [bgp.PeerConfig]s with
// one router ID ([RouterID]). It cannot fail, because config.Build refuses
// every peer the BGP backend cannot open.
//
// Reasons use MetalLB's names (notOwner, noMatchingAdvertisement, ...) so
// logs and events read the same.
package announce

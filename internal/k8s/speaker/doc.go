// Package speaker is the Kubernetes side of Herald's speaker: it watches
// the objects a node's announcements depend on, runs the pure decision
// (internal/announce) for every Service, hands the result to the announcers
// (layer 2 and BGP) and writes what users read back: ServiceL2Status and
// ServiceBGPStatus objects, Service events, the ConfigurationState
// "speaker-<node>" and the metallb_speaker_announced metric.
//
// # Data flow
//
// One controller-runtime controller with a single worker serialises all
// work, so the applied state needs no locking against itself. Its queue holds
// Service keys ("namespace/name") and a few keys with an empty namespace:
//
//   - "config": read the metallb.io objects (internal/k8s/configload), build
//     this node's snapshot and keep the last good one; when the snapshot
//     changed semantically (config.Snapshot.Equal), re-decide every Service.
//     Peers are re-translated (internal/bgpconfig) and applied when they
//     differ from the applied ones.
//   - "all": reload the configuration and re-decide every Service. Queued on
//     relevant Node changes (labels, NetworkUnavailable, readiness, taints,
//     addresses) and when the live speakers change (Members.Changes).
//   - "pods": list the speaker Pods (--ml-labels) and hand their
//     podIP:port to Members.SetPeers; repeated every Options.DiscoveryResync.
//
// A Service event, or an event of one of its EndpointSlices, queues that
// Service and every Service holding one of its IPs (a shared IP is elected
// once for all its Services, so all of them are re-decided together).
//
// For each Service the reconciler gathers announce.Input from the cache
// (the Service, its EndpointSlices through a field index, every Node, the
// Services sharing its IPs, the live speakers), calls announce.Decide, and
// applies: L2Announcer.SetOwner(service, targets) for layer 2, and the union of
// every Service's BGP paths, merged with bgp.MergePaths, to bgp.Speaker.SetPaths.
// Both are declarative; withdrawing is announcing less.
//
// Liveness comes from memberlist (Options.Members) or, when memberlist is
// off, from Node conditions (members.LiveFromNodeConditions: Ready, network
// available, not tainted out-of-service).
//
// # What users see
//
//   - ServiceL2Status (generateName l2-) in Herald's namespace for each
//     Service this node announces in layer 2, with the interfaces the IPs are
//     answered on; deleted when the node stops announcing. ServiceBGPStatus
//     (generateName bgp-) for each Service announced over BGP, listing the
//     peers that receive it. Both are labelled metallb.io/node,
//     metallb.io/service-name and metallb.io/service-namespace and owned by
//     the speaker Pod when it exists.
//   - Service events (reporting component metallb-speaker): nodeAssigned
//     ("announcing from node X with protocol layer2|bgp") when this node
//     starts announcing the Service in a protocol, announceFailed when an
//     announcer rejects the announcement.
//   - BGPPeer events: sessionEstablished / sessionDown when this node's
//     session changes state, and peerNotApplied when a peer cannot be
//     translated (dynamicASN). Session states are also logged.
//   - Why a Service IP is not announced (announce.Reason, MetalLB's names)
//     is logged at debug level.
//   - metallb_speaker_announced{service,protocol,node,ip} = 1 per announced
//     IP and protocol; the series is deleted on withdrawal.
package speaker

// Package speaker is the Kubernetes side of Herald's speaker: it watches
// the objects a node's announcements depend on, runs the pure decision
// (internal/announce) for every Service, hands the result to the announcers
// (layer 2 and BGP) and writes what users read back: ServiceL2Status and
// ServiceBGPStatus objects, Service events, the ConfigurationState
// "speaker-<node>" and the metallb_speaker_announced metric.
//
// # Data flow
//
// One controller-runtime controller with a single worker serialises the
// decisions, so the decided state needs no locking against itself. Its queue holds
// Service keys ("namespace/name") and a few keys with an empty namespace:
//
//   - "config": read the metallb.io objects (internal/k8s/configload), build
//     this node's snapshot and keep the last good one; when the snapshot
//     changed semantically (config.Snapshot.Equal), re-decide every Service.
//     Peers are re-translated (announce.Sessions) and applied when they
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
// With Options.BalancedL2 (--l2-election=balanced, balanced.go) those
// events queue nothing at once: the Services are recorded as pending and
// the special key "l2balance" is queued after Options.BalanceDelay, so a
// burst costs one pass. The pass recomputes the balanced winners over every
// Service (announce.ElectBalancedServices) and decides the pending Services
// and those holding an address whose winner changed
// (announce.BalancedElection.Redecide), with the winners as
// Input.L2Winners; the others are not touched. "all" recomputes first and
// decides every Service, without the delay.
//
// For each Service the reconciler gathers announce.Input from the cache
// (the Service's and its EndpointSlices' records, already converted,
// through the informers' indexers (transform.go), every Node, the
// Services sharing its IPs from a view per address that the decisions of
// its holders share until one of them changes (sharedview.go), the live
// speakers), calls announce.Decide, and
// applies L2Announcer.SetOwner(service, targets) for layer 2 at once. The
// rest leaves the worker without waiting, so that announcing never waits for
// an API write and a burst (start-up, a node failing over a thousand
// Services to this one) is announced at the speed of the decisions:
//
//   - BGP paths go to the path applier (paths.go), a goroutine that merges
//     every Service's paths with bgp.MergePaths and hands the union to
//     bgp.Speaker.SetPaths; changes that arrive while it applies are
//     coalesced into its next pass. A failure is retried with backoff
//     (100 ms to 10 s) and reported once per run of failures as
//     announceFailed on the Services it concerns.
//   - Status objects go to the status writer (statuswriter.go): the desired
//     ServiceL2Status/ServiceBGPStatus per Service, written by 4 workers
//     from a rate-limited queue. This node's objects are listed once at
//     start-up (adopting or deleting what an earlier speaker left); after
//     that the writer's own record of what it wrote is used, so a decision
//     that changes nothing costs no request. The writer also watches this
//     node's objects (statuswatch.go): an event that is not the echo of its
//     own write (an object deleted, edited, relabelled or created by
//     someone else) queues the Service again and the objects converge to
//     the decision.
//
// All announcing is declarative; withdrawing is announcing less.
//
// BGPSessionState (sessionstate.go): the applied peers, the BGP state
// changes (Options.PeerStates), the BFD changes and the periodic
// PeerStates poll (counters, last error) go to the session writer, one
// goroutine that keeps one herald.io BGPSessionState per configured peer,
// named sessionStateName(node, peer), owned by the Node, coalesced per
// object and written at most once per Options.SessionStateInterval (1 s).
// Before its first write it lists this node's objects, adopting those of
// configured peers and deleting the rest.
//
// BFD (bfd.go): with the BGP peers the glue applies announce.BFDSessions
// through Options.BFD (internal/bfd/bfdnet, wired by speaker/main.go). A
// BFD session going from Up to Down (Options.BFDChanges) resets that BGP
// session at once (bgp.Speaker.ResetPeer, RFC 5882 §4.3) with a
// bfdSessionDown event on the BGPPeer; Up gives bfdSessionUp.
//
// Liveness comes from memberlist (Options.Members) or, when memberlist is
// off, from Node conditions (announce.LiveFromNodeConditions: Ready, network
// available, not tainted out-of-service).
//
// Start-up and partitions, with memberlist:
//
//   - The first configuration snapshot activates memberlist
//     (Members.Activate): a speaker that cannot load its configuration is no
//     member and is never elected. A transient reference (a BGPPeer's
//     missing password Secret) leaves out only that object
//     (config.Options.DropTransient), as long as it is not in force.
//   - Until the first snapshot the speaker is not ready (Controller.Ready,
//     registered by Setup as the manager's readiness check
//     "configuration"), so a DaemonSet rollout stops at a node that cannot
//     load its configuration.
//   - Until Members.Joined, layer 2 takes over nothing (the decision's L2
//     targets are dropped, reason memberlistNotJoined in debug logs): the
//     live set then holds only the members seen so far, and other speakers
//     whose Pods run but that are not members yet would count as dead. BGP
//     is announced at once.
//   - Until the layer 2 announcer has listed the node's interfaces
//     (L2Announcer.EligibleInterfaces is nil), layer 2 takes over nothing
//     either (reason interfacesNotListed); its first scan and every later
//     change re-decide every Service (Controller.L2InterfacesChanged). The
//     interfaces go into the decision (announce.Input.Interfaces): an
//     elected node that has none of its L2Advertisements' interfaces gets
//     noMatchingInterface and announces nothing, so nobody does (as in
//     MetalLB).
//   - When Members.Rejoins grows (a speaker that had been declared failed is
//     back: a healed partition), the "all" pass re-decides every Service and
//     then asks the layer 2 announcer, if it has a Reannounce method, to
//     re-send one gratuitous burst for every address it owns.
//
// # Dependencies
//
// The package depends on the pure core (internal/announce, internal/config,
// internal/bgp's types and merge functions) and on Kubernetes client
// libraries, never on a backend: memberlist, the layer 2 announcer and the
// BGP speaker reach it through its own interfaces (Members, L2Announcer,
// bgp.Speaker), and layer 2 targets are the decision's announce.L2Target,
// handed over unconverted. Only the speaker binary (speaker/main.go) imports
// internal/members, internal/layer2 and internal/bgp/gobgp; the depguard
// rules of .golangci.yml (make lint) check it, and since no other package
// imports them, the glue cannot reach them transitively either (its tests
// may run a real memberlist).
//
// # What users see
//
//   - ServiceL2Status (generateName l2-) in Herald's namespace for each
//     Service this node announces in layer 2, with the interfaces the IPs are
//     answered on; deleted when the node stops announcing. ServiceBGPStatus
//     (generateName bgp-) for each Service announced over BGP, listing the
//     peers that receive it. Both are labelled metallb.io/node,
//     metallb.io/service-name and metallb.io/service-namespace and owned by
//     the speaker Pod when it exists; restored when someone else deletes
//     or edits them (a removed metallb.io/node label is put back).
//   - Service events (reporting component metallb-speaker): nodeAssigned
//     ("announcing from node X with protocol layer2|bgp: <addresses>") when this node
//     starts announcing the Service in a protocol, announceFailed when an
//     announcer rejects the announcement or when this node won the layer 2
//     election but has none of the interfaces its L2Advertisements name
//     (noMatchingInterface: the message names the advertisements, their
//     interfaces and the node's; again when that detail changes), l2Conflict (Herald's) when another
//     host answered for one of its layer 2 addresses (conflicts.go).
//   - BGPSessionState (herald.io/v1alpha1) per node and BGPPeer in
//     Herald's namespace: node, peer, VRF, BGP and BFD state, since when,
//     last error, prefixes advertised and received; labelled
//     metallb.io/node and herald.io/bgppeer, owned by the Node.
//   - BGPPeer events: sessionEstablished / sessionDown when this node's
//     session changes state, sessionNotEstablished once when it has not been
//     up for Options.SessionWarnAfter (a minute), peerNotApplied when a peer
//     waits for an object it references (its password Secret), and
//     prefixLimitExceeded when the BGP speaker closed the session because the
//     peer sent more than its received-prefix limit. Session states are also
//     logged.
//   - Why a Service IP is not announced (announce.Reason, MetalLB's names)
//     is logged at debug level on every decision, and once when it changes:
//     at info level, except notOwner and the start-up gates (debug) and
//     noMatchingInterface (warning). herald_speaker_not_announced{node,
//     protocol,reason} counts the Service IPs not announced per reason.
//   - metallb_speaker_announced{service,protocol,node,ip} = 1 per announced
//     IP and protocol; the series is deleted on withdrawal.
package speaker

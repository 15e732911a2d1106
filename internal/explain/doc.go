// Package explain is the logic of kubectl herald (kubectl-herald/): from the
// objects a user can read in the API server (a [Cluster]) it recomputes what
// Herald's controller and speakers decide, with their own pure code, and
// explains it:
//
//   - [Why]: the allocation of one Service (svcreq + ipam: the allocator is
//     replayed as the controller runs it after a restart: pools set, every
//     Service's shown addresses imported in key order; then the Service is
//     looked up, or allocated when it holds nothing, which gives the error the
//     controller gives); then per address, mode and node the speaker's
//     decision (announce.Decide with the node's configuration snapshot,
//     config.Options.NodeName, as each speaker builds it), the layer 2
//     ranking (announce.L2Candidates) and the BGP paths with their
//     attributes and the state of each session they go to (the
//     BGPSessionState objects; one not Established is a problem); then what
//     the speakers report (ServiceL2Status, ServiceBGPStatus, the Service's
//     condition and events), with every disagreement between the two.
//   - [Pools]: per pool and family the allocator's counters after the same
//     replay, the advertisements selecting the pool and who may use it.
//   - [Peers]: the BGP sessions each node opens (announce.Sessions) and their
//     state from a [SessionSource].
//   - [Config]: every component's ConfigurationState, and the plugin's own
//     config.Build of the objects.
//
// Liveness: the speakers elect among the live memberlist members, which the
// API does not show. Explanations use the nodes whose speaker Pod is Running
// and Ready as the live set and say so in their notes.
//
// Interfaces: the API does not show a node's interfaces either, so
// announce.Decide runs without them (it skips the noMatchingInterface
// check). The elected node's speaker reports it instead: its newest
// announceFailed event for the address with the noMatchingInterface text,
// newer than any nodeAssigned from it for the address, makes [Why] show the
// node as not announcing (reason noMatchingInterface, the event's detail)
// and name it as the cause.
//
// Every report lists Problems (a pending Service, a disagreement, an invalid
// configuration, a session that is not established), one line each (a
// multi-line error's lines joined with "; "); the command exits non-zero
// when there is any. The package is pure: no client, no I/O.
package explain

// Package allocation is the controller's address allocation: its Service IP
// reconcile loop gives every LoadBalancer Service its addresses from the
// IPAddressPools through the pure allocator in internal/ipam and writes the
// result where users look, and its pool status writer publishes the pools'
// counters (poolstatus.go).
//
// # What users see
//
//   - status.loadBalancer.ingress: the Service's IPs (ipMode VIP), at most one
//     per family, primary family first.
//   - status.conditions: one condition of type ConditionType
//     ("herald.io/IPAllocated"). Status True with reason IPAllocated when the
//     Service holds its IPs; False with a CamelCase reason per failure kind
//     (NoPoolMatches, PoolExhausted, SharingConflict, IPInUse,
//     RequestedIPNotInPool, FamilyUnavailable, UnknownPool, InvalidRequest,
//     NotEnoughClusterIPs, ImportConflict, InternalError) and the
//     allocator's message naming the pool, address or other Service.
//   - the annotation metallb.io/ip-allocated-from-pool (the pool the IPs come
//     from), removed when the Service holds nothing. It is written through
//     the status subresource, as MetalLB does (the API server keeps
//     metadata changes of a services/status write), so the controller
//     needs no write access to Services: in the status patch itself when
//     the status changes, else on its own from the low-priority queue.
//   - events, with MetalLB's reasons: IPAllocated ("Assigned IP [...]"),
//     AllocationFailed (Warning, the allocator's message), ClearAssignment
//     (an address the Service held was taken back, with the reason), and
//     deprecatedAnnotation (Warning, metallb.universe.tf/* keys in use);
//     Herald's StatusWriteFailed (Warning, once per distinct error: the
//     API server refused a status write for another reason than a
//     concurrent change, e.g. an admission policy).
//   - metrics: herald_allocation_duration_seconds (Service creation or
//     request change until its IP is written), herald_services_pending
//     (Services waiting for an address) and
//     herald_service_status_write_errors_total (refused status writes, by
//     API status reason). The per-pool counters are written by the pool
//     status writer (poolstatus.go) from the allocator's Stats, on the
//     leader only (metallb_allocator_* and IPAddressPool status).
//
// # Restart safety and configuration
//
// Nothing is allocated before a valid configuration is loaded. On the first
// valid configuration the controller sets the pools and imports the ingress
// IPs of every Service, in key order, before it allocates anything
// (metallb#1774, #2443). A Service whose existing IP is held by another one
// keeps its status unchanged and gets an ImportConflict condition and an
// AllocationFailed event; it is re-addressed only when its request changes
// or the other Service lets the IP go. An invalid configuration never
// releases anything: the last valid one stays in force, the ConfigurationState
// "controller" says Invalid with the object and field, the offending object
// gets a Warning event, and metallb_k8s_client_config_stale_bool is 1. A
// valid configuration change re-validates every holding (ipam.SetPools) and
// re-addresses only the Services whose IPs became invalid, with a
// ClearAssignment event; Services are not reprocessed when the snapshot is
// unchanged (metallb#1606).
//
// # Several replicas, stale writers, freed addresses
//
// Only the elected leader runs the loop (NeedLeaderElection). Every status
// and annotation write carries the resourceVersion it was decided on, so a
// replica that read an old copy, or lost its leadership without noticing
// yet, cannot overwrite a newer write: the API server answers 409
// Conflict, the controller re-reads the Service from the API server,
// records what its status shows, drops its own unwritten decision and
// decides again as on first sight (keeping the addresses the status shows
// when they are still valid). The start-up import lists Services from the
// API server, not the cache, so a new leader sees every write of the
// previous one. An address taken from a Service is not given to another one
// before the write removing it from the first Service's status has
// succeeded (ipam.Allocator.SetStatus): while that write fails it stays
// reserved, and an exhausted pool says which address waits for which
// Service.
//
// Services that cannot get an address are pending: they are retried when an
// address may have become free (a Service released or re-addressed, or a
// sharing key, port or backend changed) and when the configuration changes.
// What the loop remembers about each Service between reconciles, and the
// decisions made from it (pending, reassess, import conflicts, clear
// reasons, the retry pass's order), are in the pure internal/svcstate,
// table-tested there.
//
// # Speed
//
// Several workers reconcile Services concurrently (the allocator itself is
// serialised); each writes the ingress IPs, the condition and the pool
// annotation in one strategic-merge status patch without reading the object
// first. The events are written afterwards from a second queue that waits
// while Services are being created (no creation for 100 ms and no status
// work queued; at most 5 minutes), so during a burst the only write per Service
// is its status. That queue keeps each due event compact (which event and
// the data its message is rendered from) until it is written. Updates that
// merely echo the controller's own writes (status and pool annotation
// agreeing with the allocator) are not reconciled. Competing re-allocations (freed addresses, configuration
// changes) run one at a time in key order, so their outcome does not depend
// on worker scheduling (MetalLB issue 8).
//
// Events are core/v1 Events from a bounded recorder (eventrec.For; RBAC:
// create/patch core events). The per-Service events of the low-priority
// queue wait until the recorder has written them (back-pressure, none
// dropped; and an event due before a burst is not written during it); the
// fast path never waits for it.
package allocation

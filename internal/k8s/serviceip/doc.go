// Package serviceip is the controller's Service IP reconcile loop: it gives
// every LoadBalancer Service its addresses from the IPAddressPools through
// the pure allocator in internal/ipam and writes the result where users look.
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
//     from), written after the status and removed when the Service holds
//     nothing.
//   - events, with MetalLB's reasons: IPAllocated ("Assigned IP [...]"),
//     AllocationFailed (Warning, the allocator's message), ClearAssignment
//     (an address the Service held was taken back, with the reason), and
//     deprecatedAnnotation (Warning, metallb.universe.tf/* keys in use).
//   - metrics: herald_allocation_duration_seconds (Service creation or
//     request change until its IP is written) and herald_services_pending
//     (Services waiting for an address). The per-pool counters are written by
//     internal/k8s/poolstatus from Allocator().Stats().
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
// Services that cannot get an address are pending: they are retried when an
// address may have become free (a Service released or re-addressed, or a
// sharing key, port or backend changed) and when the configuration changes.
//
// # Speed
//
// Several workers reconcile Services concurrently (the allocator itself is
// serialised); each writes the ingress IPs and the condition in one
// strategic-merge status patch without reading the object first. The pool
// annotation and the events are written afterwards from a second queue that
// waits while Services are being created (no creation for 100 ms and no
// status work queued; at most 60 s), so during a burst the only write per
// Service is its status. Updates that merely echo the controller's own
// writes (status and pool annotation agreeing with the allocator) are not
// reconciled. Competing re-allocations (freed addresses, configuration
// changes) run one at a time in key order, so their outcome does not depend
// on worker scheduling (MetalLB issue 8).
//
// Events need the events.k8s.io API (RBAC: create/patch events.k8s.io
// events).
package serviceip

// Package ipam is Herald's LoadBalancer IP allocator: a pure, deterministic
// implementation of MetalLB's allocation contract (IPAddressPool
// autoAssign, avoidBuggyIPs and serviceAllocation; the metallb.io/
// address-pool, loadBalancerIPs and allow-shared-ip annotations; dual-stack
// family policies).
//
// The package knows nothing about Kubernetes objects: a controller converts
// each Service into a Request and the configuration into []Pool, then
//
//  1. calls SetPools once the pools are known,
//  2. calls Import for every Service that already has ingress IPs (restart
//     safety: existing IPs are recorded before anything is allocated,
//     metallb#1774, #2443),
//  3. calls Allocate for every Service, and Release when a Service is
//     deleted or stops being a LoadBalancer,
//  4. on every configuration change calls SetPools and re-Allocates the
//     Services whose keys it returns,
//  5. calls SetStatus with what a Service's status shows, at import and
//     after every successful status write: an address no Service holds any
//     more stays out of reach of every other Service until the status
//     showing it has changed (the write clearing it succeeded, or the
//     Service is gone).
//
// Determinism: every choice is a function of the pools and the current
// assignments. Pools tie-break by name (MetalLB's issue 8: it picked among
// equal-priority pools in map order, so two controllers, or one before and
// after a restart, diverged). Inside a pool the lowest free address in
// configured prefix order wins.
//
// Cost: each pool family keeps its free addresses as an ordered set of free
// intervals (a B-tree), so finding the lowest free address, taking a given
// address and freeing one are O(log n) in the number of free intervals,
// whatever the pool size (IPv6 /64 pools included) or fill level. Addresses
// are 128-bit integers; nothing is ever enumerated.
package ipam

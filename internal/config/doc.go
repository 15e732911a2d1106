// Package config turns Herald's custom resources into one immutable, validated
// configuration snapshot.
//
// Build takes every metallb.io object (IPAddressPool, L2Advertisement,
// BGPAdvertisement, BGPPeer, Community, BFDProfile) together with the Secrets
// and Nodes they reference, and returns either a *Snapshot or an
// error that names the object, the field and the broken rule. The same
// function backs the admission webhook (Options.IgnoreTransient) and every
// reconcile in the controller and the speakers (Options.NodeName), so what the
// webhook admits is exactly what the runtime accepts.
//
// Two classes of failure are distinguished:
//
//   - *ValidationError: the configuration is wrong and will stay wrong until a
//     user edits it (bad CIDR, overlapping pools, holdTime of 2s, ...).
//   - *TransientError: an object references another object that does not
//     exist yet (a password Secret, a Community alias); the caller should
//     retry when the referenced object appears. IsTransient reports this case.
//
// With Options.DropTransient (the speakers) a transient reference of a
// BGPPeer or BGPAdvertisement leaves out only that object: Build returns a
// snapshot of the rest and lists what it left out in Snapshot.Dropped.
//
// The package is pure: no client, no I/O, no goroutines. Addresses are
// net/netip values, timers time.Duration, label selectors labels.Selector.
// Behaviour follows the MetalLB API contract (metallb.io v1beta1/v1beta2)
// with Herald's backend rules on top, so that every peer Build admits is one
// the embedded gobgp v3 opens (internal/announce.Sessions translates it): a
// BGPPeer is refused when it names a bfdProfile it cannot use (an interface
// or VRF peer, multihop without sourceAddress; a missing profile is
// transient, as in MetalLB, and echoMode is refused on the BFDProfile), sets
// dynamicASN (gobgp would accept any remote ASN without checking the
// internal/external class), has a zoned peerAddress (use interface), or a
// holdTime above 65535 s (the OPEN's Hold Time is 2 octets, RFC 4271 §4.2);
// the peers selecting one node must share myASN, must not set different
// routerIDs (unset takes the one set, with a warning) and must not share a
// neighbor address or interface (one gobgp server per node).
package config

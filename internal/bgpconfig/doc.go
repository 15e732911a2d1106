// Package bgpconfig translates the BGP peers of a speaker's configuration
// snapshot (internal/config) into the session descriptions the BGP speaker
// takes (internal/bgp.PeerConfig).
//
// It is pure: no client, no sockets, no BGP library. The speaker glue
// (internal/k8s/speaker) calls Peers whenever the snapshot or its own Node
// changes and hands the result to bgp.Speaker.SetPeers, which applies only
// the difference.
//
// Translation rules, field by field (BGPPeer v1beta2 -> bgp.PeerConfig):
//
//   - name, myASN, peerASN, localASN, peerAddress or interface, peerPort,
//     sourceAddress, vrf and dualStackAddressFamily are copied.
//   - password / passwordSecret: the TCP-MD5 key (RFC 2385), already resolved
//     by config.Build from the Secret in Herald's namespace.
//   - holdTime and keepaliveTime: copied (config.Build fills the RFC 4271 §10
//     defaults, 90 s / 30 s, and derives one from the other).
//   - connectTime: copied; when unset DefaultConnectTime (10 s) is used instead
//     of gobgp's 120 s, so that a session to a restarted router comes back
//     quickly (MetalLB's native speaker redials within seconds too).
//   - ebgpMultiHop: true sets the IP TTL of the eBGP session to MultiHopTTL
//     (255, as FRR's "neighbor X ebgp-multihop" without a value); false keeps
//     TTL 1 for eBGP (directly connected). iBGP sessions never set it.
//   - enableGracefulRestart: RFC 4724 graceful restart with the default restart
//     time (120 s).
//   - routerID: the peer's routerID; config.Build guarantees that the peers of
//     one node agree. When none sets it, the node's IPv4 address passed by the
//     caller (its InternalIP) is used, so the BGP Identifier (RFC 4271 §4.2)
//     is stable and unique per node.
//   - dynamicASN: not translated. bgp.PeerConfig requires the remote ASN, and
//     the embedded gobgp would accept any ASN in the peer's OPEN without
//     checking the internal/external class. Rather than open a session that
//     does not enforce what the user asked for, Peers leaves such a peer out
//     and returns ErrDynamicASN for it (the speaker reports it as an event on
//     the BGPPeer and in its logs); the node's other peers are unaffected.
//   - bfdProfile: rejected earlier by config.Build (no BFD in gobgp).
package bgpconfig

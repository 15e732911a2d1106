// Package bfdnet runs BFD sessions (internal/bfd's Machine) over UDP for
// Herald's speaker: single hop (RFC 5881, port 3784) and multihop (RFC 5883,
// port 4784), IPv4 and IPv6.
//
// A [Manager] opens the listening socket of a port and family when the
// first session needs it, and one sending socket per session bound to the
// session's local address and a source port in 49152-65535, with TTL / hop
// limit 255. Received single-hop packets must have TTL 255 (the GTSM of
// RFC 5082, RFC 5881 §5); multihop packets at least Params.MinimumTTL
// (default 254). Packets are demultiplexed by Your Discriminator, or while
// that is zero by the peer's address (RFC 5880 §6.3); those that fail a
// check are counted in herald_bfd_control_packets_dropped_total{reason}.
// Each session's Machine runs on its own goroutine with the wall clock;
// state changes go to Options.OnChange and to MetalLB's metallb_bfd_*
// metrics (labels peer and vrf, as MetalLB's FRR mode exports them).
//
// # Use
//
//	m, err := bfdnet.New(log, registry, bfdnet.Options{OnChange: func(c bfdnet.Change) { ... }})
//	s, err := m.Add(bfdnet.Key{Peer: peer, Local: local}, bfd.Params{TransmitInterval: 300 * time.Millisecond})
//	s.State()          // bfd.StateUp once the peer answers
//	s.Update(params)   // a Poll Sequence while Up
//	m.Remove(peer)     // AdminDown to the peer, then gone
//	m.Close()
//
// Sessions run in the network namespace of the process (or
// Options.NetNSPath) and the default VRF, and are not bound to an
// interface; one session per peer address.
package bfdnet

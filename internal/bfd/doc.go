// Package bfd implements Bidirectional Forwarding Detection for Herald's
// speaker: asynchronous mode of RFC 5880 over UDP, single hop (RFC 5881,
// port 3784) and multihop (RFC 5883, port 4784), IPv4 and IPv6.
//
// # Why Herald has its own
//
// No Go BFD library on the module proxy fits (checked 2026-12): the
// complete ones are daemons whose protocol code sits in internal packages
// (dantte-lp/gobfd) or inside a large application module tied to its own
// transport (scionproto/scion router/bfd); gopacket's layers.BFD only
// decodes packets; the small ones are unmaintained and lack multihop or a
// library API. The protocol core is small (a 24-byte packet, a four-state
// machine, two timers), so it lives here, fuzzed and table-tested.
//
// # Layers
//
//   - [Parse] and [ControlPacket.AppendBinary]: the Control packet of RFC
//     5880 §4.1 and the packet checks of §6.8.6.
//   - [Machine]: one session's state machine (§6.2, §6.8.6), timers with
//     the negotiated intervals (§6.8.2-§6.8.4), transmit jitter of 75-100 %
//     (§6.8.7) and the Poll Sequence for parameter changes (§6.5). Pure: it
//     is driven by received packets and a time the caller passes in.
//   - [Manager]: the sockets (TTL 255 sent; received TTL 255 for single
//     hop, at least Params.MinimumTTL for multihop; source ports
//     49152-65535), demultiplexing (§6.3), one goroutine per session, state
//     changes to a callback, and MetalLB's metallb_bfd_* metrics.
//
// # Use
//
//	m, err := bfd.New(log, registry, bfd.Options{OnChange: func(c bfd.Change) { ... }})
//	s, err := m.Add(bfd.Key{Peer: peer, Local: local}, bfd.Params{TransmitInterval: 300 * time.Millisecond})
//	s.State()          // bfd.StateUp once the peer answers
//	s.Update(params)   // Poll Sequence while Up
//	m.Remove(peer)     // AdminDown to the peer, then gone
//	m.Close()
//
// # Not supported (refused with an error, never ignored)
//
// Authentication (§6.7): packets with the A bit are dropped
// (ErrAuthNotSupported) and Params has no key. The Echo function (§6.4):
// Params.EchoMode fails Validate with ErrEchoNotSupported. Demand mode is
// never requested (a peer's is honoured). Sessions run in the default VRF
// and are not bound to an interface.
package bfd

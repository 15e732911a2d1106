// Package bfd is the protocol core of Herald's Bidirectional Forwarding
// Detection, asynchronous mode of RFC 5880: the Control packet, the session
// parameters and the session state machine. It is pure (no sockets, no
// clock, no metrics), so internal/config can validate BFDProfiles with
// [Params.Validate]; the UDP transport of RFC 5881 (single hop) and RFC
// 5883 (multihop) is internal/bfd/bfdnet.
//
// # Why Herald has its own
//
// No Go BFD library on the module proxy fits (checked 2026-12): the
// complete ones are daemons whose protocol code sits in internal packages
// (dantte-lp/gobfd) or inside a large application module tied to its own
// transport (scionproto/scion router/bfd); gopacket's layers.BFD only
// decodes packets; the small ones are unmaintained and lack multihop or a
// library API. The core is small (a 24-byte packet, a four-state machine,
// two timers), so it lives here, fuzzed and table-tested.
//
// # Contents
//
//   - [Parse] and [ControlPacket.AppendBinary]: the Control packet of RFC
//     5880 §4.1 and the packet checks of §6.8.6.
//   - [Params]: BFDProfile's fields with their ranges and defaults.
//   - [Machine]: one session's state machine (§6.2, §6.8.6), timers with
//     the negotiated intervals (§6.8.2-§6.8.4), transmit jitter of 75-100 %
//     (§6.8.7), the Poll Sequence for parameter changes (§6.5), the
//     Passive role (§6.1) and AdminDown (§6.8.16). It is driven by received
//     packets and the time the caller passes in, and returns what to send.
//
// # Not supported (refused with an error, never ignored)
//
// Authentication (§6.7): packets with the A bit fail Parse with
// ErrAuthNotSupported and Params has no key. The Echo function (§6.4):
// Params.EchoMode fails Validate with ErrEchoNotSupported. Demand mode is
// never requested (a peer's is honoured by ceasing periodic packets).
package bfd

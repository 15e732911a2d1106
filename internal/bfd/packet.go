package bfd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Version is the BFD protocol version this package speaks (RFC 5880 §4.1).
const Version = 1

// PacketLen is the length in bytes of a BFD Control packet without an
// Authentication Section (RFC 5880 §4.1, the mandatory section).
const PacketLen = 24

// State is a BFD session state (RFC 5880 §4.1 "Sta", §6.2).
type State uint8

// The session states, with their wire values.
const (
	StateAdminDown State = 0
	StateDown      State = 1
	StateInit      State = 2
	StateUp        State = 3
)

func (s State) String() string {
	switch s {
	case StateAdminDown:
		return "AdminDown"
	case StateDown:
		return "Down"
	case StateInit:
		return "Init"
	case StateUp:
		return "Up"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Diag is a diagnostic code: why the sender's session last changed state
// (RFC 5880 §4.1 "Diag"). Values 9-31 are reserved; they are carried
// unchanged.
type Diag uint8

// The diagnostic codes of RFC 5880 §4.1.
const (
	DiagNone                        Diag = 0
	DiagControlDetectionTimeExpired Diag = 1
	DiagEchoFunctionFailed          Diag = 2
	DiagNeighborSignaledSessionDown Diag = 3
	DiagForwardingPlaneReset        Diag = 4
	DiagPathDown                    Diag = 5
	DiagConcatenatedPathDown        Diag = 6
	DiagAdministrativelyDown        Diag = 7
	DiagReverseConcatenatedPathDown Diag = 8
	maxDiag                         Diag = 31
)

func (d Diag) String() string {
	switch d {
	case DiagNone:
		return "No Diagnostic"
	case DiagControlDetectionTimeExpired:
		return "Control Detection Time Expired"
	case DiagEchoFunctionFailed:
		return "Echo Function Failed"
	case DiagNeighborSignaledSessionDown:
		return "Neighbor Signaled Session Down"
	case DiagForwardingPlaneReset:
		return "Forwarding Plane Reset"
	case DiagPathDown:
		return "Path Down"
	case DiagConcatenatedPathDown:
		return "Concatenated Path Down"
	case DiagAdministrativelyDown:
		return "Administratively Down"
	case DiagReverseConcatenatedPathDown:
		return "Reverse Concatenated Path Down"
	}
	return fmt.Sprintf("Diag(%d)", uint8(d))
}

// ControlPacket is a BFD Control packet without an Authentication Section
// (RFC 5880 §4.1). Intervals are in microseconds on the wire; the accessors
// DesiredMinTx, RequiredMinRx and RequiredMinEchoRx convert them.
type ControlPacket struct {
	Diag  Diag
	State State
	// Poll (P): the sender asks for verification of connectivity or of a
	// parameter change; the receiver answers with Final set (§6.5).
	Poll bool
	// Final (F): the answer to a packet with Poll set.
	Final bool
	// ControlPlaneIndependent (C): the sender's BFD does not share fate
	// with its control plane.
	ControlPlaneIndependent bool
	// Demand (D): the sender wishes to operate in Demand mode (§6.6).
	Demand bool
	// DetectMult: the sender's detection time multiplier (1-255).
	DetectMult uint8
	// MyDiscriminator: the sender's non-zero session discriminator.
	MyDiscriminator uint32
	// YourDiscriminator: the discriminator received from the remote
	// system, or zero if unknown.
	YourDiscriminator uint32
	// DesiredMinTxMicros: the minimum interval, in microseconds, at which
	// the sender would like to transmit.
	DesiredMinTxMicros uint32
	// RequiredMinRxMicros: the minimum interval, in microseconds, between
	// received packets that the sender supports; zero means "send me no
	// periodic packets".
	RequiredMinRxMicros uint32
	// RequiredMinEchoRxMicros: the minimum interval, in microseconds,
	// between received Echo packets; zero means the sender does not
	// support the Echo function.
	RequiredMinEchoRxMicros uint32
}

// DesiredMinTx returns Desired Min TX Interval as a duration.
func (p *ControlPacket) DesiredMinTx() time.Duration { return micros(p.DesiredMinTxMicros) }

// RequiredMinRx returns Required Min RX Interval as a duration.
func (p *ControlPacket) RequiredMinRx() time.Duration { return micros(p.RequiredMinRxMicros) }

// RequiredMinEchoRx returns Required Min Echo RX Interval as a duration.
func (p *ControlPacket) RequiredMinEchoRx() time.Duration { return micros(p.RequiredMinEchoRxMicros) }

func micros(v uint32) time.Duration { return time.Duration(v) * time.Microsecond }

// Errors returned by Parse. Each packet that fails one of the reception
// checks of RFC 5880 §6.8.6 is discarded; errors.Is tells which check.
var (
	ErrShort            = errors.New("bfd: packet shorter than 24 bytes")
	ErrVersion          = errors.New("bfd: version is not 1")
	ErrLength           = errors.New("bfd: bad Length field")
	ErrDetectMult       = errors.New("bfd: Detect Mult is zero")
	ErrMultipoint       = errors.New("bfd: Multipoint (M) bit set")
	ErrMyDiscriminator  = errors.New("bfd: My Discriminator is zero")
	ErrPollFinal        = errors.New("bfd: both Poll (P) and Final (F) set")
	ErrAuthNotSupported = errors.New("bfd: authentication (A bit) is not supported by Herald")
)

const (
	flagPoll       = 1 << 5
	flagFinal      = 1 << 4
	flagCPI        = 1 << 3
	flagAuth       = 1 << 2
	flagDemand     = 1 << 1
	flagMultipoint = 1 << 0
)

// Parse decodes a BFD Control packet from b, the UDP payload, and applies
// the packet-level reception checks of RFC 5880 §6.8.6: version 1, Length
// at least 24 and not beyond b, Detect Mult non-zero, M clear, My
// Discriminator non-zero. Herald supports no authentication: a packet with
// the A bit set is refused with ErrAuthNotSupported. Without an
// Authentication Section Length must be exactly 24; bytes of b beyond Length
// are ignored. The session-level checks (Your Discriminator zero outside
// Down/AdminDown, unknown discriminators) belong to the demultiplexer.
func Parse(b []byte) (ControlPacket, error) {
	var p ControlPacket
	if len(b) < PacketLen {
		return p, fmt.Errorf("%w (%d)", ErrShort, len(b))
	}
	if v := b[0] >> 5; v != Version {
		return p, fmt.Errorf("%w (%d)", ErrVersion, v)
	}
	length := int(b[3])
	if length < PacketLen || length > len(b) {
		return p, fmt.Errorf("%w: %d for a %d-byte payload", ErrLength, length, len(b))
	}
	flags := b[1]
	if flags&flagAuth != 0 {
		return p, ErrAuthNotSupported
	}
	if length != PacketLen {
		return p, fmt.Errorf("%w: %d without an Authentication Section (want 24)", ErrLength, length)
	}
	if flags&flagMultipoint != 0 {
		return p, ErrMultipoint
	}
	if flags&flagPoll != 0 && flags&flagFinal != 0 {
		return p, ErrPollFinal
	}
	p = ControlPacket{
		Diag:                    Diag(b[0] & 0x1f),
		State:                   State(flags >> 6),
		Poll:                    flags&flagPoll != 0,
		Final:                   flags&flagFinal != 0,
		ControlPlaneIndependent: flags&flagCPI != 0,
		Demand:                  flags&flagDemand != 0,
		DetectMult:              b[2],
		MyDiscriminator:         binary.BigEndian.Uint32(b[4:]),
		YourDiscriminator:       binary.BigEndian.Uint32(b[8:]),
		DesiredMinTxMicros:      binary.BigEndian.Uint32(b[12:]),
		RequiredMinRxMicros:     binary.BigEndian.Uint32(b[16:]),
		RequiredMinEchoRxMicros: binary.BigEndian.Uint32(b[20:]),
	}
	if p.DetectMult == 0 {
		return ControlPacket{}, ErrDetectMult
	}
	if p.MyDiscriminator == 0 {
		return ControlPacket{}, ErrMyDiscriminator
	}
	return p, nil
}

// AppendBinary appends the 24-byte wire form of p to b (RFC 5880 §4.1:
// version 1, A and M clear, Length 24). Diag values above 31 and states
// above 3 do not fit their fields; they are truncated to 5 and 2 bits.
func (p *ControlPacket) AppendBinary(b []byte) ([]byte, error) {
	flags := byte(p.State&3) << 6
	if p.Poll {
		flags |= flagPoll
	}
	if p.Final {
		flags |= flagFinal
	}
	if p.ControlPlaneIndependent {
		flags |= flagCPI
	}
	if p.Demand {
		flags |= flagDemand
	}
	b = append(b, Version<<5|byte(p.Diag&maxDiag), flags, p.DetectMult, PacketLen)
	b = binary.BigEndian.AppendUint32(b, p.MyDiscriminator)
	b = binary.BigEndian.AppendUint32(b, p.YourDiscriminator)
	b = binary.BigEndian.AppendUint32(b, p.DesiredMinTxMicros)
	b = binary.BigEndian.AppendUint32(b, p.RequiredMinRxMicros)
	b = binary.BigEndian.AppendUint32(b, p.RequiredMinEchoRxMicros)
	return b, nil
}

// MarshalBinary returns the 24-byte wire form of p (see AppendBinary).
func (p *ControlPacket) MarshalBinary() ([]byte, error) {
	return p.AppendBinary(make([]byte, 0, PacketLen))
}

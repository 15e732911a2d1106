package bfd

import (
	"errors"
	"fmt"
	"time"
)

// Params are the per-session settings of a BFD session, the fields of
// MetalLB's BFDProfile (receiveInterval, transmitInterval,
// detectMultiplier, echoMode, passiveMode, minimumTtl).
type Params struct {
	// ReceiveInterval is bfd.RequiredMinRxInterval: the minimum interval
	// between received Control packets this system supports (RFC 5880
	// §6.8.1). BFDProfile receiveInterval, 10 ms to 60 s; zero means the
	// default, 300 ms.
	ReceiveInterval time.Duration
	// TransmitInterval is bfd.DesiredMinTxInterval once the session is Up
	// (while it is not Up the packets go at most once a second, §6.8.3).
	// BFDProfile transmitInterval, 10 ms to 60 s; zero means 300 ms.
	TransmitInterval time.Duration
	// DetectMultiplier is bfd.DetectMult: the remote system declares the
	// session down after this many missed intervals (§6.8.4). 2-255;
	// zero means 3.
	DetectMultiplier uint8
	// PassiveMode: this system takes the Passive role (§6.1): it sends
	// nothing until it has received a packet from the peer.
	PassiveMode bool
	// EchoMode asks for the Echo function (§6.4). Herald does not
	// implement it: Validate refuses it.
	EchoMode bool
	// MinimumTTL is, for multihop sessions (RFC 5883), the lowest TTL or
	// hop limit accepted on received packets; 1-254, zero means 254 (as
	// FRR). Single-hop sessions always require 255 (RFC 5881 §5).
	MinimumTTL uint8
}

// Defaults of BFDProfile (FRR's defaults, which MetalLB documents).
const (
	DefaultInterval   = 300 * time.Millisecond
	DefaultDetectMult = 3
	DefaultMinimumTTL = 254
	// slowTxInterval is the floor of bfd.DesiredMinTxInterval while the
	// session is not Up (RFC 5880 §6.8.3: not less than one second).
	slowTxInterval = time.Second
)

// ErrEchoNotSupported is returned by Validate for EchoMode.
var ErrEchoNotSupported = errors.New("echoMode: the BFD Echo function is not supported by Herald (asynchronous mode only)")

// WithDefaults returns p with zero fields set to their defaults.
func (p Params) WithDefaults() Params {
	if p.ReceiveInterval == 0 {
		p.ReceiveInterval = DefaultInterval
	}
	if p.TransmitInterval == 0 {
		p.TransmitInterval = DefaultInterval
	}
	if p.DetectMultiplier == 0 {
		p.DetectMultiplier = DefaultDetectMult
	}
	if p.MinimumTTL == 0 {
		p.MinimumTTL = DefaultMinimumTTL
	}
	return p
}

// Validate checks p against BFDProfile's ranges (intervals 10 ms to 60 s,
// detectMultiplier 2-255, minimumTtl 1-254) and refuses what Herald does
// not implement (EchoMode). Zero fields stand for their defaults. The error
// names the field.
func (p Params) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"receiveInterval", p.ReceiveInterval}, {"transmitInterval", p.TransmitInterval}} {
		if f.v != 0 && (f.v < 10*time.Millisecond || f.v > 60*time.Second) {
			errs = append(errs, fmt.Errorf("%s: %v is outside 10ms..60s", f.name, f.v))
		}
		if f.v%time.Microsecond != 0 {
			errs = append(errs, fmt.Errorf("%s: %v is not a whole number of microseconds", f.name, f.v))
		}
	}
	if p.DetectMultiplier == 1 {
		errs = append(errs, errors.New("detectMultiplier: 1 is outside 2..255"))
	}
	if p.MinimumTTL == 255 {
		errs = append(errs, errors.New("minimumTtl: 255 is outside 1..254"))
	}
	if p.EchoMode {
		errs = append(errs, ErrEchoNotSupported)
	}
	return errors.Join(errs...)
}

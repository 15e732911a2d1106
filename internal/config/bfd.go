package config

import (
	"fmt"
	"time"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/bfd"
)

// BFDProfile is one parsed BFDProfile, defaults filled in. A BGPPeer that
// names it in spec.bfdProfile gets a BFD session (RFC 5880 asynchronous
// mode; RFC 5881 single hop, RFC 5883 multihop with spec.ebgpMultiHop) run
// by the speaker (internal/bfd/bfdnet). spec.echoMode: true is refused:
// Herald does not implement the Echo function (RFC 5880 §6.4);
// spec.echoInterval is validated and, as in FRR without echo mode, unused.
type BFDProfile struct {
	Name             string
	ReceiveInterval  uint32 // ms, 10..60000, default 300
	TransmitInterval uint32 // ms, 10..60000, default 300
	DetectMultiplier uint32 // 2..255, default 3
	EchoInterval     uint32 // ms, 10..60000, default 50
	EchoMode         bool
	PassiveMode      bool
	MinimumTTL       uint32 // 1..254, default 254
}

type bfdRange struct {
	field      string
	v          *uint32
	lo, hi, df uint32
	dst        *uint32
}

func buildBFDProfile(obj *v1beta1.BFDProfile, p *problems) *BFDProfile {
	ref := objRef{KindBFDProfile, obj.Namespace, obj.Name}
	s := &obj.Spec
	b := &BFDProfile{Name: obj.Name}
	if s.EchoMode != nil {
		b.EchoMode = *s.EchoMode
	}
	if s.PassiveMode != nil {
		b.PassiveMode = *s.PassiveMode
	}
	ok := true
	for _, r := range []bfdRange{
		{"spec.receiveInterval", s.ReceiveInterval, 10, 60000, 300, &b.ReceiveInterval},
		{"spec.transmitInterval", s.TransmitInterval, 10, 60000, 300, &b.TransmitInterval},
		{"spec.detectMultiplier", s.DetectMultiplier, 2, 255, 3, &b.DetectMultiplier},
		{"spec.echoInterval", s.EchoInterval, 10, 60000, 50, &b.EchoInterval},
		{"spec.minimumTtl", s.MinimumTTL, 1, 254, 254, &b.MinimumTTL},
	} {
		*r.dst = r.df
		if r.v == nil {
			continue
		}
		if *r.v < r.lo || *r.v > r.hi {
			p.add(ref.invalid(r.field, fmt.Sprint(*r.v), "must be between %d and %d", r.lo, r.hi))
			ok = false
			continue
		}
		*r.dst = *r.v
	}
	if b.EchoMode {
		p.add(ref.invalid("spec.echoMode", "true", "the BFD Echo function (RFC 5880 §6.4) is not supported by Herald (asynchronous mode only); set echoMode to false or remove it"))
		ok = false
	}
	if !ok {
		return nil
	}
	return b
}

// Params returns the profile as the session parameters of internal/bfd
// (intervals in milliseconds become time.Duration).
func (b *BFDProfile) Params() bfd.Params {
	return bfd.Params{
		ReceiveInterval:  time.Duration(b.ReceiveInterval) * time.Millisecond,
		TransmitInterval: time.Duration(b.TransmitInterval) * time.Millisecond,
		DetectMultiplier: uint8(b.DetectMultiplier),
		PassiveMode:      b.PassiveMode,
		EchoMode:         b.EchoMode,
		MinimumTTL:       uint8(b.MinimumTTL),
	}
}

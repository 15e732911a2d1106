package config

import (
	"fmt"

	"github.com/herald-lb/herald/api/v1beta1"
)

// BFDProfile is one parsed BFDProfile, defaults filled in. Herald's BGP
// backend (gobgp v3) has no BFD, so no peer may use a profile (see
// BGPPeer spec.bfdProfile); profiles are still validated so that the objects
// MetalLB users already have are checked the same way, but the snapshot does
// not keep them (a profile cannot change what a speaker does).
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
	if !ok {
		return nil
	}
	p.warn(ref, "", "BFD is not supported by Herald's BGP backend (gobgp has no BFD); the profile cannot be used by any BGPPeer")
	return b
}

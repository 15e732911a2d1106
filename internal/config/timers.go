package config

import (
	"fmt"
	"time"
)

// Default BGP timers when a BGPPeer sets neither holdTime nor keepaliveTime
// (RFC 4271 §10 suggests 90 s hold and a keepalive of one third of it).
const (
	DefaultHoldTime      = 90 * time.Second
	DefaultKeepaliveTime = 30 * time.Second
)

// timerError names the field a timer rule failed on.
type timerError struct {
	field, value, rule string
}

// resolveTimers applies the holdTime/keepaliveTime rules of BGPPeer:
//
//   - both are truncated to whole seconds;
//   - holdTime must be 3 s..65535 s (RFC 4271 §4.2: at least 3 s, and the
//     OPEN's Hold Time field is 2 octets). RFC 4271 also allows 0 (no
//     keepalives), but Herald's BGP backend cannot send it: refused;
//   - only holdTime set: keepalive = holdTime/3;
//   - only keepaliveTime set: holdTime = 3*keepaliveTime;
//   - neither set: 90 s / 30 s;
//   - keepaliveTime must be <= holdTime.
//
// nil means "not set"; negative values are invalid.
func resolveTimers(hold, keepalive *time.Duration) (h, k time.Duration, err *timerError) {
	if hold != nil && *hold < 0 {
		return 0, 0, &timerError{"spec.holdTime", hold.String(), "must not be negative"}
	}
	if keepalive != nil && *keepalive < 0 {
		return 0, 0, &timerError{"spec.keepaliveTime", keepalive.String(), "must not be negative"}
	}
	switch {
	case hold == nil && keepalive == nil:
		return DefaultHoldTime, DefaultKeepaliveTime, nil
	case hold != nil && keepalive == nil:
		h = hold.Truncate(time.Second)
		k = (h / 3).Truncate(time.Second)
	case hold == nil && keepalive != nil:
		k = keepalive.Truncate(time.Second)
		h = 3 * k
	default:
		h = hold.Truncate(time.Second)
		k = keepalive.Truncate(time.Second)
	}
	if h == 0 {
		// Backend rule: gobgp v3 replaces a configured hold time of 0 with
		// its default of 90 s (and, when a router offers 0, sets its write
		// deadline to the negotiated 0 s, so writes time out).
		const rule = "a hold time of 0 (no keepalives, allowed by RFC 4271 §4.2) is not supported by Herald's BGP backend, which would send its default 90s in OPEN instead"
		if hold == nil {
			return 0, 0, &timerError{"spec.keepaliveTime", keepalive.String(), "without holdTime the hold time is 3 x keepaliveTime = 0s (after truncation to whole seconds), and " + rule + "; set keepaliveTime to at least 1s, or set holdTime to at least 3s"}
		}
		return 0, 0, &timerError{"spec.holdTime", hold.String(), rule + "; set a hold time of at least 3s (values are truncated to whole seconds)"}
	}
	if h < 3*time.Second {
		if hold == nil {
			return 0, 0, &timerError{"spec.keepaliveTime", keepalive.String(), fmt.Sprintf("the derived holdTime (3 x keepaliveTime = %s) must be at least 3s (RFC 4271 §4.2)", h)}
		}
		return 0, 0, &timerError{"spec.holdTime", hold.String(), "must be at least 3s after truncation to whole seconds (RFC 4271 §4.2)"}
	}
	if h > maxHoldTime {
		if hold == nil {
			return 0, 0, &timerError{"spec.keepaliveTime", keepalive.String(), fmt.Sprintf("the derived holdTime (3 x keepaliveTime = %s) must be at most 65535s: the Hold Time field of the BGP OPEN message is 2 octets (RFC 4271 §4.2)", h)}
		}
		return 0, 0, &timerError{"spec.holdTime", hold.String(), "must be at most 65535s: the Hold Time field of the BGP OPEN message is 2 octets (RFC 4271 §4.2)"}
	}
	if k > h {
		return 0, 0, &timerError{"spec.keepaliveTime", keepalive.String(), fmt.Sprintf("must not be greater than holdTime (%s)", h)}
	}
	return h, k, nil
}

// checkConnectTime validates BGPPeer spec.connectTime: whole seconds in
// 1..65535 (the range of the connect-retry timer). nil means "not set".
func checkConnectTime(d *time.Duration) (time.Duration, *timerError) {
	if d == nil {
		return 0, nil
	}
	if *d%time.Second != 0 {
		return 0, &timerError{"spec.connectTime", d.String(), "must be a whole number of seconds"}
	}
	if *d < time.Second || *d > 65535*time.Second {
		return 0, &timerError{"spec.connectTime", d.String(), "must be between 1s and 65535s"}
	}
	return *d, nil
}

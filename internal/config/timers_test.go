package config

import (
	"testing"
	"time"
)

func TestResolveTimers(t *testing.T) {
	d := func(v time.Duration) *time.Duration { return &v }
	s := time.Second
	for _, tc := range []struct {
		name       string
		hold, keep *time.Duration
		wantH      time.Duration
		wantK      time.Duration
		wantField  string
	}{
		{name: "defaults", wantH: 90 * s, wantK: 30 * s},
		{name: "hold only", hold: d(9 * s), wantH: 9 * s, wantK: 3 * s},
		{name: "hold only rounds keepalive down", hold: d(10 * s), wantH: 10 * s, wantK: 3 * s},
		{name: "hold truncated", hold: d(4500 * time.Millisecond), wantH: 4 * s, wantK: s},
		// RFC 4271 allows 0, but gobgp sends 90 s for it: refused.
		{name: "hold zero", hold: d(0), wantField: "spec.holdTime"},
		{name: "hold zero with keepalive zero", hold: d(0), keep: d(0), wantField: "spec.holdTime"},
		{name: "hold truncated to zero", hold: d(500 * time.Millisecond), wantField: "spec.holdTime"},
		{name: "keepalive only", keep: d(20 * s), wantH: 60 * s, wantK: 20 * s},
		{name: "keepalive zero only", keep: d(0), wantField: "spec.keepaliveTime"},
		{name: "both", hold: d(30 * s), keep: d(30 * s), wantH: 30 * s, wantK: 30 * s},
		{name: "hold 2s", hold: d(2 * s), wantField: "spec.holdTime"},
		{name: "hold 1s with keepalive", hold: d(s), keep: d(0), wantField: "spec.holdTime"},
		{name: "keepalive above hold", hold: d(3 * s), keep: d(4 * s), wantField: "spec.keepaliveTime"},
		{name: "negative hold", hold: d(-s), wantField: "spec.holdTime"},
		{name: "negative keepalive", keep: d(-s), wantField: "spec.keepaliveTime"},
	} {
		h, k, err := resolveTimers(tc.hold, tc.keep)
		switch {
		case tc.wantField != "":
			if err == nil || err.field != tc.wantField {
				t.Errorf("%s: got %v/%v err %+v, want error on %s", tc.name, h, k, err, tc.wantField)
			}
		case err != nil:
			t.Errorf("%s: %+v", tc.name, err)
		case h != tc.wantH || k != tc.wantK:
			t.Errorf("%s: got %v/%v, want %v/%v", tc.name, h, k, tc.wantH, tc.wantK)
		}
	}
}

func TestCheckConnectTime(t *testing.T) {
	d := func(v time.Duration) *time.Duration { return &v }
	for _, tc := range []struct {
		in   *time.Duration
		want time.Duration
		bad  bool
	}{
		{in: nil, want: 0},
		{in: d(time.Second), want: time.Second},
		{in: d(65535 * time.Second), want: 65535 * time.Second},
		{in: d(0), bad: true},
		{in: d(65536 * time.Second), bad: true},
		{in: d(1500 * time.Millisecond), bad: true},
		{in: d(-time.Second), bad: true},
	} {
		got, err := checkConnectTime(tc.in)
		if (err != nil) != tc.bad || (!tc.bad && got != tc.want) {
			t.Errorf("checkConnectTime(%v) = %v, %+v", tc.in, got, err)
		}
	}
}

package config

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/bgp"
)

// FuzzBuild feeds arbitrary strings into addresses, communities, aliases and
// peer fields. Build must not panic; a returned Snapshot must satisfy its
// invariants; an error must consist only of ValidationError/TransientError
// values naming an object and a rule; and Build must be deterministic.
//
//	go test -run '^$' -fuzz FuzzBuild -fuzztime 60s ./internal/config
func FuzzBuild(f *testing.F) {
	f.Add("198.51.100.0/24", "203.0.113.10-203.0.113.20", "65000:1", "no-export", "65535:65281", "198.51.100.254", "", "", int64(0), int64(0), int32(32), uint32(64501), "", false)
	f.Add("2001:db8::/120", "2001:db8::1000-2001:db8::1", "large:1:2:3", "x", "1:2", "2001:db8::1", "2001:db8::2", "198.51.100.1", int64(9e9), int64(3e9), int32(24), uint32(64500), "internal", true)
	f.Add("0.0.0.0/0", "::/0", "65536:0", "large:1:2", "", "fe80::1%eth0", "198.51.100.1", "::1", int64(2e9), int64(-1), int32(0), uint32(0), "external", false)
	f.Add(" 198.51.100.1 - 198.51.100.1 ", "198.51.100.0/25", "1:1", "1:1", "large:0:0:0", "::ffff:198.51.100.9", "", "0.0.0.0", int64(3900e6), int64(1300e6), int32(1), uint32(1<<32-1), "sideways", true)
	f.Fuzz(func(t *testing.T, addr1, addr2, comm1, comm2, aliasValue, peerAddr, srcAddr, routerID string,
		hold, keep int64, aggLen int32, peerASN uint32, dynamicASN string, multiHop bool) {
		r := base()
		r.Pools[0].Spec.Addresses = []string{addr1}
		r.Pools[1].Spec.Addresses = []string{addr2, "2001:db8::/120"}
		r.Pools[1].Spec.AvoidBuggyIPs = multiHop
		r.Communities[0].Spec.Communities[0].Value = aliasValue
		r.BGPAdvertisements[0].Spec.Communities = []string{comm1, comm2}
		r.BGPAdvertisements[0].Spec.AggregationLength = &aggLen
		r.BGPAdvertisements[0].Spec.IPAddressPools = nil // all pools
		s := &r.Peers[0].Spec
		s.PeerAddress, s.SourceAddress, s.RouterID = peerAddr, srcAddr, routerID
		s.PeerASN, s.DynamicASN, s.EBGPMultiHop = peerASN, v1beta2.DynamicASNMode(dynamicASN), multiHop
		if hold != 0 {
			s.HoldTime = &metav1.Duration{Duration: time.Duration(hold)}
		}
		if keep != 0 {
			s.KeepaliveTime = &metav1.Duration{Duration: time.Duration(keep)}
		}
		if multiHop {
			s.PasswordSecret = &corev1.SecretReference{Name: comm2}
			s.ConnectTime = &metav1.Duration{Duration: time.Duration(keep)}
		}
		for _, opts := range []Options{{Namespace: ns}, {Namespace: ns, IgnoreTransient: true}, {Namespace: ns, NodeName: "node-1"}} {
			snap, err := Build(r, opts)
			snap2, err2 := Build(r, opts)
			if (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
				t.Fatalf("not deterministic: %v / %v", err, err2)
			}
			if err != nil {
				if snap != nil {
					t.Fatal("snapshot returned with an error")
				}
				checkErrorShape(t, err, opts.IgnoreTransient)
				continue
			}
			if !snap.Equal(snap2) {
				t.Fatal("fingerprint not deterministic")
			}
			if err := checkInvariants(snap); err != nil {
				t.Fatalf("invariants: %v", err)
			}
		}
	})
}

func checkErrorShape(t *testing.T, err error, ignoreTransient bool) {
	t.Helper()
	n := 0
	walk(err, func(e error) {
		n++
		var v *ValidationError
		var tr *TransientError
		switch {
		case errors.As(e, &v):
			if v.Kind == "" || v.Name == "" || v.Rule == "" {
				t.Fatalf("validation error without kind/name/rule: %+v", v)
			}
		case errors.As(e, &tr):
			if ignoreTransient {
				t.Fatalf("transient error with IgnoreTransient: %v", tr)
			}
			if tr.Kind == "" || tr.Name == "" || tr.Rule == "" {
				t.Fatalf("transient error without kind/name/rule: %+v", tr)
			}
		default:
			t.Fatalf("unexpected error type %T: %v", e, e)
		}
	})
	if n == 0 {
		t.Fatal("empty error")
	}
}

// FuzzParseAddressBlock checks address parsing alone (much faster than
// FuzzBuild): no panic, and an accepted entry summarises exactly.
func FuzzParseAddressBlock(f *testing.F) {
	for _, s := range []string{"198.51.100.0/24", "198.51.100.1-198.51.100.9", "2001:db8::-2001:db8::ffff", " 1.2.3.4 - 1.2.3.4 ", "::/0", "0.0.0.0-255.255.255.255"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, _, err := parseAddressBlock(s)
		if err != nil {
			return
		}
		if err := checkBlock(b); err != nil {
			t.Fatalf("%q: %v (%v)", s, err, b.Prefixes)
		}
		if !b.Contains(b.First) || !b.Contains(b.Last) || b.First.Zone() != "" || b.First.Is4In6() {
			t.Fatalf("%q: bad block %+v", s, b)
		}
	})
}

// FuzzParseCommunity checks that an accepted community renders back to
// itself.
func FuzzParseCommunity(f *testing.F) {
	for _, s := range []string{"65000:1", "large:1:2:3", "0:0", "65536:1", "large:4294967295:0:0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCommunity(s)
		if err != nil {
			return
		}
		back, err := ParseCommunity(c.String())
		if err != nil || back != c {
			t.Fatalf("%q -> %v -> %v, %v", s, c, back, err)
		}
		if c.Large {
			if err := bgp.CheckLargeCommunity([3]uint32{c.A, c.B, c.C}); err != nil {
				t.Fatalf("%q accepted, but a path cannot carry it: %v", s, err)
			}
		}
		if !c.Large && (c.A > 0xffff || c.B > 0xffff || c.C != 0) {
			t.Fatalf("%q: standard community out of range: %+v", s, c)
		}
	})
}

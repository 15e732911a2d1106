package gobgp

import (
	"context"
	"encoding/binary"
	"math"
	"net/netip"
	"testing"
	"time"

	gobgppkt "github.com/osrg/gobgp/v3/pkg/packet/bgp"

	"github.com/osrg/gobgp/v3/pkg/apiutil"

	"github.com/herald-lb/herald/internal/bgp"
	"github.com/herald-lb/herald/internal/poll"
)

// TestLinkBandwidthOnTheWire: a path with a Weight carries exactly one
// extended community, the transitive two-octet AS specific link bandwidth
// (type 0x00, sub-type 0x04, RFC 10005) with the AS and Weight × 125,000
// bytes/s as an IEEE float; a four-octet ASN becomes AS_TRANS; no Weight,
// no extended community.
func TestLinkBandwidthOnTheWire(t *testing.T) {
	for _, tc := range []struct {
		asn, weight uint32
		wantAS      uint16
	}{
		{asn: 64512, weight: 3, wantAS: 64512},
		{asn: 4200000001, weight: 1, wantAS: 23456},
		{asn: 64512, weight: bgp.MaxWeight, wantAS: 64512},
	} {
		ap, err := toAPIPath(bgp.Path{Prefix: netip.MustParsePrefix("203.0.113.5/32"), Weight: tc.weight}, tc.asn)
		if err != nil {
			t.Fatal(err)
		}
		attrs, err := apiutil.GetNativePathAttributes(ap)
		if err != nil {
			t.Fatal(err)
		}
		var wire [][]byte
		for _, a := range attrs {
			if ec, ok := a.(*gobgppkt.PathAttributeExtendedCommunities); ok {
				for _, c := range ec.Value {
					b, err := c.Serialize()
					if err != nil {
						t.Fatal(err)
					}
					wire = append(wire, b)
				}
			}
		}
		if len(wire) != 1 {
			t.Fatalf("asn %d weight %d: %d extended communities, want 1", tc.asn, tc.weight, len(wire))
		}
		b := wire[0]
		bw := math.Float32frombits(binary.BigEndian.Uint32(b[4:8]))
		if b[0] != 0x00 || b[1] != 0x04 || binary.BigEndian.Uint16(b[2:4]) != tc.wantAS || bw != float32(tc.weight)*bgp.LinkBandwidthPerWeight {
			t.Errorf("asn %d weight %d: community % x (bandwidth %g), want type 00 sub-type 04 AS %d bandwidth %d",
				tc.asn, tc.weight, b, bw, tc.wantAS, tc.weight*bgp.LinkBandwidthPerWeight)
		}
		if float64(bw) >= 1<<32 {
			t.Errorf("bandwidth %g does not fit a 32-bit integer", bw)
		}
	}
	ap, err := toAPIPath(bgp.Path{Prefix: netip.MustParsePrefix("203.0.113.5/32")}, 64512)
	if err != nil {
		t.Fatal(err)
	}
	attrs, _ := apiutil.GetNativePathAttributes(ap)
	for _, a := range attrs {
		if _, ok := a.(*gobgppkt.PathAttributeExtendedCommunities); ok {
			t.Errorf("path without Weight carries extended communities: %v", a)
		}
	}
}

// TestWeightChangeUpdatesInPlace: the router receives the link bandwidth
// community, and a changed Weight reaches it as a new UPDATE of the same
// prefix, never a withdrawal (the route does not flap while endpoints come
// and go); dropping the Weight removes the community the same way.
func TestWeightChangeUpdatesInPlace(t *testing.T) {
	skipShort(t)
	r := newRouter(t, routerASN, "198.51.100.254", "127.0.0.1")
	r.addPeer(t, "127.0.0.1", ourASN)
	s := newSpeaker(t, Options{})
	ctx := context.Background()
	if err := s.SetPeers(ctx, []bgp.PeerConfig{r.peerConfig("r", ourASN)}); err != nil {
		t.Fatal(err)
	}
	pfx := netip.MustParsePrefix("203.0.113.5/32")
	set := func(w uint32) {
		t.Helper()
		if err := s.SetPaths(ctx, []bgp.Path{{Prefix: pfx, Weight: w, WeightSource: "ns/a"}}); err != nil {
			t.Fatal(err)
		}
	}
	set(1)
	waitEstablished(t, s, "r")
	for _, w := range []uint32{1, 3, 2, 0, 4} {
		set(w)
		want := float32(w) * bgp.LinkBandwidthPerWeight
		poll.Until(t, 10*time.Second, "router has the prefix with the new bandwidth", func() bool {
			got, ok := r.paths(t, familyV4)[pfx]
			return ok && got.LinkBandwidth == want && (w == 0 || got.LinkBandwidthAS == ourASN)
		})
	}
	msgs := r.peerInfo(t, "127.0.0.1").GetState().GetMessages().GetReceived()
	if msgs.GetWithdrawPrefix() != 0 || msgs.GetWithdrawUpdate() != 0 {
		t.Errorf("router received %d withdrawn prefixes in %d UPDATEs, want none (a weight change is an attribute change)",
			msgs.GetWithdrawPrefix(), msgs.GetWithdrawUpdate())
	}
}

package gobgp

import (
	"context"
	"net/netip"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v3/api"

	"github.com/herald-lb/herald/internal/bgp"
	"github.com/herald-lb/herald/internal/poll"
)

// TestAnnouncer has an Announcer on loopback send 300 IPv6 /64s to a
// speaker under a received-prefix limit of 1000 (the session comes up and
// the speaker receives all 300), then to one with a limit of 100 (the
// session is closed at the limit and the speaker reports it).
func TestAnnouncer(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	port := freePort(t, lo.String())
	a, err := StartAnnouncer(context.Background(), AnnouncerConfig{ASN: routerASN, RouterID: netip.MustParseAddr("198.51.100.254"),
		Listen: lo, Port: uint16(port), Neighbor: lo, NeighborASN: ourASN, Prefixes: 300, NextHop: netip.MustParseAddr("2001:db8::1")})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	pc := bgp.PeerConfig{Name: "rtr", Address: lo, Port: uint16(port), MyASN: ourASN, PeerASN: routerASN, RouterID: netip.MustParseAddr(ourRouterID),
		HoldTime: 9 * time.Second, ConnectTime: time.Second, DualStack: true}
	received := func(s *Speaker) (n uint64) {
		_ = s.srv.ListPeer(context.Background(), &api.ListPeerRequest{}, func(p *api.Peer) {
			for _, f := range p.GetAfiSafis() {
				n += f.GetState().GetReceived()
			}
		})
		return n
	}

	s := newSpeaker(t, Options{MaxReceivedPrefixes: 1000})
	if err := s.SetPeers(context.Background(), []bgp.PeerConfig{pc}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "the speaker receives 300 prefixes", func() bool { return received(s) == 300 })
	if st, _, err := a.SessionState(context.Background()); err != nil || st != "established" {
		t.Errorf("announcer's session state %q (%v), want established", st, err)
	}
	s.Close()

	limited := make(chan bgp.PeerState, 64)
	s = newSpeaker(t, Options{MaxReceivedPrefixes: 100, OnPeerState: func(st bgp.PeerState) {
		if st.PrefixLimitFamily != "" {
			select {
			case limited <- st:
			default:
			}
		}
	}})
	defer s.Close()
	if err := s.SetPeers(context.Background(), []bgp.PeerConfig{pc}); err != nil {
		t.Fatal(err)
	}
	select {
	case st := <-limited:
		if st.PrefixLimitFamily != "ipv6-unicast" || st.PrefixLimit != 100 {
			t.Errorf("prefix-limit report %+v, want ipv6-unicast at 100", st)
		}
	case <-time.After(time.Minute):
		t.Fatal("no prefix-limit report with 300 prefixes sent and a limit of 100")
	}
}

package gobgp

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
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
	a, pc := startTestAnnouncer(t)
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

// TestPrefixLimitHoldDown: a session closed at the prefix limit is held
// down (its gobgp neighbor replaced by an administratively down one, which
// holds none of the table) until PrefixLimitRestart; the peer can be
// removed meanwhile, and added again it is limited again.
func TestPrefixLimitHoldDown(t *testing.T) {
	_, pc := startTestAnnouncer(t)
	var reports atomic.Int32
	s := newSpeaker(t, Options{MaxReceivedPrefixes: 100, PrefixLimitRestart: time.Hour, OnPeerState: func(st bgp.PeerState) {
		if st.PrefixLimitFamily == "ipv6-unicast" && st.PrefixLimit == 100 && st.State != bgp.StateEstablished {
			reports.Add(1)
		}
	}})
	if err := s.SetPeers(context.Background(), []bgp.PeerConfig{pc}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "the prefix limit reported", func() bool { return reports.Load() > 0 })
	poll.Until(t, 30*time.Second, "the neighbor held down with nothing received", func() error {
		var admin api.PeerState_AdminState
		var received uint64
		var n int
		_ = s.srv.ListPeer(context.Background(), &api.ListPeerRequest{}, func(p *api.Peer) {
			n++
			admin = p.GetState().GetAdminState()
			for _, f := range p.GetAfiSafis() {
				received += f.GetState().GetReceived()
			}
		})
		if st := stateOf(s, "rtr"); n != 1 || admin != api.PeerState_DOWN || received != 0 || st.State != bgp.StateIdle {
			return fmt.Errorf("%d neighbors, admin state %v, %d received, state %v", n, admin, received, st.State)
		}
		return nil
	})
	if err := s.SetPeers(context.Background(), nil); err != nil {
		t.Fatalf("removing the held-down peer: %v", err)
	}
	if st := s.PeerStates(); len(st) != 0 {
		t.Fatalf("peer states after removing the peer: %+v", st)
	}
	before := reports.Load()
	if err := s.SetPeers(context.Background(), []bgp.PeerConfig{pc}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "the prefix limit reported for the added peer", func() bool { return reports.Load() > before })
}

// startTestAnnouncer starts an Announcer on loopback that sends 300 IPv6
// /64s (stopped when t ends) and returns it and the speaker's peer
// configuration for it.
func startTestAnnouncer(t *testing.T) (*Announcer, bgp.PeerConfig) {
	t.Helper()
	lo := netip.MustParseAddr("127.0.0.1")
	port := freePort(t, lo.String())
	a, err := StartAnnouncer(context.Background(), AnnouncerConfig{ASN: routerASN, RouterID: netip.MustParseAddr("198.51.100.254"),
		Listen: lo, Port: uint16(port), Neighbor: lo, NeighborASN: ourASN, Prefixes: 300, NextHop: netip.MustParseAddr("2001:db8::1")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a, bgp.PeerConfig{Name: "rtr", Address: lo, Port: uint16(port), MyASN: ourASN, PeerASN: routerASN, RouterID: netip.MustParseAddr(ourRouterID),
		HoldTime: 9 * time.Second, ConnectTime: time.Second, DualStack: true}
}

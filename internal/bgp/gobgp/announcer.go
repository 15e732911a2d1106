package gobgp

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/server"
	apb "google.golang.org/protobuf/types/known/anypb"
)

// AnnouncerConfig describes an Announcer: a router that sends a large
// table to one speaker, for tests and the lab's chaos scenarios (a peer
// that sends a full table).
type AnnouncerConfig struct {
	// ASN and RouterID are the announcer's own (RouterID an IPv4 address).
	ASN      uint32
	RouterID netip.Addr
	// Listen and Port are where it waits for the speaker's connection
	// (passive: it never connects itself).
	Listen netip.Addr
	Port   uint16
	// Neighbor and NeighborASN are the speaker's address and ASN.
	Neighbor    netip.Addr
	NeighborASN uint32
	// Prefixes is how many IPv6 /64s it sends: 2001:db8:X:Y::/64 for
	// j = 0..Prefixes-1, X = j>>16, Y = j&0xffff (RFC 3849 documentation
	// space; at most 2^20 so that they stay below 2001:db8:10::), with
	// next hop NextHop, over the session as IPv6 unicast (RFC 4760
	// multiprotocol, also on an IPv4 session).
	Prefixes int
	NextHop  netip.Addr
	// Log receives gobgp's log; nil discards it.
	Log *slog.Logger
}

// Announcer is a running gobgp router with AnnouncerConfig's table.
type Announcer struct {
	srv      *server.BgpServer
	neighbor string
}

// StartAnnouncer starts the router, loads its table and adds the passive
// neighbor. Close stops it.
func StartAnnouncer(ctx context.Context, c AnnouncerConfig) (*Announcer, error) {
	if c.Prefixes < 0 || c.Prefixes > 1<<20 {
		return nil, fmt.Errorf("announcer: %d prefixes: must be 0..%d", c.Prefixes, 1<<20)
	}
	log := c.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv := server.NewBgpServer(server.LoggerOption(newSlogAdapter(log)))
	go srv.Serve()
	a := &Announcer{srv: srv, neighbor: c.Neighbor.String()}
	if err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: c.ASN, RouterId: c.RouterID.String(), ListenPort: int32(c.Port), ListenAddresses: []string{c.Listen.String()},
	}}); err != nil {
		srv.Stop()
		return nil, fmt.Errorf("announcer: start: %w", err)
	}
	origin, _ := apb.New(&api.OriginAttribute{Origin: 0})
	for j := range c.Prefixes {
		nlri, _ := apb.New(&api.IPAddressPrefix{Prefix: fmt.Sprintf("2001:db8:%x:%x::", j>>16, j&0xffff), PrefixLen: 64})
		mp, _ := apb.New(&api.MpReachNLRIAttribute{Family: familyV6, NextHops: []string{c.NextHop.String()}, Nlris: []*apb.Any{nlri}})
		p := &api.Path{Family: familyV6, Nlri: nlri, Pattrs: []*apb.Any{origin, mp}}
		if _, err := srv.AddPath(ctx, &api.AddPathRequest{TableType: api.TableType_GLOBAL, Path: p}); err != nil {
			a.Close()
			return nil, fmt.Errorf("announcer: add path %d: %w", j, err)
		}
	}
	if err := srv.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: a.neighbor, PeerAsn: c.NeighborASN},
		Transport: &api.Transport{PassiveMode: true, LocalAddress: c.Listen.String()},
		Timers:    &api.Timers{Config: &api.TimersConfig{ConnectRetry: 1, HoldTime: 90, KeepaliveInterval: 30}},
		AfiSafis: []*api.AfiSafi{
			{Config: &api.AfiSafiConfig{Family: familyV4, Enabled: true}},
			{Config: &api.AfiSafiConfig{Family: familyV6, Enabled: true}},
		},
	}}); err != nil {
		a.Close()
		return nil, fmt.Errorf("announcer: add neighbor %s: %w", a.neighbor, err)
	}
	return a, nil
}

// SessionState returns the session's BGP FSM state (RFC 4271 §8.2.2:
// "idle", "connect", "active", "opensent", "openconfirm", "established")
// and the paths sent on it.
func (a *Announcer) SessionState(ctx context.Context) (state string, sent uint64, err error) {
	state = "unknown"
	err = a.srv.ListPeer(ctx, &api.ListPeerRequest{Address: a.neighbor}, func(p *api.Peer) {
		state = strings.ToLower(strings.TrimPrefix(p.GetState().GetSessionState().String(), "SESSION_STATE_"))
		for _, f := range p.GetAfiSafis() {
			sent += f.GetState().GetAdvertised()
		}
	})
	return state, sent, err
}

// Close stops the router (closing the session).
func (a *Announcer) Close() {
	_ = a.srv.StopBgp(context.Background(), &api.StopBgpRequest{})
	a.srv.Stop()
}

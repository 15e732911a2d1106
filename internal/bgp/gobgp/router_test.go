package gobgp

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/server"

	"github.com/herald-lb/herald/internal/bgp"
	"github.com/herald-lb/herald/internal/poll"
)

// This file holds the test harness: a second in-process gobgp acting as the
// router, listening on a random loopback port with passive neighbors (as in
// gobgp's own TestMonitor), plus helpers to read what it received.

const (
	ourASN      = 64512
	routerASN   = 64513
	ourRouterID = "198.51.100.1"
)

// testLogger discards the log, unless HERALD_BGP_TEST_LOG is set: "info"
// writes info and above to stderr (gobgp then builds no per-UPDATE debug
// message, which slows a large table down), anything else debug and above.
func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("HERALD_BGP_TEST_LOG") == "info" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	if os.Getenv("HERALD_BGP_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// freePort returns a TCP port free on every given loopback address.
func freePort(t testing.TB, addrs ...string) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", net.JoinHostPort(addrs[0], "0"))
		if err != nil {
			t.Fatalf("listen %s: %v", addrs[0], err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		ok := true
		var others []net.Listener
		for _, a := range addrs[1:] {
			o, err := net.Listen("tcp", net.JoinHostPort(a, fmt.Sprint(port)))
			if err != nil {
				ok = false
				break
			}
			others = append(others, o)
		}
		l.Close()
		for _, o := range others {
			o.Close()
		}
		if ok && port >= 10179 {
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

func requireIPv6(t testing.TB) {
	l, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("IPv6 loopback unavailable: %v", err)
	}
	l.Close()
}

type router struct {
	srv  *server.BgpServer
	addr netip.Addr
	port int
	asn  uint32
}

// newRouter starts a gobgp "router" listening on addrs (loopback) at a random port.
func newRouter(t testing.TB, asn uint32, routerID string, addrs ...string) *router {
	t.Helper()
	port := freePort(t, addrs...)
	srv := server.NewBgpServer(server.LoggerOption(newSlogAdapter(testLogger(t).With("side", "router"))))
	go srv.Serve()
	err := srv.StartBgp(context.Background(), &api.StartBgpRequest{Global: &api.Global{
		Asn: asn, RouterId: routerID, ListenPort: int32(port), ListenAddresses: addrs,
	}})
	if err != nil {
		t.Fatalf("router StartBgp: %v", err)
	}
	t.Cleanup(func() { srv.StopBgp(context.Background(), &api.StopBgpRequest{}) })
	return &router{srv: srv, addr: netip.MustParseAddr(addrs[0]), port: port, asn: asn}
}

type peerOpt func(*api.Peer)

func withPassword(pw string) peerOpt { return func(p *api.Peer) { p.Conf.AuthPassword = pw } }

// withHoldTime sets the router's hold time (seconds; keepalive a third).
func withHoldTime(hold uint64) peerOpt {
	return func(p *api.Peer) { p.Timers.Config.HoldTime, p.Timers.Config.KeepaliveInterval = hold, hold/3 }
}
func withGR(restart uint32) peerOpt {
	return func(p *api.Peer) {
		p.GracefulRestart = &api.GracefulRestart{Enabled: true, RestartTime: restart}
		for _, a := range p.AfiSafis {
			a.MpGracefulRestart = &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}
		}
	}
}

// addPeer adds a passive neighbor (our speaker) to the router with both families.
func (r *router) addPeer(t testing.TB, neighbor string, peerASN uint32, opts ...peerOpt) {
	t.Helper()
	p := &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: neighbor, PeerAsn: peerASN},
		Transport: &api.Transport{PassiveMode: true},
		Timers:    &api.Timers{Config: &api.TimersConfig{ConnectRetry: 1, HoldTime: 9, KeepaliveInterval: 3}},
		AfiSafis: []*api.AfiSafi{
			{Config: &api.AfiSafiConfig{Family: familyV4, Enabled: true}},
			{Config: &api.AfiSafiConfig{Family: familyV6, Enabled: true}},
		},
	}
	for _, o := range opts {
		o(p)
	}
	if err := r.srv.AddPeer(context.Background(), &api.AddPeerRequest{Peer: p}); err != nil {
		t.Fatalf("router AddPeer %s: %v", neighbor, err)
	}
}

// peerConfig is our side of a session to r.
func (r *router) peerConfig(name string, myASN uint32) bgp.PeerConfig {
	return bgp.PeerConfig{
		Name: name, Address: r.addr, Port: uint16(r.port),
		MyASN: myASN, PeerASN: r.asn, RouterID: netip.MustParseAddr(ourRouterID),
		HoldTime: 9 * time.Second, ConnectTime: time.Second,
	}
}

// receivedPath is what the router holds for one prefix.
type receivedPath struct {
	NextHop     netip.Addr
	Communities []uint32
	Large       [][3]uint32
	LocalPref   *uint32
	ASPath      []uint32
	Stale       bool
	// LinkBandwidth is the link bandwidth extended community's value in
	// bytes/s and its AS (RFC 10005), 0 without one.
	LinkBandwidth   float32
	LinkBandwidthAS uint32
}

// prefixOf decodes the NLRI of a gobgp path (as listed by ListPath).
func prefixOf(p *api.Path) (netip.Prefix, error) {
	var n api.IPAddressPrefix
	if err := p.GetNlri().UnmarshalTo(&n); err != nil {
		return netip.Prefix{}, err
	}
	a, err := netip.ParseAddr(n.Prefix)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, int(n.PrefixLen)), nil
}

func (r *router) paths(t testing.TB, fam *api.Family) map[netip.Prefix]receivedPath {
	t.Helper()
	out := map[netip.Prefix]receivedPath{}
	err := r.srv.ListPath(context.Background(), &api.ListPathRequest{TableType: api.TableType_GLOBAL, Family: fam}, func(d *api.Destination) {
		for _, p := range d.Paths {
			if !p.Best {
				continue
			}
			pfx, err := prefixOf(p)
			if err != nil {
				t.Errorf("decode NLRI: %v", err)
				return
			}
			out[pfx] = decodePath(t, p)
		}
	})
	if err != nil {
		t.Fatalf("router ListPath: %v", err)
	}
	return out
}

func decodePath(t testing.TB, p *api.Path) receivedPath {
	var rp receivedPath
	rp.Stale = p.Stale
	for _, a := range p.Pattrs {
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Errorf("decode attribute: %v", err)
			continue
		}
		switch v := m.(type) {
		case *api.NextHopAttribute:
			rp.NextHop = netip.MustParseAddr(v.NextHop)
		case *api.MpReachNLRIAttribute:
			if len(v.NextHops) > 0 {
				rp.NextHop = netip.MustParseAddr(v.NextHops[0])
			}
		case *api.CommunitiesAttribute:
			rp.Communities = v.Communities
		case *api.LargeCommunitiesAttribute:
			for _, c := range v.Communities {
				rp.Large = append(rp.Large, [3]uint32{c.GlobalAdmin, c.LocalData1, c.LocalData2})
			}
		case *api.LocalPrefAttribute:
			lp := v.LocalPref
			rp.LocalPref = &lp
		case *api.AsPathAttribute:
			for _, seg := range v.Segments {
				rp.ASPath = append(rp.ASPath, seg.Numbers...)
			}
		case *api.ExtendedCommunitiesAttribute:
			for _, c := range v.Communities {
				m, err := c.UnmarshalNew()
				if err != nil {
					t.Errorf("decode extended community: %v", err)
					continue
				}
				if lb, ok := m.(*api.LinkBandwidthExtended); ok {
					rp.LinkBandwidth, rp.LinkBandwidthAS = lb.Bandwidth, lb.Asn
				}
			}
		}
	}
	return rp
}

// peerInfo returns the router's view of its neighbor.
func (r *router) peerInfo(t testing.TB, neighbor string) *api.Peer {
	t.Helper()
	var out *api.Peer
	if err := r.srv.ListPeer(context.Background(), &api.ListPeerRequest{Address: neighbor}, func(p *api.Peer) { out = p }); err != nil {
		t.Fatalf("router ListPeer: %v", err)
	}
	return out
}

func newSpeaker(t testing.TB, opts Options) *Speaker {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t).With("side", "herald")
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func stateOf(s *Speaker, name string) bgp.PeerState {
	for _, ps := range s.PeerStates() {
		if ps.Name == name {
			return ps
		}
	}
	return bgp.PeerState{}
}

func waitEstablished(t testing.TB, s *Speaker, name string) {
	t.Helper()
	poll.Until(t, 20*time.Second, "session "+name+" Established", func() bool {
		return stateOf(s, name).State == bgp.StateEstablished
	})
}

// tcpProxy forwards one loopback port to another and can cut every
// connection at once without either BGP side sending a NOTIFICATION.
type tcpProxy struct {
	l     net.Listener
	to    string
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newTCPProxy(t testing.TB, to string) *tcpProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{l: l, to: to}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); io.Copy(u, c); u.Close() }()
			go func() { defer p.wg.Done(); io.Copy(c, u); c.Close() }()
		}
	}()
	t.Cleanup(p.cut)
	return p
}

func (p *tcpProxy) port() int { return p.l.Addr().(*net.TCPAddr).Port }

// cut closes the listener and every connection, then waits for the copiers.
func (p *tcpProxy) cut() {
	p.l.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

package gobgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/herald-lb/herald/internal/bgp"
	"github.com/herald-lb/herald/internal/poll"
)

func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("in-process BGP sessions skipped with -short")
	}
	if gobgpRaces {
		t.Skip("two in-process gobgp servers trip races inside gobgp v3.37 itself (see race_on_test.go); run without -race")
	}
	t.Parallel()
}

// skipShortOneServer is for tests with a single gobgp server (no router),
// which also run under -race.
func skipShortOneServer(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("in-process BGP skipped with -short")
	}
	if !gobgpRaces { // parallel StartBgp calls race on gobgp package globals
		t.Parallel()
	}
}

func u32(v uint32) *uint32 { return &v }

// TestIPv4AttributesEBGPAndIBGP: one iBGP and one eBGP router; the same path
// reaches both with next hop, communities and large communities; LOCAL_PREF
// only on iBGP; no internal markers leak; AS_PATH is prepended only on eBGP.
func TestIPv4AttributesEBGPAndIBGP(t *testing.T) {
	skipShort(t)
	ibgp := newRouter(t, ourASN, "198.51.100.254", "127.0.0.1")
	ebgp := newRouter(t, routerASN, "198.51.100.253", "127.0.0.2")
	ibgp.addPeer(t, "127.0.0.1", ourASN)
	ebgp.addPeer(t, "127.0.0.1", ourASN)

	reg := prometheus.NewRegistry()
	s := newSpeaker(t, Options{Registerer: reg})
	ctx := context.Background()
	pi := ibgp.peerConfig("ibgp", ourASN)
	pe := ebgp.peerConfig("ebgp", ourASN)
	pe.SourceAddress = netip.MustParseAddr("127.0.0.1")
	if err := s.SetPeers(ctx, []bgp.PeerConfig{pi, pe}); err != nil {
		t.Fatal(err)
	}
	paths := []bgp.Path{
		{Prefix: netip.MustParsePrefix("203.0.113.10/32"), Communities: []uint32{64512<<16 | 100, 65535<<16 | 65281}, LargeCommunities: [][3]uint32{{64512, 1, 2}}, LocalPref: u32(250)},
		// Aggregation: a /24 announced as such.
		{Prefix: netip.MustParsePrefix("198.51.100.0/24")},
		// Restricted to both peers by name: markers must be stripped.
		{Prefix: netip.MustParsePrefix("203.0.113.20/32"), Peers: []string{"ibgp", "ebgp"}, LargeCommunities: [][3]uint32{{7, 8, 9}}},
	}
	if err := s.SetPaths(ctx, paths); err != nil {
		t.Fatal(err)
	}
	waitEstablished(t, s, "ibgp")
	waitEstablished(t, s, "ebgp")
	for _, r := range []*router{ibgp, ebgp} {
		poll.Until(t, 10*time.Second, "3 paths at router", func() bool { return len(r.paths(t, familyV4)) == 3 })
	}

	gotI, gotE := ibgp.paths(t, familyV4), ebgp.paths(t, familyV4)
	lo := netip.MustParseAddr("127.0.0.1")
	p10 := netip.MustParsePrefix("203.0.113.10/32")
	for name, got := range map[string]receivedPath{"ibgp": gotI[p10], "ebgp": gotE[p10]} {
		if got.NextHop != lo {
			t.Errorf("%s: next hop %v, want %v", name, got.NextHop, lo)
		}
		if want := []uint32{64512<<16 | 100, 65535<<16 | 65281}; !reflect.DeepEqual(got.Communities, want) {
			t.Errorf("%s: communities %v, want %v", name, got.Communities, want)
		}
		if want := [][3]uint32{{64512, 1, 2}}; !reflect.DeepEqual(got.Large, want) {
			t.Errorf("%s: large communities %v, want %v", name, got.Large, want)
		}
	}
	if gotI[p10].LocalPref == nil || *gotI[p10].LocalPref != 250 {
		t.Errorf("ibgp: local pref %v, want 250", gotI[p10].LocalPref)
	}
	if gotE[p10].LocalPref != nil {
		t.Errorf("ebgp: local pref %d sent to an eBGP peer", *gotE[p10].LocalPref)
	}
	if len(gotI[p10].ASPath) != 0 {
		t.Errorf("ibgp: AS_PATH %v, want empty", gotI[p10].ASPath)
	}
	if !reflect.DeepEqual(gotE[p10].ASPath, []uint32{ourASN}) {
		t.Errorf("ebgp: AS_PATH %v, want [%d]", gotE[p10].ASPath, ourASN)
	}
	if _, ok := gotE[netip.MustParsePrefix("198.51.100.0/24")]; !ok {
		t.Errorf("aggregated /24 missing at eBGP router: %v", gotE)
	}
	p20 := netip.MustParsePrefix("203.0.113.20/32")
	for name, got := range map[string]receivedPath{"ibgp": gotI[p20], "ebgp": gotE[p20]} {
		if want := [][3]uint32{{7, 8, 9}}; !reflect.DeepEqual(got.Large, want) {
			t.Errorf("%s: restricted path large communities %v, want %v (markers must be stripped)", name, got.Large, want)
		}
	}

	// Metrics with MetalLB names and peer="IP:port".
	poll.Until(t, 5*time.Second, "announced_prefixes_total 3", func() bool {
		return testutil.ToFloat64(gaugeFor(t, reg, "metallb_bgp_announced_prefixes_total", pe.MetricLabel())) == 3
	})
	if v := testutil.ToFloat64(gaugeFor(t, reg, "metallb_bgp_session_up", pe.MetricLabel())); v != 1 {
		t.Errorf("session_up = %v", v)
	}
	if v := testutil.ToFloat64(gaugeFor(t, reg, "metallb_bgp_pending_prefixes_total", pe.MetricLabel())); v != 0 {
		t.Errorf("pending = %v", v)
	}
	if v := testutil.ToFloat64(gaugeFor(t, reg, "metallb_bgp_updates_total", pe.MetricLabel())); v < 1 {
		t.Errorf("updates_total = %v", v)
	}
}

// gaugeFor extracts one series from the registry as a collector for testutil.
func gaugeFor(t *testing.T, reg *prometheus.Registry, name, peer string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "peer" && l.GetValue() == peer {
					v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
					g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
					g.Set(v)
					return g
				}
			}
		}
	}
	t.Fatalf("metric %s{peer=%q} not found", name, peer)
	return nil
}

// TestIPv6Session: IPv6 unicast over ::1 via MP_REACH_NLRI with next hop "::"
// filled in by gobgp.
func TestIPv6Session(t *testing.T) {
	skipShort(t)
	requireIPv6(t)
	r := newRouter(t, routerASN, "198.51.100.252", "::1")
	r.addPeer(t, "::1", ourASN)
	events := make(chan bgp.PeerState, 16)
	s := newSpeaker(t, Options{OnPeerState: func(ps bgp.PeerState) {
		select {
		case events <- ps:
		default:
		}
	}})
	ctx := context.Background()
	if err := s.SetPeers(ctx, []bgp.PeerConfig{r.peerConfig("v6", ourASN)}); err != nil {
		t.Fatal(err)
	}
	p := netip.MustParsePrefix("2001:db8:100::10/128")
	agg := netip.MustParsePrefix("2001:db8:200::/64")
	if err := s.SetPaths(ctx, []bgp.Path{{Prefix: p, Communities: []uint32{1}}, {Prefix: agg}}); err != nil {
		t.Fatal(err)
	}
	waitEstablished(t, s, "v6")
	timeout := time.After(5 * time.Second)
	for got := false; !got; {
		select {
		case ev := <-events:
			got = ev.Name == "v6" && ev.State == bgp.StateEstablished && ev.EstablishedCount == 1
			if want := r.peerConfig("v6", ourASN).MetricLabel(); ev.Peer != want {
				t.Errorf("OnPeerState Peer = %q, want %q", ev.Peer, want)
			}
		case <-timeout:
			t.Fatal("no Established event from OnPeerState")
		}
	}
	poll.Until(t, 10*time.Second, "IPv6 paths at router", func() bool { return len(r.paths(t, familyV6)) == 2 })
	got := r.paths(t, familyV6)[p]
	if want := netip.MustParseAddr("::1"); got.NextHop != want {
		t.Errorf("IPv6 next hop %v, want %v", got.NextHop, want)
	}
	if !reflect.DeepEqual(got.Communities, []uint32{1}) {
		t.Errorf("communities %v", got.Communities)
	}
	if n := len(r.paths(t, familyV4)); n != 0 {
		t.Errorf("router has %d IPv4 paths on an IPv6-only session", n)
	}
}

// TestPerPeerRestrictionAndWithdraw: two routers; a path restricted to one
// reaches only that one; moving it to the other withdraws it from the
// first; withdrawing one path leaves the others.
func TestPerPeerRestrictionAndWithdraw(t *testing.T) {
	skipShort(t)
	a := newRouter(t, routerASN, "198.51.100.254", "127.0.0.1")
	b := newRouter(t, routerASN, "198.51.100.253", "127.0.0.2")
	a.addPeer(t, "127.0.0.1", ourASN)
	b.addPeer(t, "127.0.0.1", ourASN)
	s := newSpeaker(t, Options{})
	ctx := context.Background()
	if err := s.SetPeers(ctx, []bgp.PeerConfig{a.peerConfig("a", ourASN), b.peerConfig("b", ourASN)}); err != nil {
		t.Fatal(err)
	}
	all := netip.MustParsePrefix("203.0.113.1/32")
	onlyA := netip.MustParsePrefix("203.0.113.2/32")
	other := netip.MustParsePrefix("203.0.113.3/32")
	set := func(paths ...bgp.Path) {
		t.Helper()
		if err := s.SetPaths(ctx, paths); err != nil {
			t.Fatal(err)
		}
	}
	set(bgp.Path{Prefix: all}, bgp.Path{Prefix: onlyA, Peers: []string{"a"}}, bgp.Path{Prefix: other})
	waitEstablished(t, s, "a")
	waitEstablished(t, s, "b")
	has := func(r *router, want ...netip.Prefix) func() bool {
		return func() bool {
			got := r.paths(t, familyV4)
			if len(got) != len(want) {
				return false
			}
			for _, p := range want {
				if _, ok := got[p]; !ok {
					return false
				}
			}
			return true
		}
	}
	poll.Until(t, 10*time.Second, "a has all three", has(a, all, onlyA, other))
	poll.Until(t, 10*time.Second, "b has the two unrestricted", has(b, all, other))

	// Move the restricted path from a to b: a gets a withdrawal.
	set(bgp.Path{Prefix: all}, bgp.Path{Prefix: onlyA, Peers: []string{"b"}}, bgp.Path{Prefix: other})
	poll.Until(t, 10*time.Second, "a lost the moved path", has(a, all, other))
	poll.Until(t, 10*time.Second, "b got the moved path", has(b, all, onlyA, other))

	// Withdraw one prefix: only it disappears.
	set(bgp.Path{Prefix: all}, bgp.Path{Prefix: onlyA, Peers: []string{"b"}})
	poll.Until(t, 10*time.Second, "a: other withdrawn", has(a, all))
	poll.Until(t, 10*time.Second, "b: other withdrawn", has(b, all, onlyA))

	// Restrict to a peer name that does not exist: sent nowhere.
	set(bgp.Path{Prefix: all, Peers: []string{"nobody"}})
	poll.Until(t, 10*time.Second, "a empty", has(a))
	poll.Until(t, 10*time.Second, "b empty", has(b))
}

// TestChangedPeerLeavesOthersAlone: changing one peer's hold time recreates
// that session only.
func TestChangedPeerLeavesOthersAlone(t *testing.T) {
	skipShort(t)
	a := newRouter(t, routerASN, "198.51.100.254", "127.0.0.1")
	b := newRouter(t, routerASN, "198.51.100.253", "127.0.0.2")
	a.addPeer(t, "127.0.0.1", ourASN)
	b.addPeer(t, "127.0.0.1", ourASN)
	s := newSpeaker(t, Options{})
	ctx := context.Background()
	pa, pb := a.peerConfig("a", ourASN), b.peerConfig("b", ourASN)
	if err := s.SetPeers(ctx, []bgp.PeerConfig{pa, pb}); err != nil {
		t.Fatal(err)
	}
	waitEstablished(t, s, "a")
	waitEstablished(t, s, "b")
	bBefore := b.peerInfo(t, "127.0.0.1")
	aBefore := a.peerInfo(t, "127.0.0.1")

	pa.HoldTime = 15 * time.Second
	if err := s.SetPeers(ctx, []bgp.PeerConfig{pa, pb}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 20*time.Second, "a re-established with hold time 15", func() bool {
		p := a.peerInfo(t, "127.0.0.1")
		return p.GetState().GetSessionState() == api.PeerState_ESTABLISHED &&
			p.GetTimers().GetState().GetNegotiatedHoldTime() == 9 && // min(15, router's 9)
			p.GetState().GetFlops() > aBefore.GetState().GetFlops()
	})
	bAfter := b.peerInfo(t, "127.0.0.1")
	if bAfter.GetState().GetFlops() != bBefore.GetState().GetFlops() ||
		!bAfter.GetTimers().GetState().GetUptime().AsTime().Equal(bBefore.GetTimers().GetState().GetUptime().AsTime()) {
		t.Errorf("session b was reset: flops %d -> %d, uptime %v -> %v",
			bBefore.GetState().GetFlops(), bAfter.GetState().GetFlops(),
			bBefore.GetTimers().GetState().GetUptime().AsTime(), bAfter.GetTimers().GetState().GetUptime().AsTime())
	}
	if got := stateOf(s, "b").EstablishedCount; got != 1 {
		t.Errorf("b established %d times, want 1", got)
	}
	// Our side of a now offers hold time 15.
	var hold uint64
	s.srv.ListPeer(ctx, &api.ListPeerRequest{Address: "127.0.0.1"}, func(p *api.Peer) { hold = p.GetTimers().GetConfig().GetHoldTime() })
	if hold != 15 {
		t.Errorf("our configured hold time for a = %d, want 15", hold)
	}
}

// TestMD5: TCP-MD5 (RFC 2385) with the same password establishes; with a
// different password the router never sees an OPEN.
func TestMD5(t *testing.T) {
	skipShort(t)
	if err := listenerMD5Supported(); err != nil {
		// The router side (gobgp's listener) needs TCP_MD5SIG on a listening
		// socket; some sandboxes (e.g. gVisor-like kernels) refuse it with
		// ENOPROTOOPT while real Linux supports it.
		t.Skipf("TCP_MD5SIG on a listening socket unsupported by this kernel: %v", err)
	}
	good := newRouter(t, routerASN, "198.51.100.254", "127.0.0.1")
	bad := newRouter(t, routerASN, "198.51.100.253", "127.0.0.2")
	good.addPeer(t, "127.0.0.1", ourASN, withPassword("s3cret"))
	bad.addPeer(t, "127.0.0.1", ourASN, withPassword("other"))
	// gobgp logs each failed connection attempt (at debug level).
	failed := &recordCounter{Handler: testLogger(t).Handler(), n: new(atomic.Int64), match: func(r slog.Record) bool {
		return r.Message == "failed to connect" && recordAttr(r, "Key") == "127.0.0.2"
	}}
	s := newSpeaker(t, Options{Logger: slog.New(failed).With("side", "herald")})
	pg, pb := good.peerConfig("good", ourASN), bad.peerConfig("bad", ourASN)
	pg.Password, pb.Password = "s3cret", "s3cret"
	if err := s.SetPeers(context.Background(), []bgp.PeerConfig{pg, pb}); err != nil {
		t.Fatal(err)
	}
	waitEstablished(t, s, "good")
	// Several connection attempts (ConnectRetry 1 s) to the bad router.
	poll.Until(t, 30*time.Second, "three failed connection attempts to bad", func() error {
		if n := failed.n.Load(); n < 3 {
			return fmt.Errorf("%d failed attempts", n)
		}
		return nil
	})
	if st := stateOf(s, "bad"); st.State == bgp.StateEstablished || st.EstablishedCount != 0 {
		t.Fatalf("session with the wrong MD5 password: %+v", st)
	}
	if p := bad.peerInfo(t, "127.0.0.1"); p.GetState().GetMessages().GetReceived().GetOpen() != 0 {
		t.Errorf("router with a different password received %d OPENs", p.GetState().GetMessages().GetReceived().GetOpen())
	}
}

// recordCounter is a slog.Handler that counts the records match accepts
// (at any level, debug included, or from level on if level is set) and
// passes on what Handler is enabled for.
type recordCounter struct {
	slog.Handler
	match func(slog.Record) bool
	n     *atomic.Int64
	// level, if set, is the lowest level counted: gobgp then builds only
	// the debug messages Handler asks for (it builds one per received
	// UPDATE at debug level).
	level slog.Leveler
}

func (h *recordCounter) Enabled(ctx context.Context, l slog.Level) bool {
	return h.level == nil || l >= h.level.Level() || h.Handler.Enabled(ctx, l)
}

func (h *recordCounter) Handle(ctx context.Context, r slog.Record) error {
	if h.match(r) {
		h.n.Add(1)
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h *recordCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return &recordCounter{Handler: h.Handler.WithAttrs(as), match: h.match, n: h.n, level: h.level}
}

func (h *recordCounter) WithGroup(name string) slog.Handler {
	return &recordCounter{Handler: h.Handler.WithGroup(name), match: h.match, n: h.n, level: h.level}
}

// recordAttr is the value of r's attribute key as text ("" if absent).
func recordAttr(r slog.Record, key string) string {
	v := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
			return false
		}
		return true
	})
	return v
}

// TestGracefulRestart: with RFC 4724 graceful restart on both sides, the
// speaker announces a restart time of 120 s, and losing the TCP connection
// without a NOTIFICATION (speaker crash) leaves the routes at the router,
// marked stale (the router flushes them when that time expires).
func TestGracefulRestart(t *testing.T) {
	skipShort(t)
	r := newRouter(t, routerASN, "198.51.100.254", "127.0.0.1")
	r.addPeer(t, "127.0.0.1", ourASN, withGR(5))
	proxy := newTCPProxy(t, netip.AddrPortFrom(r.addr, uint16(r.port)).String())
	s := newSpeaker(t, Options{})
	p := r.peerConfig("gr", ourASN)
	p.Port = uint16(proxy.port())
	p.GracefulRestart = true
	ctx := context.Background()
	if err := s.SetPeers(ctx, []bgp.PeerConfig{p}); err != nil {
		t.Fatal(err)
	}
	pfx := netip.MustParsePrefix("203.0.113.7/32")
	if err := s.SetPaths(ctx, []bgp.Path{{Prefix: pfx}}); err != nil {
		t.Fatal(err)
	}
	waitEstablished(t, s, "gr")
	poll.Until(t, 10*time.Second, "route at router", func() bool { _, ok := r.paths(t, familyV4)[pfx]; return ok })
	if rt := r.peerInfo(t, "127.0.0.1").GetGracefulRestart().GetPeerRestartTime(); rt != uint32(gracefulRestartTime/time.Second) {
		t.Errorf("router learned restart time %d s, want %v", rt, gracefulRestartTime)
	}

	proxy.cut()
	poll.Until(t, 5*time.Second, "route marked stale", func() bool { return r.paths(t, familyV4)[pfx].Stale })
}

// TestWithoutGracefulRestartRoutesGo is the control for TestGracefulRestart:
// the same cut without GR removes the route immediately.
func TestWithoutGracefulRestartRoutesGo(t *testing.T) {
	skipShort(t)
	r := newRouter(t, routerASN, "198.51.100.254", "127.0.0.1")
	r.addPeer(t, "127.0.0.1", ourASN, withGR(5))
	proxy := newTCPProxy(t, netip.AddrPortFrom(r.addr, uint16(r.port)).String())
	s := newSpeaker(t, Options{})
	p := r.peerConfig("nogr", ourASN)
	p.Port = uint16(proxy.port())
	ctx := context.Background()
	if err := s.SetPeers(ctx, []bgp.PeerConfig{p}); err != nil {
		t.Fatal(err)
	}
	pfx := netip.MustParsePrefix("203.0.113.8/32")
	if err := s.SetPaths(ctx, []bgp.Path{{Prefix: pfx}}); err != nil {
		t.Fatal(err)
	}
	waitEstablished(t, s, "nogr")
	poll.Until(t, 10*time.Second, "route at router", func() bool { _, ok := r.paths(t, familyV4)[pfx]; return ok })
	proxy.cut()
	poll.Until(t, 5*time.Second, "route removed", func() bool { _, ok := r.paths(t, familyV4)[pfx]; return !ok })
}

// TestPeerConfigReachesGobgp checks the translated neighbor: multihop TTL,
// timers, local ASN, source address, port, graceful restart and families.
func TestPeerConfigReachesGobgp(t *testing.T) {
	skipShortOneServer(t)
	s := newSpeaker(t, Options{})
	ctx := context.Background()
	p := bgp.PeerConfig{
		// Loopback with a closed port and a VRF device that does not exist:
		// the dial fails locally, no packet leaves the host.
		Name: "mh", Address: netip.MustParseAddr("127.0.0.3"), Port: 1179, VRF: "herald-novrf",
		MyASN: 64512, LocalASN: 64600, PeerASN: 64999, EBGPMultiHop: 4, RouterID: netip.MustParseAddr(ourRouterID),
		HoldTime: 30 * time.Second, ConnectTime: 5 * time.Second,
		SourceAddress: netip.MustParseAddr("127.0.0.1"), GracefulRestart: true, DualStack: true,
	}
	if err := s.SetPeers(ctx, []bgp.PeerConfig{p}); err != nil {
		t.Fatal(err)
	}
	get := func() *api.Peer {
		var out *api.Peer
		if err := s.srv.ListPeer(ctx, &api.ListPeerRequest{Address: "127.0.0.3"}, func(x *api.Peer) { out = x }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	got := get()
	if !got.GetEbgpMultihop().GetEnabled() || got.GetEbgpMultihop().GetMultihopTtl() != 4 {
		t.Errorf("multihop %+v", got.GetEbgpMultihop())
	}
	if c := got.GetTimers().GetConfig(); c.GetHoldTime() != 30 || c.GetKeepaliveInterval() != 10 || c.GetConnectRetry() != 5 {
		t.Errorf("timers %+v", c)
	}
	if got.GetConf().GetLocalAsn() != 64600 || got.GetConf().GetPeerAsn() != 64999 {
		t.Errorf("ASNs %+v", got.GetConf())
	}
	if got.GetTransport().GetRemotePort() != 1179 || got.GetTransport().GetLocalAddress() != "127.0.0.1" || got.GetTransport().GetBindInterface() != "herald-novrf" {
		t.Errorf("transport %+v", got.GetTransport())
	}
	if !got.GetGracefulRestart().GetEnabled() || got.GetGracefulRestart().GetRestartTime() != 120 {
		t.Errorf("graceful restart %+v", got.GetGracefulRestart())
	}
	var fams []string
	for _, a := range got.GetAfiSafis() {
		fams = append(fams, a.GetConfig().GetFamily().GetAfi().String())
		if !a.GetMpGracefulRestart().GetConfig().GetEnabled() {
			t.Errorf("family %v without MP graceful restart", a.GetConfig().GetFamily())
		}
	}
	if strings.Join(fams, ",") != "AFI_IP,AFI_IP6" {
		t.Errorf("families %v", fams)
	}

	// A multihop change recreates the peer with the new TTL.
	p.EBGPMultiHop = 9
	if err := s.SetPeers(ctx, []bgp.PeerConfig{p}); err != nil {
		t.Fatal(err)
	}
	if ttl := get().GetEbgpMultihop().GetMultihopTtl(); ttl != 9 {
		t.Errorf("multihop TTL after update = %d", ttl)
	}
}

func TestSetPeersErrors(t *testing.T) {
	s := newSpeaker(t, Options{})
	ctx := context.Background()
	a := bgp.PeerConfig{Name: "a", Address: netip.MustParseAddr("203.0.113.1"), MyASN: 1, PeerASN: 2, RouterID: netip.MustParseAddr("198.51.100.10")}
	b := bgp.PeerConfig{Name: "b", Address: netip.MustParseAddr("203.0.113.2"), MyASN: 1, PeerASN: 2, RouterID: netip.MustParseAddr("198.51.100.11")}
	if err := s.SetPeers(ctx, []bgp.PeerConfig{a, b}); !errors.Is(err, bgp.ErrRouterIDConflict) {
		t.Errorf("router ID conflict: %v", err)
	}
	if err := s.SetPeers(ctx, []bgp.PeerConfig{a, a}); !errors.Is(err, bgp.ErrDuplicatePeer) {
		t.Errorf("duplicate: %v", err)
	}
	// Same address in another VRF: valid for bgp.ValidatePeers, but gobgp
	// has one neighbor per address (AddPeer failed for the second before).
	red := a
	red.Name, red.VRF = "a-red", "red"
	if err := s.SetPeers(ctx, []bgp.PeerConfig{a, red}); !errors.Is(err, bgp.ErrUnsupported) || !strings.Contains(err.Error(), `"a-red"`) {
		t.Errorf("same address in two VRFs: %v", err)
	}
	if err := s.SetPaths(ctx, []bgp.Path{{Prefix: netip.MustParsePrefix("203.0.113.1/32"), LargeCommunities: [][3]uint32{{bgp.ReservedLargeCommunityASN, 1, 0}}}}); !errors.Is(err, bgp.ErrReservedCommunity) {
		t.Errorf("reserved community: %v", err)
	}
	s.Close()
	if err := s.SetPaths(ctx, nil); !errors.Is(err, bgp.ErrClosed) {
		t.Errorf("after close: %v", err)
	}
}

// TestRouterIDChangeRestarts: paths set before any peer are announced when
// BGP starts; a router ID change restarts gobgp and re-announces.
func TestRouterIDChangeRestarts(t *testing.T) {
	skipShort(t)
	r := newRouter(t, routerASN, "198.51.100.254", "127.0.0.1")
	r.addPeer(t, "127.0.0.1", ourASN)
	s := newSpeaker(t, Options{})
	ctx := context.Background()
	pfx := netip.MustParsePrefix("203.0.113.9/32")
	if err := s.SetPaths(ctx, []bgp.Path{{Prefix: pfx}}); err != nil {
		t.Fatal(err)
	}
	p := r.peerConfig("r", ourASN)
	p.RouterID = netip.MustParseAddr("198.51.100.21")
	if err := s.SetPeers(ctx, []bgp.PeerConfig{p}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 20*time.Second, "route from router ID .21", func() bool {
		_, ok := r.paths(t, familyV4)[pfx]
		return ok && r.peerInfo(t, "127.0.0.1").GetState().GetRouterId() == "198.51.100.21"
	})
	p.RouterID = netip.MustParseAddr("198.51.100.22")
	if err := s.SetPeers(ctx, []bgp.PeerConfig{p}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 20*time.Second, "route from router ID .22", func() bool {
		_, ok := r.paths(t, familyV4)[pfx]
		return ok && r.peerInfo(t, "127.0.0.1").GetState().GetRouterId() == "198.51.100.22"
	})
}

// TestDualStackSession: with DualStack both unicast families are negotiated
// (RFC 4760) and both prefixes arrive over an IPv4 and over an IPv6
// transport. The cross-family next hop is the session's local address in
// the other family's encoding (gobgp behaviour, see the package notes); it
// is logged here and must be checked against FRR in the lab.
func TestDualStackSession(t *testing.T) {
	skipShort(t)
	requireIPv6(t)
	for _, addr := range []string{"127.0.0.1", "::1"} {
		r := newRouter(t, routerASN, "198.51.100.252", addr)
		r.addPeer(t, addr, ourASN)
		s := newSpeaker(t, Options{})
		ctx := context.Background()
		p := r.peerConfig("ds", ourASN)
		p.DualStack = true
		if err := s.SetPeers(ctx, []bgp.PeerConfig{p}); err != nil {
			t.Fatal(err)
		}
		v4, v6 := netip.MustParsePrefix("203.0.113.5/32"), netip.MustParsePrefix("2001:db8::5/128")
		if err := s.SetPaths(ctx, []bgp.Path{{Prefix: v4}, {Prefix: v6}}); err != nil {
			t.Fatal(err)
		}
		waitEstablished(t, s, "ds")
		// Both families are negotiated, only the session's own is
		// announced: the other would carry the session's address as next
		// hop (127.0.0.1 for IPv6, ::1 for IPv4 before, unusable).
		own, other, ownFam, otherFam := v4, v6, familyV4, familyV6
		if addr == "::1" {
			own, other, ownFam, otherFam = v6, v4, familyV6, familyV4
		}
		poll.Until(t, 10*time.Second, "own family over "+addr, func() bool {
			_, ok := r.paths(t, ownFam)[own]
			return ok
		})
		if got, ok := r.paths(t, otherFam)[other]; ok {
			t.Errorf("transport %s: %s announced with next hop %v", addr, other, got.NextHop)
		}
		var fams []string
		for _, f := range r.peerInfo(t, addr).GetAfiSafis() {
			if f.GetState().GetEnabled() || f.GetConfig().GetEnabled() {
				fams = append(fams, f.GetConfig().GetFamily().String())
			}
		}
		if len(fams) != 2 {
			t.Errorf("transport %s: families %v, want both negotiated", addr, fams)
		}
	}
}

// TestConcurrentUse drives SetPeers, SetPaths, PeerStates and a metrics
// scrape concurrently against one gobgp server whose peers point at closed
// loopback ports (sessions cycle Idle/Active, producing events). It runs
// under -race too (one gobgp server only), covering Herald's own locking.
func TestConcurrentUse(t *testing.T) {
	skipShortOneServer(t)
	reg := prometheus.NewRegistry()
	s := newSpeaker(t, Options{Registerer: reg})
	ctx := context.Background()
	port := uint16(freePort(t, "127.0.0.1")) // closed: connections are refused locally
	peers := func(hold time.Duration) []bgp.PeerConfig {
		return []bgp.PeerConfig{
			{Name: "x", Address: netip.MustParseAddr("127.0.0.4"), Port: port, MyASN: 1, PeerASN: 2, HoldTime: hold, ConnectTime: time.Second,
				RouterID: netip.MustParseAddr(ourRouterID)},
			{Name: "y", Address: netip.MustParseAddr("127.0.0.5"), Port: port, MyASN: 1, PeerASN: 1, ConnectTime: time.Second},
		}
	}
	if err := s.SetPeers(ctx, peers(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			if err := s.SetPeers(ctx, peers(time.Duration(3+i%3)*time.Second)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			s.PeerStates()
			if _, err := reg.Gather(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := range 200 {
		paths := []bgp.Path{{Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}), 32), Peers: []string{"x"}}}
		if i%2 == 0 {
			paths = append(paths, bgp.Path{Prefix: netip.MustParsePrefix("2001:db8::/64")})
		}
		if err := s.SetPaths(ctx, paths); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	var n int
	s.srv.ListPath(ctx, &api.ListPathRequest{TableType: api.TableType_GLOBAL, Family: familyV4}, func(*api.Destination) { n++ })
	if n != 1 {
		t.Errorf("global RIB has %d IPv4 paths, want exactly the last one", n)
	}
	if st := s.PeerStates(); len(st) != 2 || st[0].State == bgp.StateEstablished {
		t.Errorf("states %+v", st)
	}
}

// TestGracefulRestartRecovery: the speaker dies (connection cut, no
// NOTIFICATION) and a new speaker comes back within the restart time
// announcing only part of the old set. The router keeps the re-announced
// prefix (no longer stale) and drops the other one at End-of-RIB
// (RFC 4724 §4.2), long before the 120 s restart time.
func TestGracefulRestartRecovery(t *testing.T) {
	skipShort(t)
	r := newRouter(t, routerASN, "198.51.100.254", "127.0.0.1")
	r.addPeer(t, "127.0.0.1", ourASN, withGR(60))
	target := netip.AddrPortFrom(r.addr, uint16(r.port)).String()
	keep, drop := netip.MustParsePrefix("203.0.113.11/32"), netip.MustParsePrefix("203.0.113.12/32")
	ctx := context.Background()
	run := func(name string, paths ...bgp.Path) (*Speaker, *tcpProxy) {
		proxy := newTCPProxy(t, target)
		s := newSpeaker(t, Options{})
		p := r.peerConfig(name, ourASN)
		p.Port = uint16(proxy.port())
		p.GracefulRestart = true
		if err := s.SetPeers(ctx, []bgp.PeerConfig{p}); err != nil {
			t.Fatal(err)
		}
		if err := s.SetPaths(ctx, paths); err != nil {
			t.Fatal(err)
		}
		waitEstablished(t, s, name)
		return s, proxy
	}
	_, proxy := run("first", bgp.Path{Prefix: keep}, bgp.Path{Prefix: drop})
	poll.Until(t, 10*time.Second, "both routes at router", func() bool { return len(r.paths(t, familyV4)) == 2 })
	proxy.cut()
	poll.Until(t, 5*time.Second, "routes stale", func() bool {
		got := r.paths(t, familyV4)
		return got[keep].Stale && got[drop].Stale
	})
	start := time.Now()
	run("second", bgp.Path{Prefix: keep})
	poll.Until(t, 20*time.Second, "kept route fresh, dropped route gone", func() bool {
		got := r.paths(t, familyV4)
		k, ok := got[keep]
		_, stillDrop := got[drop]
		return ok && !k.Stale && !stillDrop
	})
	if waited := time.Since(start); waited > 30*time.Second {
		t.Errorf("stale cleanup took %v: looks like the restart timer, not End-of-RIB", waited)
	}
}

// TestResetPeer: resetting a peer closes its Established session at once
// (the router counts a dropped connection) and the session re-establishes
// by itself; an unknown peer is an error.
func TestResetPeer(t *testing.T) {
	skipShort(t)
	a := newRouter(t, routerASN, "198.51.100.254", "127.0.0.1")
	a.addPeer(t, "127.0.0.1", ourASN)
	s := newSpeaker(t, Options{})
	ctx := context.Background()
	if err := s.SetPeers(ctx, []bgp.PeerConfig{a.peerConfig("a", ourASN)}); err != nil {
		t.Fatal(err)
	}
	waitEstablished(t, s, "a")
	before := a.peerInfo(t, "127.0.0.1").GetState().GetFlops()

	if err := s.ResetPeer(ctx, "a", "BFD session down (test)"); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "session reset and re-established", func() error {
		flops, st := a.peerInfo(t, "127.0.0.1").GetState().GetFlops(), stateOf(s, "a")
		if flops <= before || st.EstablishedCount != 2 || st.State != bgp.StateEstablished {
			return fmt.Errorf("router flops %d (before %d), ours %+v", flops, before, st)
		}
		return nil
	})
	if err := s.ResetPeer(ctx, "nope", "test"); err == nil {
		t.Error("ResetPeer of an unknown peer: no error")
	}
}

// TestRefusedPathDoesNotBlockOthers: a path gobgp must not carry (a large
// community with the reserved Global Administrator) is refused alone; in
// the same SetPaths a withdrawal, an update and a new path reach the
// router, and a prefix whose new path is refused keeps its last good path.
// Before, SetPaths refused the whole set and nothing changed on the router.
func TestRefusedPathDoesNotBlockOthers(t *testing.T) {
	skipShort(t)
	r := newRouter(t, routerASN, "198.51.100.254", "127.0.0.1")
	r.addPeer(t, "127.0.0.1", ourASN)
	s := newSpeaker(t, Options{})
	ctx := context.Background()
	if err := s.SetPeers(ctx, []bgp.PeerConfig{r.peerConfig("r", ourASN)}); err != nil {
		t.Fatal(err)
	}
	gone := netip.MustParsePrefix("203.0.113.1/32")
	changed := netip.MustParsePrefix("203.0.113.2/32")
	added := netip.MustParsePrefix("203.0.113.3/32")
	bad := netip.MustParsePrefix("203.0.113.4/32")
	kept := netip.MustParsePrefix("203.0.113.5/32")
	reserved := [][3]uint32{{bgp.ReservedLargeCommunityASN, 1, 2}}
	if err := s.SetPaths(ctx, []bgp.Path{{Prefix: gone}, {Prefix: changed}, {Prefix: kept, Communities: []uint32{65000<<16 | 5}}}); err != nil {
		t.Fatal(err)
	}
	waitEstablished(t, s, "r")
	poll.Until(t, 10*time.Second, "router has the first three", func() bool { return len(r.paths(t, familyV4)) == 3 })

	err := s.SetPaths(ctx, []bgp.Path{
		{Prefix: changed, Communities: []uint32{65000<<16 | 2}},
		{Prefix: added},
		{Prefix: bad, LargeCommunities: reserved},
		{Prefix: kept, LargeCommunities: reserved},
	})
	var refused *bgp.InvalidPathsError
	if !errors.As(err, &refused) || errors.Is(err, bgp.ErrNotApplied) || !errors.Is(err, bgp.ErrReservedCommunity) {
		t.Fatalf("SetPaths = %v, want only an *InvalidPathsError", err)
	}
	if len(refused.Refused) != 2 || refused.Refused[0].Prefix != bad || refused.Refused[1].Prefix != kept {
		t.Errorf("refused = %v, want %s and %s", err, bad, kept)
	}
	poll.Until(t, 10*time.Second, "router: withdrawn, updated, added, last good kept", func() bool {
		got := r.paths(t, familyV4)
		_, hasGone := got[gone]
		_, hasBad := got[bad]
		return len(got) == 3 && !hasGone && !hasBad &&
			reflect.DeepEqual(got[changed].Communities, []uint32{65000<<16 | 2}) &&
			reflect.DeepEqual(got[kept].Communities, []uint32{65000<<16 | 5}) && got[kept].Large == nil
	})
	if _, ok := r.paths(t, familyV4)[added]; !ok {
		t.Errorf("router lacks %s", added)
	}
}

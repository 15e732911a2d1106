package members

import (
	"context"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/herald-lb/herald/internal/poll"
)

// freePort returns a port that is free for TCP and UDP on 127.0.0.1 right
// now (memberlist binds both on one port).
func freePort(t *testing.T) int {
	t.Helper()
	for range 20 {
		tl, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		port := tl.Addr().(*net.TCPAddr).Port
		ul, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
		_ = tl.Close()
		if err == nil {
			_ = ul.Close()
			return port
		}
	}
	t.Fatal("no free TCP+UDP port")
	return 0
}

// TestNotJoinedUntilJoin: a starting member is not Joined (its Live holds
// only itself, an election on it would win everything) until a state
// exchange with another member completed; when Joined becomes true, Live
// already holds the members the peer knew, on the joining side and on the
// joined side.
func TestNotJoinedUntilJoin(t *testing.T) {
	t.Parallel()
	a := start(t, testConfig("gate-a", []byte("s")))
	b := start(t, testConfig("gate-b", []byte("s")))
	c := start(t, testConfig("gate-c", []byte("s")))
	c.SetPeers([]netip.AddrPort{a.Addr(), c.Addr()})
	poll.Until(t, sanityLimit, "a and c meet", func() bool { return sees(a.List, "gate-a", "gate-c")() && c.Joined() })
	if b.Joined() {
		t.Fatal("b is Joined before SetPeers or any join")
	}

	// b joins a only; a already knows c. At the moment b reports Joined, its
	// Live must hold c too (the push/pull brought a's member list).
	b.SetPeers([]netip.AddrPort{a.Addr(), b.Addr()})
	poll.Until(t, sanityLimit, "b joined", b.Joined)
	if got := liveSet(b.List); len(got) != 3 {
		t.Errorf("b.Live when Joined became true = %v, want all three members", got)
	}
	select {
	case <-b.Changes():
	default:
		t.Error("no Changes notification after Joined")
	}
	// a was joined by c (it never joined anybody itself): the inbound state
	// exchange counts.
	if !a.Joined() {
		t.Error("a is not Joined although c's join exchanged state with it")
	}
}

// TestNotActivatedIsNoMember: before Activate, Run binds nothing, so nobody
// can join it (it is not elected) and it is not Joined; after Activate the
// others join it on their next rejoin.
func TestNotActivatedIsNoMember(t *testing.T) {
	t.Parallel()
	a := start(t, testConfig("act-a", []byte("s")))
	cfg := testConfig("act-late", []byte("s"))
	cfg.BindPort = freePort(t)
	late, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- late.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	lateAddr := netip.AddrPortFrom(loopback, uint16(cfg.BindPort))
	a.SetPeers([]netip.AddrPort{a.Addr(), lateAddr})
	late.SetPeers([]netip.AddrPort{a.Addr(), lateAddr})
	// a's join of lateAddr must fail: nothing is bound there.
	ml := startRaw(t, testConfig("act-probe", []byte("s")))
	if n, err := ml.Join([]string{lateAddr.String()}); err == nil || n != 0 {
		t.Fatalf("joining a List that was not activated: %d contacted, err %v; want a failure", n, err)
	}
	select {
	case <-late.Ready():
		t.Fatal("Run bound its sockets before Activate")
	default:
	}
	if late.Joined() || a.Live()["act-late"] {
		t.Fatalf("before Activate: late.Joined %v, a.Live %v", late.Joined(), a.Live())
	}
	late.Activate()
	poll.Until(t, sanityLimit, "a sees late after Activate", sees(a.List, "act-a", "act-late"))
	poll.Until(t, sanityLimit, "late joined", late.Joined)
}

// TestAloneDetection: a member learns within a bounded time that it is
// alone, either because SetPeers names nobody else (at once) or because
// every join fails for AloneAfter.
func TestAloneDetection(t *testing.T) {
	t.Parallel()
	t.Run("no other speaker", func(t *testing.T) {
		t.Parallel()
		a := start(t, testConfig("alone-a", nil))
		a.SetPeers([]netip.AddrPort{a.Addr()})
		poll.Until(t, sanityLimit, "Joined with only itself as peer", a.Joined)
	})
	t.Run("every join fails", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig("alone-b", nil)
		cfg.Timings.AloneAfter = 300 * time.Millisecond
		b := start(t, cfg)
		nobody := netip.AddrPortFrom(loopback, uint16(freePort(t))) // nothing listens there
		began := time.Now()
		b.SetPeers([]netip.AddrPort{b.Addr(), nobody})
		took := poll.Until(t, sanityLimit, "Joined after every join failed for AloneAfter", b.Joined)
		// Lower bound only: a slow machine can only make it later.
		if since := time.Since(began); since < cfg.Timings.AloneAfter {
			t.Errorf("Joined after %v, before AloneAfter %v: the gate did not wait for joins", since, cfg.Timings.AloneAfter)
		}
		t.Logf("alone after %v (AloneAfter %v)", took, cfg.Timings.AloneAfter)
	})
}

// cutTransport is memberlist's own UDP/TCP transport with a switch that cuts
// the link to chosen peers: packets to them are dropped and connections to
// them fail, as with a pulled cable. Cutting on both sides is a partition.
type cutTransport struct {
	*memberlist.NetTransport
	mu  sync.Mutex
	cut map[string]bool // "ip:port"
}

func (t *cutTransport) isCut(addr string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cut[addr]
}

func (t *cutTransport) set(addrs []netip.AddrPort, cut bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, a := range addrs {
		t.cut[a.String()] = cut
	}
}

var errCut = errors.New("link cut by the test")

func (t *cutTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if t.isCut(addr) {
		return time.Now(), nil
	}
	return t.NetTransport.WriteTo(b, addr)
}

func (t *cutTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if t.isCut(a.Addr) {
		return time.Now(), nil
	}
	return t.NetTransport.WriteToAddress(b, a)
}

func (t *cutTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if t.isCut(addr) {
		return nil, errCut
	}
	return t.NetTransport.DialTimeout(addr, timeout)
}

func (t *cutTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.isCut(a.Addr) {
		return nil, errCut
	}
	return t.NetTransport.DialAddressTimeout(a, timeout)
}

// startCuttable starts a List whose links can be cut. Dead members are
// forgotten at once (GossipToTheDeadTime 1 ns instead of 30 s), so a cut
// stands for a partition longer than memberlist's gossip to the dead: only a
// join heals it, as after the 60 s link cut.
func startCuttable(t *testing.T, name string) (*testNode, *cutTransport) {
	t.Helper()
	cfg := testConfig(name, []byte("s"))
	ct := &cutTransport{cut: map[string]bool{}}
	l, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	l.configHook = func(c *memberlist.Config) error {
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{cfg.BindAddr.String()}, BindPort: 0, Logger: log.New(io.Discard, "", 0),
		})
		if err != nil {
			return err
		}
		ct.NetTransport = nt
		c.Transport = ct
		c.BindPort, c.AdvertisePort = nt.GetAutoBindPort(), nt.GetAutoBindPort()
		c.GossipToTheDeadTime = time.Nanosecond
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &testNode{List: l, cancel: cancel, done: make(chan error, 1)}
	l.Activate()
	go func() { n.done <- l.Run(ctx) }()
	select {
	case <-l.Ready():
	case err := <-n.done:
		t.Fatalf("Run(%s): %v", name, err)
	case <-time.After(sanityLimit):
		t.Fatalf("Run(%s) did not bind", name)
	}
	t.Cleanup(func() { _ = n.stop() })
	return n, ct
}

// TestRejoinAfterPartition cuts one member off from two others until both
// sides declare the other failed and forget it, then restores the link: the
// members must be one cluster again within the sanity bound (with MetalLB's
// 1 min rejoin they stayed split for up to a minute, past that bound), and
// every member counts the rejoin (the speaker re-announces on it).
func TestRejoinAfterPartition(t *testing.T) {
	t.Parallel()
	a, ta := startCuttable(t, "part-a")
	b, tb := startCuttable(t, "part-b")
	x, tx := startCuttable(t, "part-x")
	all := []netip.AddrPort{a.Addr(), b.Addr(), x.Addr()}
	for _, n := range []*testNode{a, b, x} {
		n.SetPeers(all) // as the speaker does: every speaker Pod
	}
	names := []string{"part-a", "part-b", "part-x"}
	for _, n := range []*testNode{a, b, x} {
		poll.Until(t, sanityLimit, n.cfg.NodeName+" sees all", sees(n.List, names...))
	}
	before := map[*testNode]uint64{a: a.Rejoins(), b: b.Rejoins(), x: x.Rejoins()}

	tx.set([]netip.AddrPort{a.Addr(), b.Addr()}, true)
	ta.set([]netip.AddrPort{x.Addr()}, true)
	tb.set([]netip.AddrPort{x.Addr()}, true)
	poll.Until(t, sanityLimit, "both sides declare the other failed", func() bool {
		return sees(a.List, "part-a", "part-b")() && sees(b.List, "part-a", "part-b")() && sees(x.List, "part-x")()
	})

	tx.set([]netip.AddrPort{a.Addr(), b.Addr()}, false)
	ta.set([]netip.AddrPort{x.Addr()}, false)
	tb.set([]netip.AddrPort{x.Addr()}, false)
	took := poll.Until(t, sanityLimit, "one cluster again after the link is back", func() bool {
		return sees(a.List, names...)() && sees(b.List, names...)() && sees(x.List, names...)()
	})
	t.Logf("partition healed %v after the link was restored (RejoinInterval %v)", took, DefaultTimings().RejoinInterval)
	for n, was := range before {
		if got := n.Rejoins(); got <= was {
			t.Errorf("%s Rejoins = %d after the heal, want > %d", n.cfg.NodeName, got, was)
		}
	}
}

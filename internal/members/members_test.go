package members

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/herald-lb/herald/internal/poll"
)

// sanityLimit bounds every wait: the tests measure, they do not assert speed.
const sanityLimit = 10 * time.Second

var loopback = netip.MustParseAddr("127.0.0.1")

type testNode struct {
	*List
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

func testConfig(name string, secret []byte) Config {
	return Config{
		NodeName: name,
		BindAddr: loopback,
		BindPort: 0, // a free port; memberlist binds TCP and UDP on the same one
		Secret:   secret,
		Timings:  DefaultTimings(),
	}
}

// start runs a List on 127.0.0.1 with a free port; it is stopped gracefully
// (Run's leave path) at the end of the test unless stopped before.
func start(t *testing.T, cfg Config) *testNode {
	t.Helper()
	return startWith(t, cfg, nil)
}

// startWith is start with prep (if not nil) applied to the List before Run,
// to set test hooks.
func startWith(t *testing.T, cfg Config, prep func(*List)) *testNode {
	t.Helper()
	l, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("New(%s): %v", cfg.NodeName, err)
	}
	if prep != nil {
		prep(l)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &testNode{List: l, cancel: cancel, done: make(chan error, 1)}
	l.Activate()
	go func() { n.done <- l.Run(ctx) }()
	select {
	case <-l.Ready():
	case err := <-n.done:
		t.Fatalf("Run(%s) returned early: %v", cfg.NodeName, err)
	case <-time.After(sanityLimit):
		t.Fatalf("Run(%s) did not bind within %v", cfg.NodeName, sanityLimit)
	}
	t.Cleanup(func() {
		if err := n.stop(); err != nil {
			t.Errorf("Run(%s): %v", cfg.NodeName, err)
		}
	})
	return n
}

// stop cancels Run (graceful: leave, then shutdown) and waits for it.
func (n *testNode) stop() error {
	n.once.Do(func() {
		n.cancel()
		n.err = <-n.done
	})
	return n.err
}

// startRaw creates a bare memberlist with exactly the configuration a List
// would use, without Run, so that it can be shut down without leaving: the
// peers see what a SIGKILLed speaker looks like (sockets closed, no leave).
func startRaw(t *testing.T, cfg Config) *memberlist.Memberlist {
	t.Helper()
	l, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ml, err := memberlist.Create(l.memberlistConfig())
	if err != nil {
		t.Fatalf("create %s: %v", cfg.NodeName, err)
	}
	t.Cleanup(func() { _ = ml.Shutdown() })
	return ml
}

func liveSet(l *List) []string {
	var out []string
	for name, alive := range l.Live() {
		if alive {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func sees(l *List, want ...string) func() bool {
	return func() bool { return slices.Equal(liveSet(l), want) }
}

func TestJoinLiveAndGracefulLeave(t *testing.T) {
	t.Parallel()
	secret := []byte("NvKGPsR2n7TlqVlGrA6ekw")
	regA := prometheus.NewPedanticRegistry()
	cfgA := testConfig("node-a", secret)
	cfgA.Registerer = regA
	a := start(t, cfgA)
	b := start(t, testConfig("node-b", secret))
	c := start(t, testConfig("node-c", secret))

	if got := a.Live(); !slices.Equal(liveSet(a.List), []string{"node-a"}) {
		t.Fatalf("before joining, Live() = %v, want only node-a", got)
	}
	// c is told about both others (and itself); a and b learn by gossip.
	c.SetPeers([]netip.AddrPort{a.Addr(), b.Addr(), c.Addr()})
	all := []string{"node-a", "node-b", "node-c"}
	for _, n := range []*testNode{a, b, c} {
		poll.Until(t, sanityLimit, n.cfg.NodeName+" sees all", sees(n.List, all...))
	}
	select {
	case <-a.Changes():
	default:
		t.Error("a.Changes() has no notification after two members joined")
	}
	if got := testutil.ToFloat64(a.metrics.events.WithLabelValues("join")); got != 2 {
		t.Errorf("a join events = %v, want 2", got)
	}
	if err := testutil.GatherAndCompare(regA, strings.NewReader(`
# HELP herald_memberlist_members Speakers this speaker considers alive (alive or suspect), itself included.
# TYPE herald_memberlist_members gauge
herald_memberlist_members 3
`), "herald_memberlist_members"); err != nil {
		t.Error(err)
	}

	// Graceful stop of c: Run leaves before shutting down.
	stopped := time.Now()
	stopErr := make(chan error, 1)
	var stopReturned time.Duration
	go func() {
		err := c.stop()
		stopReturned = time.Since(stopped)
		stopErr <- err
	}()
	took := poll.Until(t, sanityLimit, "a and b see c leave", func() bool {
		return sees(a.List, "node-a", "node-b")() && sees(b.List, "node-a", "node-b")()
	})
	if err := <-stopErr; err != nil {
		t.Fatal(err)
	}
	t.Logf("graceful stop: both survivors saw c leave %v after cancel; Run returned after %v", took, stopReturned)
	if live := a.Live(); live["node-c"] {
		t.Errorf("a.Live()[node-c] = true after leave; map %v", live)
	} else if _, known := live["node-c"]; !known {
		t.Errorf("a.Live() forgot node-c instead of reporting it false: %v", live)
	}
	if got := testutil.ToFloat64(a.metrics.events.WithLabelValues("leave")); got != 1 {
		t.Errorf("a leave events = %v, want 1", got)
	}
	if got := testutil.ToFloat64(a.metrics.events.WithLabelValues("failed")); got != 0 {
		t.Errorf("a failed events = %v, want 0 (c left gracefully)", got)
	}

	// c comes back on the same address (a restarted speaker pod).
	cfgC := testConfig("node-c", secret)
	cfgC.BindPort = int(c.Addr().Port())
	c2 := start(t, cfgC)
	c2.SetPeers([]netip.AddrPort{a.Addr()})
	poll.Until(t, sanityLimit, "a sees c again", sees(a.List, all...))
}

// TestLeaveCountedWhenReceiverIsBusy stops a member while another's packet
// handler is busy, so that the leaving announcement waits in memberlist's
// queue. memberlist handles the newest queued message first: before the
// leaving sender waited for an acknowledgement, its dead message (sent by
// Leave a gossip tick later) was queued behind the announcement and handled
// before it, and the graceful leave was counted as "failed" (the CI failure
// of TestJoinLiveAndGracefulLeave under -race). The busy handler is released
// when the leaving member waits for acknowledgements or, without that wait,
// once it has left and shut down.
func TestLeaveCountedWhenReceiverIsBusy(t *testing.T) {
	t.Parallel()
	secret := []byte("busy-receiver-secret")
	blocked := make(chan struct{}, 1)
	release := make(chan struct{})
	regA := prometheus.NewPedanticRegistry()
	cfgA := testConfig("busy-a", secret)
	cfgA.Registerer = regA
	a := startWith(t, cfgA, func(l *List) {
		l.notifyHook = func(msg []byte) {
			if string(msg) == "test-block" {
				blocked <- struct{}{}
				<-release
			}
		}
	})
	b := start(t, testConfig("busy-b", secret))
	waiting := make(chan struct{})
	var once sync.Once
	c := startWith(t, testConfig("busy-c", secret), func(l *List) {
		l.leavingWaitHook = func() { once.Do(func() { close(waiting) }) }
	})
	c.SetPeers([]netip.AddrPort{a.Addr(), b.Addr(), c.Addr()})
	all := []string{"busy-a", "busy-b", "busy-c"}
	for _, n := range []*testNode{a, b, c} {
		poll.Until(t, sanityLimit, n.cfg.NodeName+" sees all", sees(n.List, all...))
	}

	// b makes a's packet handler busy.
	b.mu.Lock()
	bml, toA := b.ml, b.nodes["busy-a"]
	b.mu.Unlock()
	if err := bml.SendBestEffort(&toA, []byte("test-block")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-blocked:
	case <-time.After(sanityLimit):
		close(release)
		t.Fatal("a's packet handler did not get the blocking message")
	}

	stopErr := make(chan error, 1)
	go func() { stopErr <- c.stop() }()
	var stopped bool
	select {
	case <-waiting:
	case err := <-stopErr:
		stopped = true
		if err != nil {
			t.Error(err)
		}
	case <-time.After(sanityLimit):
		t.Error("c neither waited for acknowledgements nor stopped")
	}
	close(release)
	if !stopped {
		if err := <-stopErr; err != nil {
			t.Error(err)
		}
	}
	poll.Until(t, sanityLimit, "a sees c gone", sees(a.List, "busy-a", "busy-b"))
	if got := testutil.ToFloat64(a.metrics.events.WithLabelValues("leave")); got != 1 {
		t.Errorf("a leave events = %v, want 1", got)
	}
	if got := testutil.ToFloat64(a.metrics.events.WithLabelValues("failed")); got != 0 {
		t.Errorf("a failed events = %v, want 0 (c left gracefully)", got)
	}
}

func TestKeys(t *testing.T) {
	t.Parallel()
	a := start(t, testConfig("key-a", []byte("secret-one")))
	b := start(t, testConfig("key-b", []byte("secret-one")))
	other := start(t, testConfig("key-other", []byte("secret-two")))
	plain := start(t, testConfig("key-plain", nil))

	b.SetPeers([]netip.AddrPort{a.Addr()})
	other.SetPeers([]netip.AddrPort{a.Addr(), b.Addr()})
	plain.SetPeers([]netip.AddrPort{a.Addr(), b.Addr()})
	poll.Until(t, sanityLimit, "same secret joins", sees(a.List, "key-a", "key-b"))

	// Give the mismatched members several rejoin opportunities: each tries
	// to join a and b at least three more times.
	triedOther, triedPlain := other.joinsTried.Load(), plain.joinsTried.Load()
	other.SetPeers([]netip.AddrPort{a.Addr(), b.Addr()})
	plain.SetPeers([]netip.AddrPort{a.Addr(), b.Addr()})
	poll.Until(t, sanityLimit, "mismatched members' join attempts", func() error {
		if o, p := other.joinsTried.Load()-triedOther, plain.joinsTried.Load()-triedPlain; o < 6 || p < 6 {
			return fmt.Errorf("%d more join attempts by key-other, %d by key-plain", o, p)
		}
		return nil
	})
	for _, n := range []*testNode{a, b} {
		if got := liveSet(n.List); !slices.Equal(got, []string{"key-a", "key-b"}) {
			t.Errorf("%s Live = %v, want only key-a and key-b", n.cfg.NodeName, got)
		}
	}
	if got := liveSet(other.List); !slices.Equal(got, []string{"key-other"}) {
		t.Errorf("member with another secret sees %v, want only itself", got)
	}
	if got := liveSet(plain.List); !slices.Equal(got, []string{"key-plain"}) {
		t.Errorf("unencrypted member sees %v, want only itself", got)
	}
}

// TestFailureDetection kills (shuts down without leaving) one of three
// members, 20 times, and reports how long until both survivors declare it
// failed, with DefaultTimings. It asserts only a sanity bound; the figures
// are for the failover budget (issue: 1 s p50 / 2 s p99 end to end).
func TestFailureDetection(t *testing.T) {
	if testing.Short() {
		t.Skip("20 failure-detection trials take ~20 s")
	}
	t.Parallel()
	const trials = 20
	var first, all []time.Duration
	for i := range trials {
		cfgA, cfgB := testConfig(fmt.Sprintf("t%d-a", i), []byte("s")), testConfig(fmt.Sprintf("t%d-b", i), []byte("s"))
		cfgA.Registerer, cfgB.Registerer = prometheus.NewRegistry(), prometheus.NewRegistry()
		a, b := start(t, cfgA), start(t, cfgB)
		victimName := fmt.Sprintf("t%d-victim", i)
		victim := startRaw(t, testConfig(victimName, []byte("s")))
		b.SetPeers([]netip.AddrPort{a.Addr()})
		if _, err := victim.Join([]string{a.Addr().String()}); err != nil {
			t.Fatalf("trial %d: victim join: %v", i, err)
		}
		names := []string{a.cfg.NodeName, b.cfg.NodeName, victimName}
		slices.Sort(names)
		poll.Until(t, sanityLimit, "converge", func() bool { return sees(a.List, names...)() && sees(b.List, names...)() })
		// Let the probe rotation include the victim for a random phase.
		// This waits for no condition: it varies, trial by trial, where in
		// the probe rotation the kill lands (0 to 200 ms), so the
		// detection times measured below sample every phase.
		time.Sleep(time.Duration(i%5) * 50 * time.Millisecond)

		dead := func(l *List) func() bool {
			return func() bool { alive, ok := l.Live()[victimName]; return ok && !alive }
		}
		killed := time.Now()
		_ = victim.Shutdown()
		poll.Until(t, sanityLimit, "someone detects", func() bool { return dead(a.List)() || dead(b.List)() })
		first = append(first, time.Since(killed))
		poll.Until(t, sanityLimit, "both detect", func() bool { return dead(a.List)() && dead(b.List)() })
		all = append(all, time.Since(killed))

		for _, n := range []*testNode{a, b} {
			// The victim's failure is counted at least once; on a loaded
			// machine a survivor may also be declared failed (and refute)
			// for a moment, which counts too, so more is logged, not failed.
			switch got := testutil.ToFloat64(n.metrics.events.WithLabelValues("failed")); {
			case got < 1:
				t.Errorf("trial %d: %s failed events = %v, want at least 1", i, n.cfg.NodeName, got)
			case got > 1:
				t.Logf("trial %d: %s failed events = %v (a false suspicion under load besides the victim)", i, n.cfg.NodeName, got)
			}
			if got := testutil.ToFloat64(n.metrics.events.WithLabelValues("leave")); got != 0 {
				t.Errorf("trial %d: %s leave events = %v, want 0 (victim was killed)", i, n.cfg.NodeName, got)
			}
		}
		_ = a.stop()
		_ = b.stop()
	}
	t.Logf("SIGKILL-like failure, %d trials, DefaultTimings %+v", trials, DefaultTimings())
	t.Logf("  first survivor detects: p50 %v  p99 %v  max %v", pct(first, 50), pct(first, 99), pct(first, 100))
	t.Logf("  both survivors detect:  p50 %v  p99 %v  max %v", pct(all, 50), pct(all, 99), pct(all, 100))
}

func pct(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))].Round(time.Millisecond)
}

// TestNoFalseFailuresUnderLoad runs five members for 10 s, once with the
// machine as it is and once with busy goroutines (twice GOMAXPROCS,
// allocating) starving them, and reports how many times a live member was
// declared failed with DefaultTimings. Those counts depend on the machine's
// load, so they are logged, not asserted. What is asserted: members declared
// failed while alive refute and every member sees all five alive again once
// the load stops.
func TestNoFalseFailuresUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("2 x 10 s load soak")
	}
	t.Parallel()
	for _, tc := range []struct {
		name string
		hogs int
	}{
		{"no-extra-load", 0},
		{"cpu-starved", 2 * runtime.GOMAXPROCS(0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const size = 5
			var nodes []*testNode
			var names []string
			for i := range size {
				cfg := testConfig(fmt.Sprintf("%s-%d", tc.name, i), []byte("s"))
				cfg.Registerer = prometheus.NewRegistry()
				nodes = append(nodes, start(t, cfg))
				names = append(names, cfg.NodeName)
			}
			slices.Sort(names)
			// Every member is given every address, as each speaker is given
			// every speaker Pod: a member that joined while the others were
			// still joining one another then joins the ones it missed within
			// a RejoinInterval instead of depending on gossip alone (whose
			// alive broadcasts are sent a bounded number of times and can
			// all go to members that already knew; before, one member was
			// told about the others and the rest learned by gossip, and one
			// run in five did not converge within sanityLimit).
			var addrs []netip.AddrPort
			for _, n := range nodes {
				addrs = append(addrs, n.Addr())
			}
			for _, n := range nodes {
				n.SetPeers(addrs)
			}
			for _, n := range nodes {
				poll.Until(t, sanityLimit, n.cfg.NodeName+" converges", sees(n.List, names...))
			}

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			for range tc.hogs {
				wg.Go(func() { hog(ctx) })
			}
			// The load lasts ctx's 10 s (the scenario, not a wait for a
			// condition); the worst health score is sampled every 20 ms.
			maxHealth := 0
			tick := time.NewTicker(20 * time.Millisecond)
			for ctx.Err() == nil {
				for _, n := range nodes {
					n.mu.Lock()
					maxHealth = max(maxHealth, n.ml.GetHealthScore())
					n.mu.Unlock()
				}
				select {
				case <-ctx.Done():
				case <-tick.C:
				}
			}
			tick.Stop()
			wg.Wait()
			falseFailures := 0.0
			for _, n := range nodes {
				falseFailures += testutil.ToFloat64(n.metrics.events.WithLabelValues("failed"))
			}
			t.Logf("10 s, %d busy goroutines: %v false failures over %d members, worst health score %d (0 = healthy)",
				tc.hogs, falseFailures, size, maxHealth)
			for _, n := range nodes {
				poll.Until(t, sanityLimit, n.cfg.NodeName+" sees all alive after the load", sees(n.List, names...))
			}
		})
	}
}

// hog burns CPU and allocates until ctx is done.
func hog(ctx context.Context) {
	var sink [][]byte
	for ctx.Err() == nil {
		if len(sink) > 256 {
			sink = sink[:0]
		}
		buf := make([]byte, 64<<10)
		sink = append(sink, buf)
		for i := range buf {
			buf[i]++
		}
	}
}

func TestIPv6(t *testing.T) {
	t.Parallel()
	cfgA, cfgB := testConfig("v6-a", []byte("s")), testConfig("v6-b", []byte("s"))
	cfgA.BindAddr, cfgB.BindAddr = netip.IPv6Loopback(), netip.IPv6Loopback()
	a, b := start(t, cfgA), start(t, cfgB)
	if got := a.Addr(); got.Addr() != netip.IPv6Loopback() || got.Port() == 0 {
		t.Fatalf("Addr() = %v, want [::1]:<bound port>", got)
	}
	b.SetPeers([]netip.AddrPort{a.Addr(), b.Addr()})
	poll.Until(t, sanityLimit, "a sees b over IPv6", sees(a.List, "v6-a", "v6-b"))
}

func TestRunTwice(t *testing.T) {
	t.Parallel()
	n := start(t, testConfig("twice", nil))
	if err := n.Run(context.Background()); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second Run = %v, want ErrAlreadyRunning", err)
	}
}

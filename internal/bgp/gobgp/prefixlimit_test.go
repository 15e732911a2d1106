package gobgp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	apb "google.golang.org/protobuf/types/known/anypb"

	"github.com/herald-lb/herald/internal/bgp"
	"github.com/herald-lb/herald/internal/poll"
)

// fullTablePrefixes is how many IPv6 /64s (in 2001:db8::/32) the router of
// TestPrefixLimit sends: 50,000 (5 times the default limit), or
// fullTablePrefixesEnv's value (docs/reliability.md's figures are for
// 200,000, a fifth of a full Internet table). The router's gobgp builds the
// UPDATEs of its whole table before it sends the first, for every session:
// with 200,000 the test took 5 to 15 minutes on a loaded 2-core machine.
var fullTablePrefixes = func() int {
	if n, err := strconv.Atoi(os.Getenv(fullTablePrefixesEnv)); err == nil && n > 0 {
		return n
	}
	return 50_000
}()

// fullTablePrefixesEnv sets fullTablePrefixes.
const fullTablePrefixesEnv = "HERALD_TEST_FULL_TABLE_PREFIXES"

// loadRouterTable adds n IPv6 /64s 2001:db8:X:Y::/64 to the router's global
// RIB, which it sends to every neighbor.
func loadRouterTable(t testing.TB, r *router, n int) {
	t.Helper()
	origin, _ := apb.New(&api.OriginAttribute{Origin: 0})
	for j := range n {
		nlri, _ := apb.New(&api.IPAddressPrefix{Prefix: fmt.Sprintf("2001:db8:%x:%x::", j>>16, j&0xffff), PrefixLen: 64})
		mp, _ := apb.New(&api.MpReachNLRIAttribute{Family: familyV6, NextHops: []string{"2001:db8::1"}, Nlris: []*apb.Any{nlri}})
		p := &api.Path{Family: familyV6, Nlri: nlri, Pattrs: []*apb.Any{origin, mp}}
		if _, err := r.srv.AddPath(context.Background(), &api.AddPathRequest{TableType: api.TableType_GLOBAL, Path: p}); err != nil {
			t.Fatalf("router AddPath: %v", err)
		}
	}
}

// heapInUse returns the process's live heap after a full GC, in bytes.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	return sample[0].Value.Uint64()
}

// heapPeak samples the heap every 5 ms until stop is closed and returns
// the highest live heap seen (runtime/metrics /gc/heap/live:bytes, what the
// last GC found reachable: the memory the speaker really holds).
func heapPeak(stop <-chan struct{}) <-chan uint64 {
	out := make(chan uint64, 1)
	go func() {
		var peak uint64
		sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(sample)
			peak = max(peak, sample[0].Value.Uint64())
			select {
			case <-stop:
				out <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return out
}

// routerProcessEnv makes the test binary run TestFullTableRouter as the
// router of TestPrefixLimit, in a process of its own, so that the speaker's
// heap is measured without the router's.
const routerProcessEnv = "HERALD_TEST_FULL_TABLE_ROUTER"

// prefixLimitSanity bounds each of TestPrefixLimit's waits for the router's
// table (200k paths) to arrive or for the limit to be reported.
const prefixLimitSanity = 6 * time.Minute

// limitBacklogBound is how many UPDATEs gobgp may still process at the limit
// ("prefix limit reached" logged for each) before the teardown is reported.
// Without the speaker's hold-down gobgp worked through every UPDATE queued
// before the teardown (~37k of the 200k-path table, over minutes) before
// the session's state change; with it a few, the ones handled before the
// neighbor's deletion.
const limitBacklogBound = 1000

// fullTableHoldTime is the hold time of TestPrefixLimit's session. The
// router (gobgp) builds the UPDATEs of its whole table before it writes the
// first, and sends no KEEPALIVE meanwhile: on a loaded 2-core machine that
// took more than 9 s, and with a 9 s hold time the speaker closed the session
// (hold timer expired) again and again before the table arrived.
const fullTableHoldTime = 90 * time.Second

// TestFullTableRouter is not a test on its own: run by TestPrefixLimit as a
// separate process (routerProcessEnv set), it starts a gobgp router on a
// loopback port with a passive neighbor 127.0.0.1 (AS ourASN) and
// fullTablePrefixes IPv6 paths in its RIB, prints "port <n>" and serves
// until its standard input is closed.
func TestFullTableRouter(t *testing.T) {
	if os.Getenv(routerProcessEnv) == "" {
		t.Skip("helper process of TestPrefixLimit")
	}
	r := newRouter(t, routerASN, "198.51.100.254", "127.0.0.1")
	r.addPeer(t, "127.0.0.1", ourASN, withHoldTime(uint64(fullTableHoldTime/time.Second)))
	loadRouterTable(t, r, fullTablePrefixes)
	fmt.Printf("port %d\n", r.port)
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// startRouterProcess runs TestFullTableRouter in a child process and returns
// its port; the child ends with the test.
func startRouterProcess(t *testing.T) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFullTableRouter$", "-test.count=1")
	cmd.Env = append(os.Environ(), routerProcessEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var port int
		if _, err := fmt.Sscanf(sc.Text(), "port %d", &port); err == nil {
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			return port
		}
	}
	t.Fatalf("router process gave no port: %v", sc.Err())
	return 0
}

// TestPrefixLimit has a second gobgp (the router, in a process of its own,
// over loopback) send fullTablePrefixes IPv6 paths to the speaker, without
// and with the received-prefix limit. With the limit
// (bgp.DefaultMaxReceivedPrefixes) the speaker must close the session at
// the limit (Cease, RFC 4486 subcode 1), report it in
// PeerState.PrefixLimitFamily/PrefixLimit, open the session again after
// PrefixLimitRestart (gobgp alone would keep it down), and keep nothing of
// the table after the teardown. The heap figures (peak and kept) are logged
// (go test -v) for docs/reliability.md.
func TestPrefixLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 200k prefixes")
	}
	port := startRouterProcess(t)

	type result struct{ peak, after uint64 } // heap growth over the run's start, bytes
	run := func(t *testing.T, limit uint32) (res result, states []bgp.PeerState) {
		base := heapInUse() // also collects what an earlier run left
		stop := make(chan struct{})
		peak := heapPeak(stop)
		finish := func() result {
			close(stop)
			p := <-peak
			after := heapInUse()
			return result{peak: p - min(p, base), after: after - min(after, base)}
		}
		// Counts gobgp's "prefix limit reached" (the limit, not the early
		// warning at a percentage of it: that one has Pct); backlog is
		// closed at limitBacklogBound.
		var atLimit atomic.Int64
		backlog := make(chan struct{})
		logger := slog.New(&recordCounter{Handler: testLogger(t).Handler(), n: new(atomic.Int64), level: slog.LevelWarn, match: func(r slog.Record) bool {
			if r.Message != "prefix limit reached" || recordAttr(r, "Pct") != "" {
				return false
			}
			if atLimit.Add(1) == limitBacklogBound {
				close(backlog)
			}
			return true
		}}).With("side", "herald")
		ch := make(chan bgp.PeerState, 256)
		s := newSpeaker(t, Options{Logger: logger, MaxReceivedPrefixes: limit, PrefixLimitRestart: 100 * time.Millisecond, OnPeerState: func(st bgp.PeerState) {
			select {
			case ch <- st:
			default:
			}
		}})
		pc := bgp.PeerConfig{Name: "rtr", Address: netip.MustParseAddr("127.0.0.1"), Port: uint16(port),
			MyASN: ourASN, PeerASN: routerASN, RouterID: netip.MustParseAddr(ourRouterID), HoldTime: fullTableHoldTime, ConnectTime: time.Second,
			DualStack: true} // IPv6 unicast over the IPv4 session (RFC 4760)
		if err := s.SetPeers(context.Background(), []bgp.PeerConfig{pc}); err != nil {
			t.Fatal(err)
		}
		if limit > 0 {
			// A sanity bound, not a timing assert: on a loaded 2-core
			// machine (CI clones and labs at once) the router took more
			// than 2 min to send the table again for the second session.
			deadline := time.After(prefixLimitSanity)
			for {
				select {
				case st := <-ch:
					states = append(states, st)
					if st.PrefixLimitFamily != "" && res == (result{}) {
						res = finish()
						t.Logf("gobgp logged the limit %d times before the teardown was reported", atLimit.Load())
						backlog = nil // the next sessions hit the limit again
					}
					// Opened again after PrefixLimitRestart.
					if res != (result{}) && st.State == bgp.StateEstablished {
						s.Close()
						return res, states
					}
				case <-backlog:
					t.Fatalf("gobgp processed %d UPDATEs at the limit and the teardown is not reported: the session's state change is queued behind the UPDATEs received before it; states %+v",
						atLimit.Load(), states)
				case <-deadline:
					t.Fatalf("no prefix-limit report, or not reopened after it; states %+v", states)
				}
			}
		}
		poll.Until(t, prefixLimitSanity, "all prefixes received", func() bool {
			var n uint64
			_ = s.srv.ListPeer(context.Background(), &api.ListPeerRequest{}, func(p *api.Peer) {
				for _, a := range p.GetAfiSafis() {
					n += a.GetState().GetReceived()
				}
			})
			return n >= uint64(fullTablePrefixes)
		})
		res = finish()
		s.Close()
		return res, nil
	}
	mib := func(b uint64) float64 { return float64(b) / (1 << 20) }

	var unlimited result
	t.Run("NoLimit", func(t *testing.T) {
		unlimited, _ = run(t, 0)
		t.Logf("speaker heap with %d received prefixes, no limit: peak +%.1f MiB, holding them +%.1f MiB",
			fullTablePrefixes, mib(unlimited.peak), mib(unlimited.after))
	})
	t.Run("DefaultLimit", func(t *testing.T) {
		grown, states := run(t, bgp.DefaultMaxReceivedPrefixes)
		t.Logf("speaker heap with the limit of %d (router sending %d): peak +%.1f MiB, after the teardown +%.1f MiB",
			bgp.DefaultMaxReceivedPrefixes, fullTablePrefixes, mib(grown.peak), mib(grown.after))
		i := slices.IndexFunc(states, func(st bgp.PeerState) bool { return st.PrefixLimitFamily != "" })
		if st := states[i]; st.PrefixLimitFamily != "ipv6-unicast" || st.PrefixLimit != bgp.DefaultMaxReceivedPrefixes ||
			st.State == bgp.StateEstablished || i == 0 || states[i-1].State != bgp.StateEstablished {
			t.Errorf("prefix-limit report %+v after %+v, want ipv6-unicast, limit %d, Established before, not after", st, states[:i], bgp.DefaultMaxReceivedPrefixes)
		}
		// Bounded: nothing of the table is kept after the teardown. The
		// peak is logged, not checked: gobgp's receive loop queues UPDATEs
		// without bound before its server goroutine counts them, so the
		// peak is whatever part of the burst the receive loop got ahead by,
		// which depends on how the two goroutines were scheduled (on a
		// loaded 2-core machine nearly the whole table: +178 MiB with the
		// limit, +192 MiB without; docs/reliability.md, "Routers and memory").
		if unlimited.after > 0 && grown.after > unlimited.after/20 {
			t.Errorf("live heap +%d bytes after the teardown with the limit, +%d holding the table without it: the table is kept",
				grown.after, unlimited.after)
		}
	})
}

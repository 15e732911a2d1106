package members

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// TestRunDoesNotWaitForJoins stops a List while it is joining a peer that
// accepts the TCP connection and never answers (a speaker whose node hung),
// with a TCPTimeout of a minute. Run must return after its leave, without
// waiting for that join: the speaker's shutdown (and the kubelet's grace
// period) must not depend on an unreachable peer. Before the fix Run waited
// for in-flight joins, here a minute, and this test failed after
// sanityLimit.
func TestRunDoesNotWaitForJoins(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	accepted := make(chan struct{}, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
			select {
			case accepted <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})

	cfg := testConfig("a", nil)
	cfg.Timings.TCPTimeout = time.Minute
	n := start(t, cfg)
	n.SetPeers([]netip.AddrPort{netip.MustParseAddrPort(ln.Addr().String())})
	select {
	case <-accepted: // the join is in flight: connected, waiting for the answer
	case <-time.After(sanityLimit):
		t.Fatal("no join to the silent peer")
	}
	n.cancel()
	select {
	case err := <-n.done:
		n.once.Do(func() { n.err = err })
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(sanityLimit):
		t.Fatalf("Run still waiting %v after cancel, with a join in flight (TCPTimeout %v)", sanityLimit, cfg.Timings.TCPTimeout)
	}
}

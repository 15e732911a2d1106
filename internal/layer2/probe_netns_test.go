package layer2

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/herald-lb/herald/internal/poll"
)

// probeAnswers returns the answers the running probes of ip have counted.
func probeAnswers(a *Announcer, ip netip.Addr) int64 {
	a.probeMu.Lock()
	defer a.probeMu.Unlock()
	var n int64
	for p := range a.probes[ip] {
		n += p.answers.Load()
	}
	return n
}

// waitProbing waits until a has responders of both families open on eth0.
func waitProbing(t *testing.T, a *Announcer) {
	t.Helper()
	poll.Until(t, 10*time.Second, "ARP and NDP responders on eth0", func() error {
		e := a.EligibleInterfaces()
		if e == nil || !slices.Contains(e.ARP, "eth0") || !slices.Contains(e.NDP, "eth0") {
			return fmt.Errorf("eligible: %+v", e)
		}
		return nil
	})
}

type probeOutcome struct {
	res ProbeResult
	err error
}

// startProbe runs a.Probe(ip) until it returns or the test ends.
func startProbe(t *testing.T, a *Announcer, ip netip.Addr) <-chan probeOutcome {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	out := make(chan probeOutcome, 1)
	go func() {
		res, err := a.Probe(ctx, ip, []string{"eth0"})
		out <- probeOutcome{res, err}
	}()
	return out
}

// TestRealProbe: Announcer.Probe (the hand-over's question "does anybody
// still answer this address?", issue #13) reports silence for an address
// nobody answers; for an address another host answers (the client's
// kernel owning it, as a MetalLB speaker shutting down answers, or
// another Herald announcer) it keeps probing while the answers come and
// reports silence once the other host dropped the address; IPv4 (ARP
// probe) and IPv6 (neighbor solicitation) alike. The node's own answers
// do not count.
func TestRealProbe(t *testing.T) {
	t.Parallel()
	l := newLab(t)
	a, _ := l.start(t, Options{})
	waitProbing(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clientMAC := l.clientLink.MAC.String()

	for _, ip := range []netip.Addr{netip.MustParseAddr("198.51.100.77"), netip.MustParseAddr("2001:db8::77")} {
		res, err := a.Probe(ctx, ip, nil)
		if err != nil || res.Answers != 0 || res.Rounds != DefaultProbeCount {
			t.Errorf("Probe(%s), nobody owns it = %+v, %v; want %d silent rounds", ip, res, err, DefaultProbeCount)
		}
	}

	// The client's kernel owns the address: it answers every probe.
	for _, tc := range []struct{ ip, prefix string }{{"198.51.100.78", "/24"}, {"2001:db8::78", "/64"}} {
		ip := netip.MustParseAddr(tc.ip)
		args := []string{"-n", l.client, "addr", "add", tc.ip + tc.prefix, "dev", "eth0"}
		if ip.Is6() {
			args = append(args, "nodad")
		}
		run(t, "ip", args...)
		done := startProbe(t, a, ip)
		poll.Until(t, 30*time.Second, fmt.Sprintf("the probe of %s answered by the client's kernel", ip), func() error {
			select {
			case o := <-done:
				t.Fatalf("Probe(%s) returned %+v, %v while the client owns it", ip, o.res, o.err)
			default:
			}
			if n := probeAnswers(a, ip); n < 2*DefaultProbeCount {
				return fmt.Errorf("%d answers", n)
			}
			return nil
		})
		run(t, "ip", "-n", l.client, "addr", "del", tc.ip+tc.prefix, "dev", "eth0")
		o := <-done
		if o.err != nil || o.res.Answers == 0 || o.res.AnsweredBy.String() != clientMAC {
			t.Errorf("Probe(%s) after the client dropped it = %+v, %v; want silence after answers from %s", ip, o.res, o.err, clientMAC)
		}
	}

	// Another Herald announcer (in the client namespace) answers.
	peer, _ := startIn(t, l.client, Options{})
	v4, v6 := netip.MustParseAddr("198.51.100.79"), netip.MustParseAddr("2001:db8::79")
	setIPs(t, peer, "ns/peer", v4, v6)
	waitActive(t, peer, v4, true)
	waitActive(t, peer, v6, true)
	for _, ip := range []netip.Addr{v4, v6} {
		done := startProbe(t, a, ip)
		poll.Until(t, 30*time.Second, fmt.Sprintf("the probe of %s answered by the peer announcer", ip), func() error {
			if n := probeAnswers(a, ip); n < DefaultProbeCount {
				return fmt.Errorf("%d answers", n)
			}
			return nil
		})
		if ip == v4 {
			setIPs(t, peer, "ns/peer", v6)
		} else {
			setIPs(t, peer, "ns/peer")
		}
		o := <-done
		if o.err != nil || o.res.Answers == 0 || o.res.AnsweredBy.String() != clientMAC {
			t.Errorf("Probe(%s) after the peer withdrew it = %+v, %v; want silence after answers from %s", ip, o.res, o.err, clientMAC)
		}
	}

	// This node answering the address itself is no other answerer.
	own := netip.MustParseAddr("198.51.100.80")
	setIPs(t, a, "ns/own", own)
	waitActive(t, a, own, true)
	if res, err := a.Probe(ctx, own, nil); err != nil || res.Answers != 0 {
		t.Errorf("Probe(%s), answered by this node only = %+v, %v; want silence", own, res, err)
	}

	// No interface to probe on.
	if _, err := a.Probe(ctx, v4, []string{"eth9"}); !errors.Is(err, ErrNoProbeInterface) {
		t.Errorf("Probe on eth9 only: %v, want ErrNoProbeInterface", err)
	}
	if _, err := a.Probe(ctx, netip.MustParseAddr("224.0.0.1"), nil); !errors.Is(err, ErrInvalidIP) {
		t.Errorf("Probe(224.0.0.1): %v, want ErrInvalidIP", err)
	}
}

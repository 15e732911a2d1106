package layer2

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/herald-lb/herald/internal/poll"
)

// TestRealReleased: Options.OnReleased reports an IP once its last owner
// withdrew it (not when one of two owners does), after the responders stop
// answering it and after its running gratuitous burst has ended: no claim
// for it leaves the node after the report (the hand-over release must be
// the holder's last word).
func TestRealReleased(t *testing.T) {
	t.Parallel()
	l := newLab(t)
	rel := make(chan []netip.Addr, 16)
	// A long burst, so that the withdrawal comes in its middle.
	a, _ := l.start(t, Options{GratuitousCount: 1000, GratuitousInterval: 5 * time.Millisecond,
		OnReleased: func(ips []netip.Addr) { rel <- slices.Clone(ips) }})
	v4 := netip.MustParseAddr("198.51.100.230")
	v6 := netip.MustParseAddr("2001:db8::230")
	c := l.capture(t, l.nodeMAC)
	for _, owner := range []string{"ns/a", "ns/b"} {
		setIPs(t, a, owner, v4, v6)
	}
	waitActive(t, a, v4, true)
	waitActive(t, a, v6, true)

	setIPs(t, a, "ns/a") // ns/b still holds both
	if got := l.arping(t, v4); got != l.nodeMAC.String() {
		t.Fatalf("after one of two owners withdrew, arping %s = %q", v4, got)
	}
	select {
	case ips := <-rel:
		t.Fatalf("OnReleased(%v) while another owner still holds them", ips)
	default:
	}

	setIPs(t, a, "ns/b")
	var got []netip.Addr
	deadline := time.After(10 * time.Second)
	for len(got) < 2 {
		select {
		case ips := <-rel:
			got = append(got, ips...)
		case <-deadline:
			t.Fatalf("OnReleased reported %v, want %s and %s", got, v4, v6)
		}
	}
	// The report follows the end of the bursts: the counts stay as they
	// are. Frames already sent may still be on their way to the capture
	// socket: announce a marker IP and wait until its burst is captured
	// (frames arrive in order on the one client link).
	a4, n6 := counts2(c, v4, v6)
	marker := netip.MustParseAddr("198.51.100.231")
	setIPs(t, a, "ns/marker", marker)
	waitCaptured(t, c, marker)
	if b4, m6 := counts2(c, v4, v6); b4 != a4 || m6 != n6 {
		t.Errorf("gratuitous frames after OnReleased: %s %d -> %d, %s %d -> %d", v4, a4, b4, v6, n6, m6)
	}
	if got := l.arping(t, v4); got != "" {
		t.Errorf("released %s still answered by %s", v4, got)
	}
	select {
	case ips := <-rel:
		t.Errorf("OnReleased(%v) again", ips)
	default:
	}
}

func counts2(c *capture, v4, v6 netip.Addr) (int, int) {
	a4, _ := c.counts(v4)
	_, n6 := c.counts(v6)
	return a4, n6
}

func waitCaptured(t *testing.T, c *capture, ip netip.Addr) {
	t.Helper()
	poll.Until(t, 10*time.Second, fmt.Sprintf("a gratuitous ARP for %s captured", ip), func() error {
		if n, _ := c.counts(ip); n == 0 {
			return errors.New("none yet")
		}
		return nil
	})
}

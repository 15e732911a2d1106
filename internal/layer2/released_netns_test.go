package layer2

import (
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// TestRealReleased: Options.OnReleased reports an IP once its last owner
// withdrew it (not when one of two owners does), after the responders stop
// answering it and after its running gratuitous burst has ended: no claim
// for it leaves the node after the report (the hand-over release must be
// the holder's last word).
func TestRealReleased(t *testing.T) {
	t.Parallel()
	l := newLab(t)
	type report struct {
		ips    []netip.Addr
		marker uint32
	}
	rel := make(chan report, 16)
	var c *capture // set before the first SetOwner
	// A long burst, so that the withdrawal comes in its middle.
	a, _ := l.start(t, Options{GratuitousCount: 1000, GratuitousInterval: 5 * time.Millisecond,
		OnReleased: func(ips []netip.Addr) {
			// Every frame the node sent before this call is counted
			// before this marker.
			n, err := c.mark()
			if err != nil {
				t.Errorf("send marker: %v", err)
			}
			rel <- report{slices.Clone(ips), n}
		}})
	v4 := netip.MustParseAddr("198.51.100.230")
	v6 := netip.MustParseAddr("2001:db8::230")
	c = l.capture(t)
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
	case r := <-rel:
		t.Fatalf("OnReleased(%v) while another owner still holds them", r.ips)
	default:
	}

	setIPs(t, a, "ns/b")
	// at: the marker sent when each IP was reported released.
	at := map[netip.Addr]uint32{}
	deadline := time.After(10 * time.Second)
	for len(at) < 2 {
		select {
		case r := <-rel:
			for _, ip := range r.ips {
				at[ip] = r.marker
			}
		case <-deadline:
			t.Fatalf("OnReleased reported %v, want %s and %s", slices.Collect(maps.Keys(at)), v4, v6)
		}
	}
	if _, ok := at[v4]; !ok || len(at) != 2 {
		t.Fatalf("OnReleased reported %v, want %s and %s", slices.Collect(maps.Keys(at)), v4, v6)
	}
	if at[v4] == 0 || at[v6] == 0 {
		t.FailNow() // a marker was not sent (reported above)
	}
	// The report follows the end of the bursts: no gratuitous frame for the
	// IPs after their report's marker. A running burst (5 ms apart) would
	// add frames while the arping below runs; the last marker comes after
	// it.
	if got := l.arping(t, v4); got != "" {
		t.Errorf("released %s still answered by %s", v4, got)
	}
	last, err := c.mark()
	if err != nil {
		t.Fatalf("send marker: %v", err)
	}
	end := c.snapshot(t, last)
	if at4, at6 := c.snapshot(t, at[v4]), c.snapshot(t, at[v6]); end.arp[v4] != at4.arp[v4] || end.na[v6] != at6.na[v6] {
		t.Errorf("gratuitous frames after OnReleased: %s %d -> %d, %s %d -> %d", v4, at4.arp[v4], end.arp[v4], v6, at6.na[v6], end.na[v6])
	}
	if end.arp[v4] == 0 || end.na[v6] == 0 {
		t.Errorf("no gratuitous frames captured for %s (%d) or %s (%d): the capture sees nothing", v4, end.arp[v4], v6, end.na[v6])
	}
	select {
	case r := <-rel:
		t.Errorf("OnReleased(%v) again", r.ips)
	default:
	}
}

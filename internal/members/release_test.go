package members

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"testing"

	"github.com/herald-lb/herald/internal/poll"
)

func TestReleaseMessages(t *testing.T) {
	var ips []netip.Addr
	for i := range 300 {
		ips = append(ips, netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 14: byte(i >> 8), 15: byte(i)}))
	}
	ips = append(ips, netip.MustParseAddr("198.51.100.7"))
	msgs := releaseMessages("node-a", ips)
	if len(msgs) < 2 {
		t.Fatalf("%d addresses in %d message(s), want them split", len(ips), len(msgs))
	}
	var got []netip.Addr
	for _, m := range msgs {
		if len(m) > maxReleaseMessage {
			t.Errorf("message of %d bytes, limit %d", len(m), maxReleaseMessage)
		}
		node, part, ok := parseRelease(m)
		if !ok || node != "node-a" {
			t.Fatalf("parseRelease(%q) = %q, %v", m, node, ok)
		}
		got = append(got, part...)
	}
	if !slices.Equal(got, ips) {
		t.Errorf("round trip lost addresses: %d of %d", len(got), len(ips))
	}
	for _, bad := range []string{"herald-leaving:node-a", "herald-released:", "herald-released: "} {
		if _, _, ok := parseRelease([]byte(bad)); ok {
			t.Errorf("parseRelease(%q) accepted", bad)
		}
	}
	if node, ips, ok := parseRelease([]byte("herald-released:n1 198.51.100.1 nonsense ::ffff:198.51.100.2")); !ok || node != "n1" ||
		!slices.Equal(ips, []netip.Addr{netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.2")}) {
		t.Errorf("parseRelease skipping junk = %q %v %v", node, ips, ok)
	}
}

// TestReleasedReachesMembers: Released sends a release to every other live
// member, whose Config.OnReleased receives the sender and the addresses.
func TestReleasedReachesMembers(t *testing.T) {
	t.Parallel()
	secret := []byte("NvKGPsR2n7TlqVlGrA6ekw")
	var mu sync.Mutex
	got := map[string][]string{} // receiver -> "sender ip" lines
	cfg := func(name string) Config {
		c := testConfig(name, secret)
		c.OnReleased = func(node string, ips []netip.Addr) {
			mu.Lock()
			defer mu.Unlock()
			for _, ip := range ips {
				got[name] = append(got[name], node+" "+ip.String())
			}
		}
		return c
	}
	a, b, c := start(t, cfg("node-a")), start(t, cfg("node-b")), start(t, cfg("node-c"))
	c.SetPeers([]netip.AddrPort{a.Addr(), b.Addr(), c.Addr()})
	for _, n := range []*testNode{a, b, c} {
		poll.Until(t, sanityLimit, n.cfg.NodeName+" sees all", sees(n.List, "node-a", "node-b", "node-c"))
	}
	ips := []netip.Addr{netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8::7")}
	a.Released(ips)
	want := []string{"node-a 198.51.100.7", "node-a 2001:db8::7"}
	poll.Until(t, sanityLimit, "b and c receive a's release", func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range []string{"node-b", "node-c"} {
			if !slices.Equal(got[n], want) {
				return fmt.Errorf("%s received %v", n, got[n])
			}
		}
		if len(got["node-a"]) != 0 {
			return fmt.Errorf("the sender received its own release: %v", got["node-a"])
		}
		return nil
	})
}

// TestReleaseSendersAdvertised: a speaker with Config.SendsReleases says so
// in its node metadata, and the others list it in ReleaseSenders; one
// without (an older Herald) and a MetalLB speaker (no metadata at all) are
// not listed, and the MetalLB speaker still counts every member (the
// metadata does not disturb a mixed group in migration mode). Unencrypted
// gossip advertises it too (the metadata then holds no keys).
func TestReleaseSendersAdvertised(t *testing.T) {
	t.Parallel()
	const secret = "Zm9vYmFyYmF6cXV4cXV1eA"
	cfg := func(name string, sends bool) Config {
		c := testConfig(name, []byte(secret))
		c.KeyDerivation = KeyDerivationMetalLB
		c.SendsReleases = sends
		return c
	}
	a, b, old := start(t, cfg("node-a", true)), start(t, cfg("node-b", true)), start(t, cfg("node-old", false))
	m := metallbSpeaker(t, "node-metallb", secret)
	if _, err := m.Join([]string{a.Addr().String()}); err != nil {
		t.Fatalf("MetalLB speaker joins: %v", err)
	}
	a.SetPeers([]netip.AddrPort{a.Addr(), b.Addr(), old.Addr()})
	for _, n := range []*testNode{a, b, old} {
		poll.Until(t, sanityLimit, n.cfg.NodeName+" sees all", sees(n.List, "node-a", "node-b", "node-metallb", "node-old"))
	}
	poll.Until(t, sanityLimit, "MetalLB counts every member", func() bool { return m.NumMembers() == 4 })
	for _, tc := range []struct {
		n    *testNode
		want map[string]bool
	}{
		{a, map[string]bool{"node-b": true}},
		{b, map[string]bool{"node-a": true}},
		{old, map[string]bool{"node-a": true, "node-b": true}},
	} {
		if got := tc.n.ReleaseSenders(); !maps.Equal(got, tc.want) {
			t.Errorf("%s: ReleaseSenders() = %v, want %v", tc.n.cfg.NodeName, got, tc.want)
		}
	}

	plain := func(name string) Config { c := testConfig(name, nil); c.SendsReleases = true; return c }
	p, q := start(t, plain("plain-p")), start(t, plain("plain-q"))
	q.SetPeers([]netip.AddrPort{p.Addr(), q.Addr()})
	poll.Until(t, sanityLimit, "unencrypted: p sees q", sees(p.List, "plain-p", "plain-q"))
	if got := p.ReleaseSenders(); !maps.Equal(got, map[string]bool{"plain-q": true}) {
		t.Errorf("unencrypted: ReleaseSenders() = %v, want plain-q", got)
	}
}

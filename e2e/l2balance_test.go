package e2e

import (
	"fmt"
	"maps"
	"net/netip"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/herald-lb/herald/e2e/lab"
	"github.com/herald-lb/herald/internal/announce"
	"github.com/herald-lb/herald/internal/explain"
	"github.com/herald-lb/herald/internal/poll"
)

const l2BalNS = "l2bal"

// balancedFixture returns 5 addresses of lab.L2RangeV4 (198.51.100.200-250,
// the lab's layer 2 range: clear of the client, the nodes and the router)
// that the plain election puts 4 on one of nodes (every node an equal
// candidate), and whose balanced winners, when the busiest balanced node
// is lost, move only that node's addresses; with the balanced winners
// before and after.
func balancedFixture(t *testing.T, nodes []string) (addrs []netip.Addr, before, after map[netip.Addr]string, lost string) {
	t.Helper()
	ballots := func(as []netip.Addr, without string) []announce.Ballot {
		var bs []announce.Ballot
		for _, a := range as {
			b := announce.Ballot{IP: a}
			for _, n := range nodes {
				if n != without {
					b.Candidates = append(b.Candidates, announce.Candidate{Node: n, Serves: 1})
				}
			}
			bs = append(bs, b)
		}
		return bs
	}
	first, last := int(lab.L2RangeV4.First.As4()[3]), int(lab.L2RangeV4.Last.As4()[3])
	for start := first; start+5 <= last; start++ {
		byNode := map[string][]netip.Addr{}
		var set []netip.Addr
		for i := start; i <= last && set == nil; i++ {
			a := netip.AddrFrom4([4]byte{198, 51, 100, byte(i)})
			w := announce.Elect(a, ballots([]netip.Addr{a}, "")[0].Candidates)[0]
			byNode[w] = append(byNode[w], a)
			if len(byNode[w]) == 4 {
				for n, as := range byNode {
					if n != w && len(as) > 0 {
						set = append(byNode[w], as[0])
						break
					}
				}
			}
		}
		if set == nil {
			continue
		}
		b0, err := announce.ElectBalanced(ballots(set, ""))
		if err != nil {
			t.Fatal(err)
		}
		load := map[string]int{}
		for _, n := range b0 {
			load[n]++
		}
		busiest := nodes[0]
		for _, n := range nodes {
			if load[n] > load[busiest] {
				busiest = n
			}
		}
		b1, err := announce.ElectBalanced(ballots(set, busiest))
		if err != nil {
			t.Fatal(err)
		}
		others := 0
		for a, n := range b0 {
			if n != busiest && b1[a] != n {
				others++
			}
		}
		if others == 0 {
			return set, b0, b1, busiest
		}
	}
	t.Fatal("no fixture in the lab's layer 2 range")
	return nil, nil, nil, ""
}

// TestLayer2Balanced installs Herald with Helm and layer2.election=balanced
// (--l2-election=balanced) on 3 nodes, and 5 Services whose addresses the
// plain election would put 4 on one node. On the wire (the client's ARP
// requests) and in the ServiceL2Status objects, every address is answered
// by exactly the balanced winner every speaker computed on its own, no
// node by more than ⌈5/3⌉+1 = 3; when the busiest node's speaker is killed
// (SIGKILL), only its addresses move. Before the kill, `kubectl herald
// why` on each Service names the node that answers (checkWhyBalanced).
func TestLayer2Balanced(t *testing.T) {
	e := l2Env{newEnv(t, 3, lab.InstallOptions{Method: lab.InstallHelm, HelmSet: []string{"layer2.election=balanced"}})}
	addrs, before, after, lost := balancedFixture(t, e.allNodes())
	t.Logf("addresses %v: balanced %v; without %s: %v", addrs, before, lost, after)
	e.namespace(t, l2BalNS, nil)
	var blocks []string
	for _, a := range addrs {
		blocks = append(blocks, a.String()+"/32")
	}
	e.put(t, pool("l2bal", blocks...))
	e.put(t, l2adv("l2bal", "l2bal"))
	if err := e.h.WaitConfigValid(testCtx(t, 2*time.Minute), "controller"); err != nil {
		t.Fatal(err)
	}
	keyOf := map[netip.Addr]types.NamespacedName{}
	got := map[netip.Addr]string{}
	for i := range addrs {
		name := fmt.Sprintf("bal-%d", i)
		e.createService(t, lbService(l2BalNS, name, withAnnotation("metallb.io/address-pool", "l2bal")), e.allNodes()...)
		ip := e.ips(t, l2BalNS, name, 1)[0]
		keyOf[ip] = types.NamespacedName{Namespace: l2BalNS, Name: name}
	}
	// Each Service's announcer settles once the last Service is in the set.
	for ip, key := range keyOf {
		got[ip] = e.waitAnnouncer(t, key, ip, "announced on its balanced winner "+before[ip], is(before[ip]))
	}
	load := map[string]int{}
	for _, n := range got {
		load[n]++
	}
	for n, l := range load {
		if l > 3 {
			t.Errorf("%s answers %d of 5 addresses, more than ⌈5/3⌉+1 = 3 (%v)", n, l, got)
		}
	}
	if !maps.Equal(got, before) {
		t.Fatalf("announcers %v, balanced winners %v", got, before)
	}
	checkWhyBalanced(t, e.env, keyOf, got)

	ctx := testCtx(t, 3*time.Minute)
	if err := e.h.KillSpeaker(lost); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = e.h.StartSpeaker(ctx, lost)
		}
	})
	// The killed speaker cannot update its ServiceL2Status objects: the wire
	// decides for its addresses, the wire and the status for the others.
	for ip, key := range keyOf {
		if before[ip] == lost {
			e.waitServedBy(t, ip, after[ip])
			if n, err := e.resolve(ip); err != nil || n != after[ip] {
				t.Errorf("%s of the killed %s: answered by %q (%v), want %s", ip, lost, n, err, after[ip])
			}
			continue
		}
		if n := e.waitAnnouncer(t, key, ip, "still on "+before[ip], is(before[ip])); n != before[ip] {
			t.Errorf("%s moved from %s to %s although %s held it, not %s", ip, before[ip], n, before[ip], lost)
		}
	}
	if err := e.h.StartSpeaker(ctx, lost); err != nil {
		t.Fatal(err)
	}
	restarted = true
	for ip, key := range keyOf {
		e.waitAnnouncer(t, key, ip, "back on "+before[ip], is(before[ip]))
	}
}

// checkWhyBalanced runs `kubectl herald why -o json` on each Service of
// keyOf (address -> Service) and checks that the plugin replays the
// speakers' balanced election: it reads balanced from their arguments,
// names as winner the node that answers the address (answerer, from the
// client's ARP and the ServiceL2Status, which agree), reports no problem,
// and, for at least one address, that winner is not the per-address hash
// winner (the fixture puts 4 of 5 on one node by hash), so a plugin that
// replayed the plain election would fail here.
func checkWhyBalanced(t *testing.T, e *env, keyOf map[netip.Addr]types.NamespacedName, answerer map[netip.Addr]string) {
	t.Helper()
	dir := pluginDir(t)
	notHash := 0
	for ip, key := range keyOf {
		var r *explain.WhyReport
		// The state has settled (answerer and status agree); the wait is
		// for the plugin's view of the speaker Pods' readiness only.
		poll.Until(t, 30*time.Second, "kubectl herald why svc/"+key.Name+" exits 0", func() error {
			var code int
			r, code, _ = runWhy(t, e, dir, key.Namespace, key.Name)
			if code != 0 {
				return fmt.Errorf("exit %d: problems %q", code, r.Problems)
			}
			return nil
		}, poll.Every(time.Second))
		if len(r.IPs) != 1 || r.IPs[0].IP != ip.String() || r.IPs[0].L2 == nil {
			t.Fatalf("why %s: addresses %+v, want %s in layer 2", key, r.IPs, ip)
		}
		m := r.IPs[0].L2
		t.Logf("why %s: %s winner %s (%s election, plain %q): %s", key, ip, m.Winner, m.Election, m.PlainWinner, m.WinnerWhy)
		if m.Election != explain.L2ElectionBalanced {
			t.Errorf("why %s: election %q, want balanced (the speakers' --l2-election)", key, m.Election)
		}
		if m.Winner != answerer[ip] {
			t.Errorf("why %s: winner %q, but %s answers %s", key, m.Winner, answerer[ip], ip)
		}
		if m.PlainWinner != "" {
			notHash++
		}
	}
	if notHash == 0 {
		t.Errorf("no address's balanced winner differs from its hash winner: the plugin's balanced replay is not tested")
	}
}

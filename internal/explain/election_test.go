package explain

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/herald-lb/herald/internal/announce"
)

// TestElectionFromFlags: the speaker's own rules for its election flags
// (speaker/flags.go): per-address by default, --ml-key-derivation=metallb
// implies metallb, and the combinations the speaker refuses are errors.
func TestElectionFromFlags(t *testing.T) {
	for _, tc := range []struct {
		l2, kd  string
		want    L2Election
		refused bool
	}{
		{"", "", L2ElectionPerAddress, false},
		{"per-address", "", L2ElectionPerAddress, false},
		{"balanced", "", L2ElectionBalanced, false},
		{"balanced", "herald", L2ElectionBalanced, false},
		{"metallb", "", L2ElectionMetalLB, false},
		{"", "metallb", L2ElectionMetalLB, false},
		{"per-address", "metallb", L2ElectionMetalLB, false},
		{"balanced", "metallb", "", true},
		{"per-service", "", "", true},
		{"Balanced", "", "", true},
	} {
		got, err := ElectionFromFlags(tc.l2, tc.kd)
		if got != tc.want || (err != nil) != tc.refused || (err != nil && !errors.Is(err, ErrElectionRefused)) {
			t.Errorf("--l2-election=%q --ml-key-derivation=%q: %q, %v; want %q, refused %v", tc.l2, tc.kd, got, err, tc.want, tc.refused)
		}
	}
}

// skewed returns 5 addresses of 198.51.100.0/27 that the per-address
// election puts 4 on one of n1..n3 (equal candidates), so that the
// balanced election (at most ⌈5/3⌉+1 = 3 per node) elects another node
// for at least one of them.
func skewed(t *testing.T) []netip.Addr {
	t.Helper()
	cands := []announce.Candidate{{Node: "n1", Serves: 1}, {Node: "n2", Serves: 1}, {Node: "n3", Serves: 1}}
	byNode := map[string][]netip.Addr{}
	for i := 1; i < 31; i++ {
		a := netip.AddrFrom4([4]byte{198, 51, 100, byte(i)})
		w := announce.Elect(a, cands)[0]
		byNode[w] = append(byNode[w], a)
		if len(byNode[w]) == 4 {
			for n, as := range byNode {
				if n != w {
					return append(byNode[w], as[0])
				}
			}
		}
	}
	t.Fatal("no skewed set")
	return nil
}

func setElection(c *Cluster, byNode map[string]L2Election) {
	c.Elections = nil
	for _, p := range c.SpeakerPods {
		c.Elections = append(c.Elections, SpeakerElection{Pod: p.Name, Node: p.Spec.NodeName, Election: byNode[p.Spec.NodeName]})
	}
}

// TestWhyBalancedElection: with every speaker on --l2-election=balanced,
// the winner why names is the balanced one (ElectBalanced over the
// addresses' ballots, the speakers' pure decision), not the per-address
// hash winner, for every address; the explanation gives the capacity and
// the loads, and no problem is reported when the winners' ServiceL2Status
// objects exist. Before the plugin read the election, it named the hash
// winner, which this fixture makes differ for at least one address.
func TestWhyBalancedElection(t *testing.T) {
	c := lab()
	c.Resources.Pools[0].Spec.Addresses = []string{"198.51.100.0/27"}
	addrs := skewed(t)
	var ballots []announce.Ballot
	for i, a := range addrs {
		c.service(fmt.Sprintf("s%d", i), []string{a.String()}, "n1", "n2", "n3")
		ballots = append(ballots, announce.Ballot{IP: a, Candidates: []announce.Candidate{{Node: "n1", Serves: 1}, {Node: "n2", Serves: 1}, {Node: "n3", Serves: 1}}})
	}
	want, err := announce.ElectBalanced(ballots)
	if err != nil {
		t.Fatal(err)
	}
	all := func(e L2Election) map[string]L2Election {
		return map[string]L2Election{"n1": e, "n2": e, "n3": e}
	}
	setElection(c, all(L2ElectionBalanced))
	moved := 0
	for i, a := range addrs {
		name := fmt.Sprintf("s%d", i)
		c.l2Status(name, want[a])
		r := mustWhy(t, c, name)
		m := r.IPs[0].L2
		if m.Winner != want[a] || m.Election != L2ElectionBalanced {
			t.Errorf("%s: winner %q (%s), want the balanced winner %s", a, m.Winner, m.Election, want[a])
		}
		if len(r.Problems) != 0 {
			t.Errorf("%s: problems %q", a, r.Problems)
		}
		if !strings.Contains(m.WinnerWhy, "balanced election") || m.Capacity != 3 || !strings.Contains(m.WinnerWhy, "loads now: ") {
			t.Errorf("%s: capacity %d, why %q", a, m.Capacity, m.WinnerWhy)
		}
		if !hasProblem(r.Notes, "layer 2 election: balanced") {
			t.Errorf("%s: notes %q", a, r.Notes)
		}
		if m.PlainWinner != "" {
			moved++
			if m.PlainWinner == m.Winner || m.Ranking[0].Node != m.PlainWinner || !strings.Contains(m.WinnerWhy, "were full") {
				t.Errorf("%s: plain winner %q, winner %q, ranking %+v, why %q", a, m.PlainWinner, m.Winner, m.Ranking, m.WinnerWhy)
			}
		}
	}
	if moved == 0 {
		t.Fatal("the fixture moves no address from its hash winner: it does not test the balanced election")
	}

	// Per-address (the default, no --l2-election): the hash winners, and
	// the balanced winners' ServiceL2Status objects disagree.
	setElection(c, all(L2ElectionPerAddress))
	disagree := 0
	for i := range addrs {
		r := mustWhy(t, c, fmt.Sprintf("s%d", i))
		m := r.IPs[0].L2
		if m.Winner != m.Ranking[0].Node || m.Election != L2ElectionPerAddress {
			t.Errorf("per-address: winner %q, ranking %+v", m.Winner, m.Ranking)
		}
		if hasProblem(r.Problems, "reports announcing in layer 2") {
			disagree++
		}
	}
	if disagree != moved {
		t.Errorf("per-address replay of balanced speakers: %d disagreements, want %d", disagree, moved)
	}
}

// TestWhyMixedElections: during a rollout that changes --l2-election,
// each node's verdict is its own speaker's election; the report says the
// elections are mixed (a problem) and names both announcers when the two
// elections pick different nodes.
func TestWhyMixedElections(t *testing.T) {
	c := lab()
	c.Resources.Pools[0].Spec.Addresses = []string{"198.51.100.0/27"}
	addrs := skewed(t)
	for i, a := range addrs {
		c.service(fmt.Sprintf("s%d", i), []string{a.String()}, "n1", "n2", "n3")
	}
	// Find an address whose balanced winner is not its hash winner, then
	// run the balanced election on the balanced winner and the hash one
	// on the hash winner: both announce.
	setElection(c, map[string]L2Election{"n1": L2ElectionBalanced, "n2": L2ElectionBalanced, "n3": L2ElectionBalanced})
	for i := range addrs {
		name := fmt.Sprintf("s%d", i)
		m := mustWhy(t, c, name).IPs[0].L2
		if m.PlainWinner == "" {
			continue
		}
		byNode := map[string]L2Election{"n1": L2ElectionPerAddress, "n2": L2ElectionPerAddress, "n3": L2ElectionPerAddress}
		byNode[m.Winner] = L2ElectionBalanced
		setElection(c, byNode)
		r := mustWhy(t, c, name)
		if !hasProblem(r.Problems, "the speakers run different layer 2 elections") || !hasProblem(r.Notes, "layer 2 election: mixed") {
			t.Errorf("mixed elections not reported: problems %q notes %q", r.Problems, r.Notes)
		}
		if !hasProblem(r.Problems, "2 nodes announce it in layer 2") || !hasProblem(r.Problems, m.Winner+" (balanced)") || !hasProblem(r.Problems, m.PlainWinner+" (per-address)") {
			t.Errorf("two announcers (%s balanced, %s per-address) not reported: %q", m.Winner, m.PlainWinner, r.Problems)
		}
		return
	}
	t.Fatal("no address moved by the balanced election")
}

// TestWhyMetalLBElection: with --l2-election=metallb (or
// --ml-key-derivation=metallb) a Service's second address goes to the
// winner of its first, as MetalLB's speakers elect; the ranking is the
// first address's and the explanation says so.
func TestWhyMetalLBElection(t *testing.T) {
	c := lab()
	c.Resources.Pools[0].Spec.Addresses = []string{"198.51.100.0/27"}
	cands := []announce.Candidate{{Node: "n1", Serves: 1}, {Node: "n2", Serves: 1}, {Node: "n3", Serves: 1}}
	first := netip.MustParseAddr("198.51.100.1")
	var second netip.Addr
	for i := 2; i < 31 && !second.IsValid(); i++ {
		a := netip.AddrFrom4([4]byte{198, 51, 100, byte(i)})
		if announce.Elect(a, cands)[0] != announce.Elect(first, cands)[0] {
			second = a
		}
	}
	c.service("two", []string{first.String(), second.String()}, "n1", "n2", "n3")
	setElection(c, map[string]L2Election{"n1": L2ElectionMetalLB, "n2": L2ElectionMetalLB, "n3": L2ElectionMetalLB})
	r := mustWhy(t, c, "two")
	w := announce.Elect(first, cands)[0]
	m := r.IPs[1].L2
	if m.Winner != w || m.BallotIP != first.String() || m.Ranking[0].Node != w || !strings.Contains(m.WinnerWhy, "MetalLB's election") {
		t.Errorf("%s: winner %q ballot %q ranking %+v why %q, want %s (winner of %s)", second, m.Winner, m.BallotIP, m.Ranking, m.WinnerWhy, w, first)
	}
	if hasProblem(r.Problems, "internal inconsistency") {
		t.Errorf("problems %q", r.Problems)
	}
}

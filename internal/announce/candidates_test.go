package announce

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/herald-lb/herald/api/v1beta1"
)

// TestL2CandidatesAgreeWithDecide: the ranking L2Candidates exposes for
// explanations is the election Decide runs. Its first entry is the node
// that announces the IP, its entries are exactly the live, eligible nodes,
// and they are ordered by Serves, Preference, then ElectionHash.
func TestL2CandidatesAgreeWithDecide(t *testing.T) {
	c := newCluster(5)
	c.nodeByName("n2").NetworkUnavailable = true
	c.nodeByName("n3").Labels[ExcludeFromLBLabel] = ""
	c.nodeByName("n4").Labels["zone"] = "a"
	c.live = map[string]bool{"n1": true, "n2": true, "n3": true, "n4": true}
	ad := l2ad("l2", "p")
	ad.Spec.NodeSelectors = nil
	c.res.L2Advertisements = []v1beta1.L2Advertisement{ad}
	s := svc("ns/a", "198.51.100.7")
	eps := ready("n1", "n4", "n5")
	for _, tc := range []struct {
		name string
		pref bool
		want []string
	}{
		{"hash only", false, nil},
		{"preferred zone a", true, []string{"n4", "n1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc := *c
			if tc.pref {
				a := ad
				a.Spec.PreferredNodeSelectors = []v1beta1.PreferredNodeSelector{{Weight: 10, Preference: sel("zone", "a")}}
				cc.res.L2Advertisements = []v1beta1.L2Advertisement{a}
			}
			in := cc.input(t, "n1", s, eps)
			got := L2Candidates(in, ip("198.51.100.7"))
			var names []string
			for _, g := range got {
				names = append(names, g.Node)
			}
			if len(got) != 2 {
				t.Fatalf("candidates %v, want n1 and n4 (n2 NetworkUnavailable, n3 excluded, n5 not live)", names)
			}
			if tc.want != nil && (names[0] != tc.want[0] || names[1] != tc.want[1]) {
				t.Fatalf("candidates %v, want %v", names, tc.want)
			}
			if !tc.pref {
				h0, h1 := ElectionHash(names[0], ip("198.51.100.7")), ElectionHash(names[1], ip("198.51.100.7"))
				if bytes.Compare(h0[:], h1[:]) >= 0 {
					t.Fatalf("candidates %v not in hash order", names)
				}
			}
			for _, n := range []string{"n1", "n4"} {
				d := Decide(cc.input(t, n, s, eps))
				if announces := d.IPs[0].L2.Announce; announces != (n == names[0]) {
					t.Errorf("Decide on %s: announce=%v, but L2Candidates ranks %v", n, announces, names)
				}
			}
		})
	}
}

// TestL2CandidatesFirstIPElection: with Options.ElectByServiceFirstIP
// (--l2-election=metallb) the ranking of every address of a Service is
// the election of its first address, as Decide runs it; BallotIP names
// that address. Before, L2Candidates ranked the second address on its own
// hash, so kubectl herald why named another winner than the speakers.
func TestL2CandidatesFirstIPElection(t *testing.T) {
	c := newCluster(3)
	c.res.L2Advertisements = []v1beta1.L2Advertisement{l2ad("l2", "p")}
	eps := ready("n1", "n2", "n3")
	// Two addresses whose own elections pick different nodes.
	first := ip("198.51.100.1")
	var second netip.Addr
	for _, cand := range []string{"198.51.100.2", "198.51.100.3", "198.51.100.4", "198.51.100.5", "198.51.100.6"} {
		in := c.input(t, "n1", svc("ns/a", first.String(), cand), eps)
		if L2Candidates(in, ip(cand))[0].Node != L2Candidates(in, first)[0].Node {
			second = ip(cand)
			break
		}
	}
	if !second.IsValid() {
		t.Fatal("no second address with another winner")
	}
	s := svc("ns/a", first.String(), second.String())
	c.opts.ElectByServiceFirstIP = true
	in := c.input(t, "n1", s, eps)
	if b := BallotIP(in, second); b != first {
		t.Fatalf("BallotIP(%s) = %s, want the first address %s", second, b, first)
	}
	want := L2Candidates(in, first)[0].Node
	if got := L2Candidates(in, second)[0].Node; got != want {
		t.Fatalf("ranking of %s starts with %s, want %s (the winner of the first address)", second, got, want)
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		d := Decide(c.input(t, n, s, eps))
		if a := d.IPs[1].L2.Announce; a != (n == want) {
			t.Errorf("Decide on %s: %s announce=%v, L2Candidates' winner %s", n, second, a, want)
		}
	}
	c.opts.ElectByServiceFirstIP = false
	if b := BallotIP(c.input(t, "n1", s, eps), second); b != second {
		t.Errorf("per-address BallotIP(%s) = %s", second, b)
	}
}

package members

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// fixedChooser draws Float64 from a cycle of values and shuffles by
// reversing, so pickJoins' choices are known.
type fixedChooser struct {
	draws []float64
	n     int
}

func (c *fixedChooser) Float64() float64 {
	v := c.draws[c.n%len(c.draws)]
	c.n++
	return v
}

func (c *fixedChooser) Shuffle(n int, swap func(i, j int)) {
	for i := range n / 2 {
		swap(i, n-1-i)
	}
}

func joinAddrs(n int) []netip.AddrPort {
	var out []netip.AddrPort
	for i := range n {
		out = append(out, netip.MustParseAddrPort(fmt.Sprintf("198.51.100.%d:7946", i+1)))
	}
	return out
}

func TestPickJoins(t *testing.T) {
	for _, tc := range []struct {
		name    string
		missing int
		k       int
		p       float64
		draws   []float64
		want    []netip.AddrPort
	}{
		{"none missing", 0, joinFanoutJoined, 1, []float64{0}, nil},
		{"fewer than the fan-out: all", 2, joinFanoutJoined, 1, []float64{0}, joinAddrs(2)},
		{"exactly the fan-out: all", 3, joinFanoutJoined, 1, []float64{0}, joinAddrs(3)},
		// 99 missing peers of a 100-node start-up: 3 per round, not 99.
		{"more: k of them, picked by the shuffle", 99, joinFanoutJoined, 1, []float64{0}, []netip.AddrPort{
			netip.MustParseAddrPort("198.51.100.99:7946"),
			netip.MustParseAddrPort("198.51.100.98:7946"),
			netip.MustParseAddrPort("198.51.100.97:7946"),
		}},
		{"not joined yet: one parallel batch", 99, joinFanoutNotJoined, 1, []float64{0}, func() []netip.AddrPort {
			a := joinAddrs(99)
			slices.Reverse(a)
			return a[:maxParallelJoins]
		}()},
		// A member of 100 tries each missing peer with p = 0.03: the draws
		// keep the first and third.
		{"kept with probability p", 3, joinFanoutJoined, 0.03, []float64{0.01, 0.5, 0.02}, []netip.AddrPort{
			netip.MustParseAddrPort("198.51.100.1:7946"),
			netip.MustParseAddrPort("198.51.100.3:7946"),
		}},
		{"none drawn", 3, joinFanoutJoined, 0.03, []float64{0.9}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := pickJoins(joinAddrs(tc.missing), tc.k, tc.p, &fixedChooser{draws: tc.draws})
			if len(got) == 0 && len(tc.want) == 0 {
				return
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("pickJoins(%d missing, k %d, p %v) = %v, want %v", tc.missing, tc.k, tc.p, got, tc.want)
			}
		})
	}
}

func TestJoinProbability(t *testing.T) {
	for _, tc := range []struct {
		joined  bool
		members int
		want    float64
	}{
		{false, 1, 1},
		{false, 100, 1}, // not joined: try (up to the batch) all
		{true, 2, 1},
		{true, 3, 1},
		{true, 10, 0.3},
		{true, 100, 0.03},
	} {
		if got := joinProbability(tc.joined, tc.members); got != tc.want {
			t.Errorf("joinProbability(joined %v, %d members) = %v, want %v", tc.joined, tc.members, got, tc.want)
		}
	}
}

// TestJoinsPerMissingPeer: in a 100-member cluster where one member is
// declared failed by all others, the cluster tries about joinFanoutJoined
// joins to it per round (was 99), and the chance that a round tries none is
// small (about e⁻³), so the member is still rejoined within a few rounds.
func TestJoinsPerMissingPeer(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const members, rounds = 100, 2000
	total, emptyRounds := 0, 0
	for range rounds {
		n := 0
		for range members - 1 {
			n += len(pickJoins(joinAddrs(1), joinFanoutJoined, joinProbability(true, members), r))
		}
		total += n
		if n == 0 {
			emptyRounds++
		}
	}
	if mean := float64(total) / rounds; mean < 2.5 || mean > 3.5 {
		t.Errorf("%.2f joins per round to the missing member, want about %d", mean, joinFanoutJoined)
	}
	if frac := float64(emptyRounds) / rounds; frac > 0.1 {
		t.Errorf("%.2f of the rounds tried no join, want about 0.05", frac)
	}
}

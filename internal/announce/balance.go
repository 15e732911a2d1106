package announce

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"slices"

	"github.com/herald-lb/herald/internal/config"
)

// Ballot is one layer 2 address with its election candidates, as
// L2Candidates returns them (the union over every Service holding the
// address, so Services sharing it share its ballot and its winner).
type Ballot struct {
	IP         netip.Addr
	Candidates []Candidate
}

// BalancedCapacity is the most addresses ElectBalanced gives one node when
// m addresses are spread over n nodes that can each take any of them:
// max(⌈m/n⌉ + 1, ⌊1.25·m/n⌋). The first term keeps small counts within one
// address of the best spread (5 addresses on 3 nodes: at most 3 on a node,
// 2 is the best possible); the second gives larger counts the slack of
// consistent hashing with bounded loads at c = 1.25 (Mirrokni, Thorup and
// Zadimoghaddam, "Consistent Hashing with Bounded Loads", SODA 2018), which
// bounds how many addresses a node's loss moves besides its own. n ≤ 0
// returns m.
func BalancedCapacity(m, n int) int {
	if n <= 0 {
		return m
	}
	ceil := (m + n - 1) / n
	return max(ceil+1, int(math.Floor(1.25*float64(m)/float64(n))))
}

// ElectBalanced elects one winner per ballot so that no node holds more
// than BalancedCapacity(m, n) of the m addresses, n being the number of
// nodes that are a first-rank candidate of at least one ballot. It is
// rendezvous hashing with bounded loads, a pure function of the whole set
// of ballots: every speaker given the same ballots, in any order and with
// candidates in any order, elects the same winners.
//
// Each ballot is ranked as Elect ranks it (Serves descending, Preference
// descending, ElectionHash ascending). Only its first rank, the candidates
// with the winner's Serves and Preference, may win: preferredNodeSelectors,
// externalTrafficPolicy Local eligibility and the shared-address rule keep
// their strict priority, and the bound balances only among equals. Ballots
// are placed in order of first-rank size, then address (netip.Addr.Compare),
// so that addresses few nodes can take are placed first; each goes to the first
// node of its first rank, in hash order, still below the capacity, or,
// when every one of them is full (their first rank is narrower than the
// cluster: Local endpoints, preferences, node selectors), to the least
// loaded of them, ties to the better hash. The bound is then exceeded only
// where the eligibility rules leave no other choice.
//
// With a set of ballots where nothing but liveness changes, a node's loss
// moves the addresses it held and, because the capacity rises and earlier
// placements change, a few others (measured in docs/performance.md,
// "Balanced layer 2 placement"); the plain election (Elect) moves only the
// lost node's addresses, but can put every address on one node.
//
// The result maps each ballot's IP (unmapped, no zone) to its winner; a
// ballot without candidates is absent. Two ballots with the same IP are an
// error. Cost: one ElectionHash per candidate and a sort per ballot, as
// Elect, plus O(m log m) for the address order.
func ElectBalanced(ballots []Ballot) (map[netip.Addr]string, error) {
	w, _, err := electBalanced(ballots)
	return w, err
}

// firstRanked is one ballot's address and its first rank, in hash order.
type firstRanked struct {
	ip    netip.Addr
	first []string
}

// firstRanks returns each ballot's first rank (the candidates with the
// winner's Serves and Preference, in Elect's order) and the set of nodes
// in some first rank.
func firstRanks(ballots []Ballot) ([]firstRanked, map[string]bool) {
	rs := make([]firstRanked, 0, len(ballots))
	nodes := map[string]bool{}
	for _, b := range ballots {
		ip := b.IP.Unmap().WithZone("")
		if len(b.Candidates) == 0 {
			rs = append(rs, firstRanked{ip: ip})
			continue
		}
		order := rank(ip, b.Candidates)
		top := order[0]
		var first []string
		for _, c := range order {
			if c.Serves != top.Serves || c.Preference != top.Preference {
				break
			}
			if len(first) == 0 || first[len(first)-1] != c.Node {
				first = append(first, c.Node)
				nodes[c.Node] = true
			}
		}
		rs = append(rs, firstRanked{ip: ip, first: first})
	}
	return rs, nodes
}

// electBalanced is ElectBalanced, also returning the capacity it applied.
func electBalanced(ballots []Ballot) (map[netip.Addr]string, int, error) {
	type ranked = firstRanked
	rs, nodes := firstRanks(ballots)
	slices.SortFunc(rs, func(a, b ranked) int { return a.ip.Compare(b.ip) })
	for i := 1; i < len(rs); i++ {
		if rs[i].ip == rs[i-1].ip {
			return nil, 0, fmt.Errorf("layer 2 ballots: address %s appears twice", rs[i].ip)
		}
	}
	// The narrowest first ranks go first, so that an address only a few
	// nodes can take finds room on them.
	slices.SortStableFunc(rs, func(a, b ranked) int { return cmp.Compare(len(a.first), len(b.first)) })
	m := 0
	for _, r := range rs {
		if len(r.first) > 0 {
			m++
		}
	}
	capacity := BalancedCapacity(m, len(nodes))
	load := make(map[string]int, len(nodes))
	out := make(map[netip.Addr]string, m)
	for _, r := range rs {
		if len(r.first) == 0 {
			continue
		}
		win := ""
		for _, name := range r.first {
			if load[name] < capacity {
				win = name
				break
			}
		}
		if win == "" {
			win = r.first[0]
			for _, name := range r.first[1:] {
				if load[name] < load[win] {
					win = name
				}
			}
		}
		load[win]++
		out[r.ip] = win
	}
	return out, capacity, nil
}

// L2Ballots returns the ballots of the balanced election: one per layer 2
// address held by a Service of services that would be announced in layer 2
// somewhere (type LoadBalancer of base.Options.LoadBalancerClass, valid
// ingress IPs, in a pool with an L2Advertisement covering it, not refused
// for allow-shared-ip with serviceSelectors, a serving endpoint), with the
// candidates L2Candidates gives for it when every other Service holding the
// address is passed as Input.Sharing. base supplies Config, Nodes, Live and
// Options; its Service, Endpoints, Sharing and Node are ignored. Ballots
// are in address order. Cost: for each address, the L2Candidates cost of
// the Services holding it.
func L2Ballots(base Input, services []SharedService) []Ballot {
	holders := map[netip.Addr][]int{}
	for i := range services {
		s := &services[i].Service
		if !s.LoadBalancer || s.LoadBalancerClass != base.Options.LoadBalancerClass || len(s.InvalidIPs) > 0 ||
			!hasServingEndpoint(services[i].Endpoints, "") {
			continue
		}
		for _, raw := range s.IPs {
			ip := raw.Unmap().WithZone("")
			pool, ok := base.Config.PoolFor(ip)
			if !ok || slices.Contains(holders[ip], i) {
				continue
			}
			ads := l2AdsFor(pool, s)
			if len(ads) == 0 || (s.SharingKey != "" && slices.ContainsFunc(ads, func(ad *config.L2Advertisement) bool { return len(ad.ServiceSelectors) > 0 })) {
				continue
			}
			holders[ip] = append(holders[ip], i)
		}
	}
	ips := slices.SortedFunc(maps.Keys(holders), netip.Addr.Compare)
	out := make([]Ballot, 0, len(ips))
	for _, ip := range ips {
		hs := holders[ip]
		slices.SortFunc(hs, func(a, b int) int { return cmp.Compare(services[a].Service.Key, services[b].Service.Key) })
		in := base
		in.Service, in.Endpoints = services[hs[0]].Service, services[hs[0]].Endpoints
		in.Sharing = nil
		for _, h := range hs[1:] {
			in.Sharing = append(in.Sharing, services[h])
		}
		pool, _ := in.Config.PoolFor(ip)
		out = append(out, Ballot{IP: ip, Candidates: newEnv(&in).l2Candidates(ip, pool)})
	}
	return out
}

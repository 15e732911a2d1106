package announce

import (
	"maps"
	"net/netip"
	"slices"
)

// BalancedElection is one run of the balanced layer 2 election over every
// Service a speaker knows (ElectBalancedServices): the winners to pass as
// Input.L2Winners, and which Services hold each address, so that the next
// run can say which Services to decide again (Redecide).
type BalancedElection struct {
	// Winners maps each layer 2 address with a candidate (unmapped, no
	// zone) to its elected node: ElectBalanced over L2Ballots.
	Winners map[netip.Addr]string
	// Holders maps every address of every listed Service of our
	// loadBalancerClass (ballot or not: a Service without endpoints, or
	// whose pool has no L2Advertisement, holds its address too) to the
	// keys ("namespace/name") of the Services holding it, sorted.
	Holders map[netip.Addr][]string
	// Capacity is the bound ElectBalanced applied: BalancedCapacity(m, n)
	// of the m addresses with a candidate on the n nodes in some first
	// rank (for explanations).
	Capacity int
}

// ElectBalancedServices runs the balanced election over services, every
// Service the speaker knows with its endpoints: ElectBalanced(L2Ballots(base,
// services)). base supplies Config, Nodes, Live and Options (see
// L2Ballots); every speaker given the same base (apart from Node) and the
// same set of Services, in any order, computes the same Winners, which is
// what lets each one announce only its own addresses without coordination.
// Interfaces are not an input: only a node knows its own, so, as with the
// plain election, a winner without a matching interface reports
// noMatchingInterface and nobody announces the address. The error is
// ElectBalanced's (one address twice), not reachable from L2Ballots.
// Cost: L2Ballots' plus ElectBalanced's (about 50 ms for 1,000 addresses on
// 100 nodes on a 2-CPU machine, docs/performance.md).
func ElectBalancedServices(base Input, services []SharedService) (BalancedElection, error) {
	w, capacity, err := electBalanced(L2Ballots(base, services))
	if err != nil {
		return BalancedElection{}, err
	}
	holders := map[netip.Addr][]string{}
	for i := range services {
		s := &services[i].Service
		if !s.LoadBalancer || s.LoadBalancerClass != base.Options.LoadBalancerClass {
			continue
		}
		for _, raw := range s.IPs {
			ip := raw.Unmap().WithZone("")
			if !slices.Contains(holders[ip], s.Key) {
				holders[ip] = append(holders[ip], s.Key)
			}
		}
	}
	for _, hs := range holders {
		slices.Sort(hs)
	}
	return BalancedElection{Winners: w, Holders: holders, Capacity: capacity}, nil
}

// WinnerChanges returns the addresses whose winner differs between before and
// after: elected in one and not the other, or to different nodes; in address
// order. nil maps are empty.
func WinnerChanges(before, after map[netip.Addr]string) []netip.Addr {
	var out []netip.Addr
	for ip, w := range before {
		if nw, ok := after[ip]; !ok || nw != w {
			out = append(out, ip)
		}
	}
	for ip := range after {
		if _, ok := before[ip]; !ok {
			out = append(out, ip)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// Redecide returns the keys of the Services to decide again when e
// replaces prev (nil: no earlier run): every Service holding, in either
// run, an address whose winner changed (WinnerChanges), sorted. A Service
// whose own inputs changed is not included unless its address moved: the
// caller decides it anyway (it is why the election ran). Services holding
// only addresses whose winner stayed are left alone, so nothing is
// re-announced and no status is rewritten for them.
func (e *BalancedElection) Redecide(prev *BalancedElection) []string {
	var old map[netip.Addr]string
	var oldHolders map[netip.Addr][]string
	if prev != nil {
		old, oldHolders = prev.Winners, prev.Holders
	}
	keys := map[string]bool{}
	for _, ip := range WinnerChanges(old, e.Winners) {
		for _, k := range e.Holders[ip] {
			keys[k] = true
		}
		for _, k := range oldHolders[ip] {
			keys[k] = true
		}
	}
	return slices.Sorted(maps.Keys(keys))
}

// Loads returns how many addresses each node wins in e.
func (e *BalancedElection) Loads() map[string]int {
	out := map[string]int{}
	for _, n := range e.Winners {
		out[n]++
	}
	return out
}

package explain

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/herald-lb/herald/internal/announce"
	"github.com/herald-lb/herald/internal/config"
)

// L2Election is a speaker's layer 2 election, its --l2-election flag
// (speaker/flags.go; a test there keeps the names equal).
type L2Election string

const (
	// L2ElectionPerAddress elects each address on its own (announce.Elect),
	// the speaker's default.
	L2ElectionPerAddress L2Election = "per-address"
	// L2ElectionBalanced elects every layer 2 address at once with bounded
	// loads (announce.ElectBalancedServices, passed as Input.L2Winners).
	L2ElectionBalanced L2Election = "balanced"
	// L2ElectionMetalLB elects every address of a Service on its first
	// address (announce.Options.ElectByServiceFirstIP), as MetalLB does;
	// also implied by --ml-key-derivation=metallb.
	L2ElectionMetalLB L2Election = "metallb"
)

// ErrElectionRefused: the speaker refuses its election flags and exits at
// start (ElectionFromFlags' errors wrap it).
var ErrElectionRefused = errors.New("the speaker refuses its layer 2 election flags")

// ElectionFromFlags returns the election a speaker runs with the given
// values of --l2-election and --ml-key-derivation ("" when the flag is
// not given), with the speaker's own rules (speaker/flags.go complete and
// announceOptions): the default is per-address; --ml-key-derivation=metallb
// implies metallb. The error (wrapping ErrElectionRefused) is the case the
// speaker refuses, and then does not start: an unknown --l2-election, or
// balanced with --ml-key-derivation=metallb.
func ElectionFromFlags(l2Election, keyDerivation string) (L2Election, error) {
	e := L2Election(cmp.Or(l2Election, string(L2ElectionPerAddress)))
	switch e {
	case L2ElectionPerAddress, L2ElectionMetalLB:
	case L2ElectionBalanced:
		if keyDerivation == "metallb" {
			return "", fmt.Errorf("%w: --l2-election=balanced with --ml-key-derivation=metallb (which implies --l2-election=metallb)", ErrElectionRefused)
		}
	default:
		return "", fmt.Errorf("%w: --l2-election=%q is not per-address, balanced or metallb", ErrElectionRefused, l2Election)
	}
	if keyDerivation == "metallb" {
		return L2ElectionMetalLB, nil
	}
	return e, nil
}

// SpeakerElection is the layer 2 election one speaker Pod runs, read from
// its arguments by the caller (ElectionFromFlags).
type SpeakerElection struct {
	Pod  string `json:"pod"`
	Node string `json:"node"`
	// Election is "" when Error is set.
	Election L2Election `json:"election,omitempty"`
	// Error: the speaker refuses its flags (it exits at start).
	Error string `json:"error,omitempty"`
}

// elections is the view's knowledge of the speakers' layer 2 elections.
type elections struct {
	// byNode is the election of the speaker on each node that runs one
	// (the live Pod's when a node has two, as during a rollout).
	byNode map[string]L2Election
	// common is the election of most speakers (ties: per-address first,
	// then balanced, then metallb), used for nodes without a speaker.
	common L2Election
	// kinds lists each election run, with its Pods.
	kinds map[L2Election][]string
	// refused are the Pods whose flags the speaker refuses.
	refused []SpeakerElection

	// balanced is the balanced election's result, computed once (the
	// layer 2 part of the configuration is the same in every node's
	// snapshot: only BGP objects have node selectors).
	balanced    *announce.BalancedElection
	balancedErr error
	balancedRun bool
}

func newElections(c *Cluster) *elections {
	e := &elections{byNode: map[string]L2Election{}, kinds: map[L2Election][]string{}}
	live := LiveFromPods(c.SpeakerPods)
	podLive := map[string]bool{}
	for i := range c.SpeakerPods {
		p := &c.SpeakerPods[i]
		podLive[p.Name] = live[p.Spec.NodeName] && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(p)
	}
	chosen := map[string]string{} // node -> Pod whose election counts
	for _, s := range c.Elections {
		if s.Error != "" {
			e.refused = append(e.refused, s)
			continue
		}
		e.kinds[s.Election] = append(e.kinds[s.Election], s.Pod)
		if prev, ok := chosen[s.Node]; ok && podLive[prev] && !podLive[s.Pod] {
			continue
		}
		chosen[s.Node] = s.Pod
		e.byNode[s.Node] = s.Election
	}
	e.common = L2ElectionPerAddress
	best := 0
	for _, k := range []L2Election{L2ElectionPerAddress, L2ElectionBalanced, L2ElectionMetalLB} {
		if n := len(e.kinds[k]); n > best {
			e.common, best = k, n
		}
		sort.Strings(e.kinds[k])
	}
	return e
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// of returns the election of node's speaker (common without one).
func (e *elections) of(node string) L2Election {
	if k, ok := e.byNode[node]; ok {
		return k
	}
	return e.common
}

// mixed reports whether the speakers run more than one election.
func (e *elections) mixed() bool { return len(e.kinds) > 1 }

// note says which election the report replays and where it comes from.
func (e *elections) note() string {
	if len(e.kinds) == 0 {
		return fmt.Sprintf("layer 2 election: %s (no speaker Pod to read --l2-election from: the speaker's default)", e.common)
	}
	if !e.mixed() {
		return fmt.Sprintf("layer 2 election: %s (%s, read from every speaker Pod's arguments)", e.common, electionFlag(e.common))
	}
	return "layer 2 election: mixed (" + e.kindsText() + "); each node's verdict is computed with its own speaker's election"
}

func (e *elections) kindsText() string {
	var parts []string
	for _, k := range []L2Election{L2ElectionPerAddress, L2ElectionBalanced, L2ElectionMetalLB} {
		if ps := e.kinds[k]; len(ps) > 0 {
			parts = append(parts, fmt.Sprintf("%s: %s", k, strings.Join(ps, ", ")))
		}
	}
	return strings.Join(parts, "; ")
}

// problems are the election facts that make the report fail: mixed
// elections, refused flags.
func (e *elections) problems() []string {
	var out []string
	if e.mixed() {
		out = append(out, "the speakers run different layer 2 elections ("+e.kindsText()+"), as during a rollout that changes --l2-election: they disagree on winners, so an address may be answered by two nodes or by none until every speaker runs the same one")
	}
	for _, r := range e.refused {
		out = append(out, fmt.Sprintf("speaker Pod %s (node %s): %s: it exits at start", r.Pod, r.Node, r.Error))
	}
	return out
}

func electionFlag(k L2Election) string {
	if k == L2ElectionPerAddress {
		return "--l2-election=per-address or unset"
	}
	return "--l2-election=" + string(k)
}

// options returns the decision options of node's speaker.
func (e *elections) options(base announce.Options, node string) announce.Options {
	base.ElectByServiceFirstIP = e.of(node) == L2ElectionMetalLB
	return base
}

// balancedWinners returns the balanced election's winners, computed once
// with snap (a node's snapshot) as every speaker running it computes them
// (internal/k8s/speaker recomputeBalanced): every LoadBalancer Service of
// the speakers' class with an address, with its endpoints, on the view's
// Nodes and live set.
func (v *view) balancedWinners(snap *config.Snapshot) (*announce.BalancedElection, error) {
	e := v.elect
	if e.balancedRun {
		return e.balanced, e.balancedErr
	}
	e.balancedRun = true
	opts := v.c.Options
	opts.ElectByServiceFirstIP = false
	var services []announce.SharedService
	for i := range v.c.Services {
		o := &v.c.Services[i]
		sv := announce.ServiceFromK8s(o)
		if !sv.LoadBalancer || sv.LoadBalancerClass != opts.LoadBalancerClass || len(sv.IPs) == 0 {
			continue
		}
		services = append(services, announce.SharedService{Service: sv, Endpoints: v.endpoints(o.Namespace, o.Name)})
	}
	base := announce.Input{Config: snap, Nodes: v.nodes, Live: v.live, Options: opts}
	be, err := announce.ElectBalancedServices(base, services)
	if err != nil {
		e.balancedErr = err
		return nil, err
	}
	e.balanced = &be
	return e.balanced, nil
}

// balancedWhy says why winner holds ip in the balanced election be:
// ranking is the plain election's (first rank: the entries with the first
// entry's Serves and Preference, in hash order).
func balancedWhy(be *announce.BalancedElection, ip netip.Addr, winner string, ranking []RankEntry) string {
	loads := be.Loads()
	head := fmt.Sprintf("balanced election (--l2-election=balanced): at most %d of the %d layer 2 addresses per node (announce.BalancedCapacity)",
		be.Capacity, len(be.Winners))
	if len(ranking) == 0 {
		return head
	}
	top := ranking[0]
	var ahead []string
	for _, r := range ranking {
		if r.Node == winner {
			break
		}
		if r.Serves == top.Serves && r.Preference == top.Preference {
			ahead = append(ahead, fmt.Sprintf("%s (%d)", r.Node, loads[r.Node]))
		}
	}
	var why string
	switch {
	case len(ahead) == 0 && len(ranking) == 1:
		why = fmt.Sprintf("%s is the only candidate", winner)
	case len(ahead) == 0:
		why = fmt.Sprintf("%s is the first of the first rank (equal serves and preference) in hash order and had room", winner)
	default:
		why = fmt.Sprintf("the nodes ahead of %s in the first rank's hash order, %s, were full when %s was placed (addresses with the fewest candidates first, then address order); %s holds %d",
			winner, strings.Join(ahead, ", "), ip, winner, loads[winner])
	}
	return head + "; " + why + "; loads now: " + loadsText(loads)
}

func loadsText(loads map[string]int) string {
	names := make([]string, 0, len(loads))
	for n := range loads {
		names = append(names, n)
	}
	slices.Sort(names)
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s=%d", n, loads[n]))
	}
	return strings.Join(parts, ", ")
}

package announce

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/herald-lb/herald/internal/config"
)

// decideL2 decides layer 2 for one IP of the Service. Order of checks:
//
//  1. Some L2Advertisement of the pool covers the Service (serviceSelectors),
//     else noMatchingAdvertisement.
//  2. A Service with allow-shared-ip must not match an advertisement with
//     serviceSelectors, else sharedIPWithServiceSelector.
//  3. One of those advertisements selects this node, else
//     noMatchingAdvertisement.
//  4. This node is not NetworkUnavailable or excluded, has a serving
//     endpoint when the Service is Local, and the Service has one somewhere.
//  5. This node's speaker is live, else notOwner.
//  6. This node wins the election for the IP (see Elect, or
//     Input.L2Winners for the balanced election), else notOwner.
//  7. When Input.Interfaces is known, one of the interfaces the
//     advertisements selecting this node name (every interface when one
//     names none) answers for the IP's family here, else
//     noMatchingInterface (Winner is this node: nobody announces the IP).
func (e *env) decideL2(ip netip.Addr, pool *config.Pool) L2Decision {
	svc := &e.in.Service
	ads := l2AdsFor(pool, svc)
	if len(ads) == 0 {
		return L2Decision{Reason: ReasonNoMatchingAdvertisement,
			Detail: fmt.Sprintf("no L2Advertisement of pool %s covers the Service", pool.Name)}
	}
	if svc.SharingKey != "" {
		for _, ad := range ads {
			if len(ad.ServiceSelectors) > 0 {
				return L2Decision{Reason: ReasonSharedIPWithServiceSelector,
					Detail: fmt.Sprintf("the Service allows IP sharing and L2Advertisement %s has serviceSelectors", ad.Name)}
			}
		}
	}
	if e.self != nil && !slices.ContainsFunc(ads, func(ad *config.L2Advertisement) bool { return ad.MatchesNode(e.self.Labels) }) {
		return L2Decision{Reason: ReasonNoMatchingAdvertisement,
			Detail: fmt.Sprintf("no L2Advertisement of pool %s covering the Service selects node %s", pool.Name, e.in.Node)}
	}
	if r, detail := e.checkSelfAndEndpoints(); r != ReasonNone {
		return L2Decision{Reason: r, Detail: detail}
	}
	if !e.live(e.in.Node) {
		return L2Decision{Reason: ReasonNotOwner, Detail: fmt.Sprintf("the speaker on node %s is not live", e.in.Node)}
	}
	ballot := e.ballotIP(ip)
	ranked := e.electL2(ballot, pool)
	if w, ok := e.in.L2Winners[ballot]; ok && slices.Contains(ranked, w) {
		ranked = append([]string{w}, slices.DeleteFunc(ranked, func(n string) bool { return n == w })...)
	}
	if len(ranked) == 0 || ranked[0] != e.in.Node {
		// Unreachable with consistent input (this node passed every
		// candidate rule), but Elect is the authority.
		d := L2Decision{Reason: ReasonNotOwner}
		if len(ranked) > 0 {
			d.Winner = ranked[0]
			d.Detail = fmt.Sprintf("node %s won the election for %s", ranked[0], ip)
		} else {
			d.Detail = fmt.Sprintf("no candidate node for %s", ip)
		}
		return d
	}
	ifaces := l2Interfaces(ads, e.self)
	if detail, ok := e.checkInterfaces(ip, ads, ifaces); !ok {
		return L2Decision{Reason: ReasonNoMatchingInterface, Winner: e.in.Node, Detail: detail}
	}
	return L2Decision{Announce: true, Winner: e.in.Node, Interfaces: ifaces}
}

// checkInterfaces reports whether this node can answer for ip on one of
// want (nil: any interface), given Input.Interfaces (nil: unknown, true).
// When it cannot, detail names the advertisements selecting this node with
// the interfaces they name, and the node's interfaces for ip's family.
func (e *env) checkInterfaces(ip netip.Addr, ads []*config.L2Advertisement, want []string) (detail string, ok bool) {
	if e.in.Interfaces == nil {
		return "", true
	}
	have := e.in.Interfaces.For(ip)
	proto := "ARP"
	if !ip.Is4() {
		proto = "NDP"
	}
	haveText := "none"
	if len(have) > 0 {
		haveText = strings.Join(have, ", ")
	}
	if want == nil {
		if len(have) > 0 {
			return "", true
		}
		return fmt.Sprintf("node %s won the election for %s but has no interface answering %s (its interfaces answering %s: none)",
			e.in.Node, ip, proto, proto), false
	}
	if slices.ContainsFunc(want, func(name string) bool { return slices.Contains(have, name) }) {
		return "", true
	}
	var named []string
	for _, ad := range ads {
		if ad.MatchesNode(e.self.Labels) {
			named = append(named, fmt.Sprintf("L2Advertisement %s (interfaces %s)", ad.Name, strings.Join(ad.Interfaces, ", ")))
		}
	}
	return fmt.Sprintf("node %s won the election for %s but has none of the interfaces of %s (its interfaces answering %s: %s)",
		e.in.Node, ip, strings.Join(named, ", "), proto, haveText), false
}

// ballotIP is the address whose election decides ip: ip itself, or with
// Options.ElectByServiceFirstIP the Service's first address (MetalLB's
// speaker elects on toAnnounce[0], the first ingress IP, for every address
// of the Service).
func (e *env) ballotIP(ip netip.Addr) netip.Addr {
	if e.in.Options.ElectByServiceFirstIP && len(e.in.Service.IPs) > 0 {
		return e.in.Service.IPs[0].Unmap().WithZone("")
	}
	return ip
}

// BallotIP returns the address whose layer 2 election decides ip for
// in.Service: ip itself (unmapped, no zone), or with
// Options.ElectByServiceFirstIP (--l2-election=metallb) the Service's
// first address. ElectionHash and L2Candidates' ranking are of this
// address. For explanations; Decide applies it itself.
func BallotIP(in Input, ip netip.Addr) netip.Addr {
	return newEnv(&in).ballotIP(ip.Unmap().WithZone(""))
}

// l2AdsFor returns the pool's L2 advertisements covering svc.
func l2AdsFor(pool *config.Pool, svc *Service) []*config.L2Advertisement {
	var out []*config.L2Advertisement
	for _, ad := range pool.L2Advertisements {
		if ad.MatchesService(svc.Labels) {
			out = append(out, ad)
		}
	}
	return out
}

// l2Interfaces is the union of the interfaces of the advertisements
// selecting node; nil (every interface) if one of them names none.
func l2Interfaces(ads []*config.L2Advertisement, node *Node) []string {
	var out []string
	for _, ad := range ads {
		if !ad.MatchesNode(node.Labels) {
			continue
		}
		if len(ad.Interfaces) == 0 {
			return nil
		}
		out = append(out, ad.Interfaces...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// member is one Service taking part in the election of a (shared) IP.
type member struct {
	svc *Service
	eps []Endpoint
	ads []*config.L2Advertisement
}

// electL2 returns the ranked candidates for ip (winner first).
func (e *env) electL2(ip netip.Addr, pool *config.Pool) []string {
	return Elect(ip, e.l2Candidates(ip, pool))
}

// l2Candidates returns the candidates of the election for ip, unranked. The
// members are the decided Service and every Input.Sharing Service holding
// ip that would itself be announced in layer 2 somewhere (LoadBalancer of
// our class, covered by an advertisement, not refused for allow-shared-ip
// with serviceSelectors, with a serving endpoint).
func (e *env) l2Candidates(ip netip.Addr, pool *config.Pool) []Candidate {
	members := []member{{svc: &e.in.Service, eps: e.in.Endpoints, ads: l2AdsFor(pool, &e.in.Service)}}
	for i := range e.in.Sharing {
		sh := &e.in.Sharing[i]
		s := &sh.Service
		if s.Key == e.in.Service.Key || !s.LoadBalancer || s.LoadBalancerClass != e.in.Options.LoadBalancerClass ||
			!slices.ContainsFunc(s.IPs, func(a netip.Addr) bool { return a.Unmap().WithZone("") == ip }) ||
			!hasServingEndpoint(sh.Endpoints, "") {
			continue
		}
		ads := l2AdsFor(pool, s)
		if len(ads) == 0 || (s.SharingKey != "" && slices.ContainsFunc(ads, func(ad *config.L2Advertisement) bool { return len(ad.ServiceSelectors) > 0 })) {
			continue
		}
		members = append(members, member{svc: s, eps: sh.Endpoints, ads: ads})
	}
	cands := make([]Candidate, 0, len(e.in.Nodes))
	for i := range e.in.Nodes {
		n := &e.in.Nodes[i]
		if !e.live(n.Name) {
			continue
		}
		if r, _ := e.excluded(n); r != ReasonNone {
			continue
		}
		c := Candidate{Node: n.Name}
		seen := map[string]bool{}
		for _, m := range members {
			eligible := false
			for _, ad := range m.ads {
				if !ad.MatchesNode(n.Labels) {
					continue
				}
				eligible = true
				if !seen[ad.Name] {
					seen[ad.Name] = true
					c.Preference += ad.Preference(n.Labels)
				}
			}
			if eligible && (!m.svc.Local() || hasServingEndpoint(m.eps, n.Name)) {
				c.Serves++
			}
		}
		if c.Serves > 0 {
			cands = append(cands, c)
		}
	}
	return cands
}

// L2Candidates returns the candidates of the layer 2 election for ip
// exactly as Decide runs it, ranked winner first (the order of Elect): the
// live, not excluded nodes that can serve at least one of the Services
// holding ip, with their Serves and Preference. in.Node does not matter.
// It returns nil when ip lies in no pool of in.Config or the election
// would not run for in.Service (see Decide): also when in.Service has no
// serving endpoint anywhere (every node refuses it with noEndpoints before
// the election). With Options.ElectByServiceFirstIP the election is the
// one of BallotIP(in, ip), the Service's first address, as Decide runs it
// (candidates and hash of that address, ip's pool). It is for explanations
// (kubectl herald why): the speaker itself calls Decide.
func L2Candidates(in Input, ip netip.Addr) []Candidate {
	pool, ok := in.Config.PoolFor(ip)
	if !ok || !hasServingEndpoint(in.Endpoints, "") {
		return nil
	}
	e := newEnv(&in)
	ballot := e.ballotIP(ip.Unmap().WithZone(""))
	cands := e.l2Candidates(ballot, pool)
	ranked := Elect(ballot, cands)
	byName := make(map[string]Candidate, len(cands))
	for _, c := range cands {
		byName[c.Node] = c
	}
	out := make([]Candidate, len(ranked))
	for i, n := range ranked {
		out[i] = byName[n]
	}
	return out
}

// ElectionHash returns the rendezvous hash Elect ranks equal candidates by:
// SHA-256 of node + "#" + ip.String(); the lowest wins.
func ElectionHash(node string, ip netip.Addr) [sha256.Size]byte {
	return sha256.Sum256([]byte(node + "#" + ip.String()))
}

// Candidate is one node in a layer 2 election.
type Candidate struct {
	Node string
	// Serves is how many of the Services holding the IP the node can serve
	// (1 for an unshared IP); higher ranks first.
	Serves int
	// Preference is the preferredNodeSelectors score; higher ranks first.
	Preference int
}

// Elect ranks the candidates for ip and returns their node names, winner
// first: Serves descending, Preference descending, then
// SHA-256(node + "#" + ip.String()) ascending (rendezvous hashing: each
// node's rank for an IP is independent of the other nodes, so removing a
// non-winner never changes the winner). Candidates are not modified.
func Elect(ip netip.Addr, cands []Candidate) []string {
	rs := rank(ip, cands)
	out := make([]string, len(rs))
	for i := range rs {
		out[i] = rs[i].Node
	}
	return out
}

// rankedCandidate is a Candidate with its ElectionHash.
type rankedCandidate struct {
	Candidate
	h [sha256.Size]byte
}

// rank returns cands in Elect's order, a new slice.
func rank(ip netip.Addr, cands []Candidate) []rankedCandidate {
	rs := make([]rankedCandidate, len(cands))
	for i, c := range cands {
		rs[i] = rankedCandidate{Candidate: c, h: ElectionHash(c.Node, ip)}
	}
	slices.SortFunc(rs, func(a, b rankedCandidate) int {
		return cmp.Or(
			cmp.Compare(b.Serves, a.Serves),
			cmp.Compare(b.Preference, a.Preference),
			bytes.Compare(a.h[:], b.h[:]),
			cmp.Compare(a.Node, b.Node),
		)
	})
	return rs
}

package announce

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"fmt"
	"net/netip"
	"slices"

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
//  6. This node wins the election for the IP (see Elect), else notOwner.
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
	ranked := e.electL2(e.ballotIP(ip), pool)
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
	return L2Decision{Announce: true, Winner: e.in.Node, Interfaces: l2Interfaces(ads, e.self)}
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

// electL2 returns the ranked candidates for ip (winner first). The members
// are the decided Service and every Input.Sharing Service holding ip that
// would itself be announced in layer 2 somewhere (LoadBalancer of our class,
// covered by an advertisement, not refused for allow-shared-ip with
// serviceSelectors, with a serving endpoint).
func (e *env) electL2(ip netip.Addr, pool *config.Pool) []string {
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
	return Elect(ip, cands)
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
	type ranked struct {
		Candidate
		h [sha256.Size]byte
	}
	rs := make([]ranked, len(cands))
	suffix := "#" + ip.String()
	for i, c := range cands {
		rs[i] = ranked{Candidate: c, h: sha256.Sum256([]byte(c.Node + suffix))}
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		return cmp.Or(
			cmp.Compare(b.Serves, a.Serves),
			cmp.Compare(b.Preference, a.Preference),
			bytes.Compare(a.h[:], b.h[:]),
			cmp.Compare(a.Node, b.Node),
		)
	})
	out := make([]string, len(rs))
	for i := range rs {
		out[i] = rs[i].Node
	}
	return out
}

package announce

import (
	"fmt"
	"net/netip"
	"slices"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/herald-lb/herald/internal/bgp"
	"github.com/herald-lb/herald/internal/config"
)

// decideBGP decides BGP for one IP of the Service. Order of checks:
//
//  1. Some BGPAdvertisement of the pool covers the Service
//     (serviceSelectors) and this node (nodeSelectors), else
//     noMatchingAdvertisement.
//  2. This node is not NetworkUnavailable or excluded; externalTrafficPolicy
//     Local needs a serving endpoint on this node, Cluster one anywhere.
//  3. No two matching advertisements set different LOCAL_PREF for the same
//     prefix and peers (config.LocalPrefCompatible; both select this node,
//     so their node sets overlap), else conflictingAdvertisements.
//
// Then one path per matching advertisement (see bgpPath). There is no
// election and no liveness check: every eligible node announces and the
// routers spread the traffic (ECMP). With externalTrafficPolicy Local, the
// paths of advertisements annotated herald.io/weighted-ecmp carry this
// node's LocalWeight, so that a router doing weighted ECMP spreads by
// endpoints instead of by nodes; Cluster Services never do (every node
// forwards to every endpoint, an equal spread is right).
func (e *env) decideBGP(ip netip.Addr, pool *config.Pool) BGPDecision {
	svc := &e.in.Service
	var ads []*config.BGPAdvertisement
	coversService := false
	for _, ad := range pool.BGPAdvertisements {
		if !ad.MatchesService(svc.Labels) {
			continue
		}
		coversService = true
		if e.self != nil && ad.MatchesNode(e.self.Labels) {
			ads = append(ads, ad)
		}
	}
	switch {
	case !coversService:
		return BGPDecision{Reason: ReasonNoMatchingAdvertisement,
			Detail: fmt.Sprintf("no BGPAdvertisement of pool %s covers the Service", pool.Name)}
	case len(ads) == 0 && e.self != nil:
		return BGPDecision{Reason: ReasonNoMatchingAdvertisement,
			Detail: fmt.Sprintf("no BGPAdvertisement of pool %s covering the Service selects node %s", pool.Name, e.in.Node)}
	}
	if r, detail := e.checkSelfAndEndpoints(); r != ReasonNone {
		return BGPDecision{Reason: r, Detail: detail}
	}
	overlap := func(a, b []labels.Selector) bool { return true }
	for i, a := range ads {
		for _, b := range ads[i+1:] {
			if !config.LocalPrefCompatible(a, b, pool, overlap) {
				return BGPDecision{Reason: ReasonConflictingAdvertisements,
					Detail: fmt.Sprintf("BGPAdvertisements %s (localPref %d) and %s (localPref %d) both cover the Service on node %s",
						a.Name, a.LocalPref, b.Name, b.LocalPref, e.in.Node)}
			}
		}
	}
	var peers []bgp.PeerConfig
	for _, p := range e.in.Config.PeersForNode(e.self.Labels) {
		peers = append(peers, session(p, netip.Addr{}))
	}
	d := BGPDecision{Announce: true}
	weight := uint32(0)
	if svc.Local() && slices.ContainsFunc(ads, func(ad *config.BGPAdvertisement) bool { return ad.WeightedECMP }) {
		weight = LocalWeight(e.in.Endpoints, e.in.Node, ip)
	}
	for _, ad := range ads {
		p, to := bgpPath(ip, ad, peers)
		if ad.WeightedECMP && weight > 0 {
			p.Weight, p.WeightSource = weight, svc.Key
			d.Weight = weight
		}
		d.Paths = append(d.Paths, p)
		d.Advertisements = append(d.Advertisements, ad.Name)
		d.Peers = append(d.Peers, to...)
	}
	slices.Sort(d.Peers)
	d.Peers = slices.Compact(d.Peers)
	return d
}

// bgpPath builds the path one advertisement asks for, and the names of the
// given peers (this node's sessions) that receive it (bgp.PeerConfig.Receives:
// the path is for them, their session carries its family, and a restricted
// path is not sent on unnumbered sessions):
//
//   - Prefix: ip masked to aggregationLength (IPv4) or aggregationLengthV6.
//   - Communities (RFC 1997) and LargeCommunities (RFC 8092), sorted.
//   - LocalPref (RFC 4271 §5.1.5): set when the advertisement's localPref is
//     non-zero and at least one receiving peer is iBGP. 0 means "not
//     configured" (as in MetalLB's FRR modes), so gobgp's default applies.
//     A path going to iBGP and eBGP peers keeps it: the BGP implementation
//     never sends LOCAL_PREF to eBGP peers (internal/bgp/gobgp strips it).
//   - Peers: the advertisement's peers list (nil: every peer).
func bgpPath(ip netip.Addr, ad *config.BGPAdvertisement, peers []bgp.PeerConfig) (bgp.Path, []string) {
	p := bgp.Path{Prefix: ad.Prefix(ip), Peers: slices.Clone(ad.Peers)}
	for _, c := range ad.Communities {
		if c.Large {
			p.LargeCommunities = append(p.LargeCommunities, [3]uint32{c.A, c.B, c.C})
		} else {
			p.Communities = append(p.Communities, c.Standard())
		}
	}
	slices.Sort(p.Communities)
	var to []string
	ibgp := false
	for _, peer := range peers {
		if peer.Receives(p) {
			to = append(to, peer.Name)
			ibgp = ibgp || peer.IsIBGP()
		}
	}
	if ad.LocalPref != 0 && ibgp {
		lp := ad.LocalPref
		p.LocalPref = &lp
	}
	return p, to
}

// LocalWeight is the weight of node for ip in weighted ECMP: the number of
// endpoints on node that are ready, of ip's address family, each target
// (Endpoint.Target) once; when none is ready, the serving (terminating)
// ones, the endpoints kube-proxy then sends the node's traffic to. When
// the Service has no endpoint of ip's family at all (FQDN slices, or
// Endpoints built without Family), every family counts. The result is capped
// at bgp.MaxWeight; 0 means node has no endpoint that can serve (such a
// node does not announce a Local Service).
func LocalWeight(eps []Endpoint, node string, ip netip.Addr) uint32 {
	family := uint8(6)
	if ip.Is4() || ip.Is4In6() {
		family = 4
	}
	anyOfFamily := slices.ContainsFunc(eps, func(ep Endpoint) bool { return ep.Family == family })
	var ready, serving uint32
	seen := map[Target]bool{}
	for _, ep := range eps {
		if ep.NodeName != node || !ep.CanServe() || (anyOfFamily && ep.Family != family) {
			continue
		}
		if ep.Target != (Target{}) {
			if seen[ep.Target] {
				continue
			}
			seen[ep.Target] = true
		}
		if ep.Ready {
			ready++
		} else {
			serving++
		}
	}
	if ready == 0 {
		ready = serving
	}
	return min(ready, bgp.MaxWeight)
}

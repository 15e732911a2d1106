package gobgp

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	api "github.com/osrg/gobgp/v3/api"

	"github.com/herald-lb/herald/internal/bgp"
)

// Per-peer path restriction.
//
// gobgp keeps one global RIB and, for peers that are not route-server
// clients, evaluates one global export policy (per-neighbor policy
// assignment is refused: "non-rs-client peer ... doesn't have per peer
// policy"). Restriction therefore works with markers carried on the path:
//
//   - A path restricted to peers {a, b} carries the large communities
//     R:id(a):0 and R:id(b):0, R = ReservedLargeCommunityASN (RFC 7300) and
//     id = markerID(name). Unrestricted paths carry no marker.
//   - The global export policy "herald-export" has the statements
//     1. no marker on the path                        -> accept
//     2. per peer P: neighbor == P and marker id(P)   -> strip all markers, accept
//     and the global export default action is REJECT.
//
// Markers never leave the speaker: the only accepting statement for a
// marked path removes every marker first. Because a path's markers are part
// of the path, changing a path's peer list is a plain re-announcement: gobgp
// evaluates the old path against the (unchanged) policy and sends a
// withdrawal to the peers that lose it. The policy itself changes only when
// the peer set changes.
//
// Import: gobgp applies the global import policy to locally originated
// paths too, so "herald-import" accepts only local paths (as Cilium does)
// and the default action is REJECT: nothing a peer sends is kept.

const (
	importPolicyName = "herald-import"
	exportPolicyName = "herald-export"
	anyMarkerSetName = "herald-marker-any"
	allIPv4SetName   = "herald-all-ipv4"
	allIPv6SetName   = "herald-all-ipv6"
)

// anyMarkerRegexp matches every marker large community (gobgp matches the
// "a:b:c" string form).
var anyMarkerRegexp = fmt.Sprintf("^%d:[0-9]+:[0-9]+$", uint32(bgp.ReservedLargeCommunityASN))

func markerSetName(id uint32) string   { return fmt.Sprintf("herald-marker-%d", id) }
func neighborSetName(id uint32) string { return fmt.Sprintf("herald-neighbor-%d", id) }

// exportPolicy builds the definitions for the given peers (sorted by name
// for determinism). Interface (unnumbered) peers have no address for a
// neighbor set: they receive only unrestricted paths.
func exportPolicy(peers []bgp.PeerConfig) *api.SetPoliciesRequest {
	peers = slices.Clone(peers)
	slices.SortFunc(peers, func(a, b bgp.PeerConfig) int { return strings.Compare(a.Name, b.Name) })
	req := &api.SetPoliciesRequest{
		DefinedSets: []*api.DefinedSet{{
			DefinedType: api.DefinedType_LARGE_COMMUNITY,
			Name:        anyMarkerSetName,
			List:        []string{anyMarkerRegexp},
		}},
	}
	// A dual-stack session negotiates both families (RFC 4760) but gets
	// paths of its own family only: gobgp would give an IPv6 path sent
	// over an IPv4 session the session's IPv4 address as next hop
	// (::ffff:a.b.c.d, which routers do not install; seen against FRR), and
	// an IPv4 path over an IPv6 session an IPv6 next hop (RFC 8950, not
	// negotiated). These statements come first and reject.
	var stmts []*api.Statement
	for _, p := range peers {
		if !p.DualStack || !p.Address.IsValid() {
			continue
		}
		id := markerID(p.Name)
		other := allIPv6SetName
		if !p.Address.Is4() {
			other = allIPv4SetName
		}
		stmts = append(stmts, &api.Statement{
			Name: fmt.Sprintf("herald-own-family-%d", id),
			Conditions: &api.Conditions{
				NeighborSet: &api.MatchSet{Type: api.MatchSet_ANY, Name: neighborSetName(id)},
				PrefixSet:   &api.MatchSet{Type: api.MatchSet_ANY, Name: other},
			},
			Actions: &api.Actions{RouteAction: api.RouteAction_REJECT},
		})
	}
	req.DefinedSets = append(req.DefinedSets,
		&api.DefinedSet{DefinedType: api.DefinedType_PREFIX, Name: allIPv4SetName,
			Prefixes: []*api.Prefix{{IpPrefix: "0.0.0.0/0", MaskLengthMin: 0, MaskLengthMax: 32}}},
		&api.DefinedSet{DefinedType: api.DefinedType_PREFIX, Name: allIPv6SetName,
			Prefixes: []*api.Prefix{{IpPrefix: "::/0", MaskLengthMin: 0, MaskLengthMax: 128}}})
	stmts = append(stmts, &api.Statement{
		Name: "herald-unrestricted",
		Conditions: &api.Conditions{LargeCommunitySet: &api.MatchSet{
			Type: api.MatchSet_INVERT, Name: anyMarkerSetName,
		}},
		Actions: &api.Actions{RouteAction: api.RouteAction_ACCEPT},
	})
	for _, p := range peers {
		if !p.Address.IsValid() {
			continue
		}
		id := markerID(p.Name)
		req.DefinedSets = append(req.DefinedSets,
			&api.DefinedSet{
				DefinedType: api.DefinedType_LARGE_COMMUNITY,
				Name:        markerSetName(id),
				List:        []string{fmt.Sprintf("%d:%d:0", uint32(bgp.ReservedLargeCommunityASN), id)},
			},
			&api.DefinedSet{
				DefinedType: api.DefinedType_NEIGHBOR,
				Name:        neighborSetName(id),
				List:        []string{netip.PrefixFrom(p.Address, p.Address.BitLen()).String()},
			})
		stmts = append(stmts, &api.Statement{
			Name: fmt.Sprintf("herald-peer-%d", id),
			Conditions: &api.Conditions{
				NeighborSet:       &api.MatchSet{Type: api.MatchSet_ANY, Name: neighborSetName(id)},
				LargeCommunitySet: &api.MatchSet{Type: api.MatchSet_ANY, Name: markerSetName(id)},
			},
			Actions: &api.Actions{
				LargeCommunity: &api.CommunityAction{Type: api.CommunityAction_REMOVE, Communities: []string{anyMarkerRegexp}},
				RouteAction:    api.RouteAction_ACCEPT,
			},
		})
	}
	req.Policies = []*api.Policy{
		{Name: importPolicyName, Statements: []*api.Statement{{
			Name:       "herald-local-only",
			Conditions: &api.Conditions{RouteType: api.Conditions_ROUTE_TYPE_LOCAL},
			Actions:    &api.Actions{RouteAction: api.RouteAction_ACCEPT},
		}}},
		{Name: exportPolicyName, Statements: stmts},
	}
	return req
}

// assignments are set once after StartBgp; SetPolicies keeps them by name.
func assignments() []*api.PolicyAssignment {
	return []*api.PolicyAssignment{
		{
			Name: "global", Direction: api.PolicyDirection_IMPORT, DefaultAction: api.RouteAction_REJECT,
			Policies: []*api.Policy{{Name: importPolicyName}},
		},
		{
			Name: "global", Direction: api.PolicyDirection_EXPORT, DefaultAction: api.RouteAction_REJECT,
			Policies: []*api.Policy{{Name: exportPolicyName}},
		},
	}
}

// checkMarkerCollisions rejects two peer names with the same markerID.
func checkMarkerCollisions(peers []bgp.PeerConfig) error {
	seen := make(map[uint32]string, len(peers))
	for _, p := range peers {
		id := markerID(p.Name)
		if other, ok := seen[id]; ok {
			return fmt.Errorf("peers %q and %q: marker hash collision, rename one: %w", other, p.Name, bgp.ErrUnsupported)
		}
		seen[id] = p.Name
	}
	return nil
}

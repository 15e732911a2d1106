package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/annotations"
)

// L2Advertisement is one parsed L2Advertisement. Read-only.
type L2Advertisement struct {
	Name string
	// Pools are the names of the selected pools, sorted.
	Pools []string
	// NodeSelectors: nodes allowed to announce; empty means every node.
	NodeSelectors []labels.Selector
	// ServiceSelectors: Services covered; empty means every Service.
	ServiceSelectors []labels.Selector
	// PreferredNodes: soft preferences for the L2 election; the weights of
	// all matching entries add up (see Preference).
	PreferredNodes []PreferredNode
	// Interfaces to announce on, sorted and unique; empty means every
	// eligible interface.
	Interfaces []string
}

// PreferredNode is one spec.preferredNodeSelectors entry.
type PreferredNode struct {
	Weight   int32 // 1..100
	Selector labels.Selector
}

// MatchesNode reports whether a node with these labels may announce.
func (a *L2Advertisement) MatchesNode(node labels.Labels) bool {
	return matchesAny(a.NodeSelectors, node)
}

// MatchesService reports whether the advertisement covers a Service with
// these labels.
func (a *L2Advertisement) MatchesService(svc labels.Labels) bool {
	return matchesAny(a.ServiceSelectors, svc)
}

// Preference returns the sum of the weights of the preferred node selectors
// matching node (0 if none).
func (a *L2Advertisement) Preference(node labels.Labels) int {
	n := 0
	for _, p := range a.PreferredNodes {
		if p.Selector.Matches(node) {
			n += int(p.Weight)
		}
	}
	return n
}

// BGPAdvertisement is one parsed BGPAdvertisement. Read-only.
type BGPAdvertisement struct {
	Name  string
	Pools []string // names of the selected pools, sorted
	// AggregationLength is the IPv4 prefix length announced for each
	// Service IP (1..32, default 32); AggregationLengthV6 likewise (1..128,
	// default 128).
	AggregationLength   int
	AggregationLengthV6 int
	// LocalPref is the LOCAL_PREF attribute (RFC 4271 §5.1.5), sent to iBGP
	// peers only.
	LocalPref uint32
	// Communities, aliases resolved, sorted (standard before large) and
	// unique.
	Communities []Community
	// Peers names the BGPPeers that receive the prefixes, sorted; empty
	// means every peer.
	Peers            []string
	NodeSelectors    []labels.Selector
	ServiceSelectors []labels.Selector
	// WeightedECMP is the annotation herald.io/weighted-ecmp: "true"
	// (Herald only, MetalLB has no such field): the paths of
	// externalTrafficPolicy Local Services carry the link bandwidth
	// extended community weighted by this node's local endpoints (see
	// internal/announce).
	WeightedECMP bool

	// unresolved holds alias names skipped under Options.IgnoreTransient,
	// so two advertisements differing only in them are not duplicates.
	unresolved []string
}

// MatchesNode reports whether a node with these labels announces.
func (a *BGPAdvertisement) MatchesNode(node labels.Labels) bool {
	return matchesAny(a.NodeSelectors, node)
}

// MatchesService reports whether the advertisement covers a Service.
func (a *BGPAdvertisement) MatchesService(svc labels.Labels) bool {
	return matchesAny(a.ServiceSelectors, svc)
}

// AppliesToPeer reports whether the prefixes go to the BGPPeer named peer.
func (a *BGPAdvertisement) AppliesToPeer(peer string) bool {
	if len(a.Peers) == 0 {
		return true
	}
	_, ok := slices.BinarySearch(a.Peers, peer)
	return ok
}

// Prefix returns the prefix announced for a Service IP: ip masked to the
// aggregation length of its family.
func (a *BGPAdvertisement) Prefix(ip netip.Addr) netip.Prefix {
	bits := a.AggregationLength
	if ip.Is6() {
		bits = a.AggregationLengthV6
	}
	p, _ := ip.WithZone("").Prefix(bits)
	return p
}

// selectPools resolves spec.ipAddressPools and spec.ipAddressPoolSelectors
// against the parsed pools. Neither set selects every pool. Unknown pool
// names select nothing and raise a warning (the pool may be created later).
func selectPools(ref objRef, names []string, sels []metav1.LabelSelector, pools []*Pool, p *problems) []string {
	selectors := convertSelectors(ref, "spec.ipAddressPoolSelectors", sels, p)
	exists := map[string]bool{}
	for _, pl := range pools {
		exists[pl.Name] = true
	}
	chosen := map[string]bool{}
	seen := map[string]int{}
	for i, name := range names {
		field := fmt.Sprintf("spec.ipAddressPools[%d]", i)
		if j, dup := seen[name]; dup {
			p.add(ref.invalid(field, name, "duplicate of spec.ipAddressPools[%d]", j))
			continue
		}
		seen[name] = i
		if !exists[name] {
			p.warn(ref, field, "no IPAddressPool named %q; the entry selects nothing", name)
			continue
		}
		chosen[name] = true
	}
	all := len(names) == 0 && len(sels) == 0
	for _, pl := range pools {
		if all || (len(selectors) > 0 && matchesAny(selectors, pl.Labels)) {
			chosen[pl.Name] = true
		}
	}
	out := make([]string, 0, len(chosen))
	for name := range chosen {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

func buildL2Advertisement(obj *v1beta1.L2Advertisement, pools []*Pool, p *problems) *L2Advertisement {
	ref := objRef{KindL2Advertisement, obj.Namespace, obj.Name}
	n := len(p.invalid)
	ad := &L2Advertisement{Name: obj.Name}
	ad.Pools = selectPools(ref, obj.Spec.IPAddressPools, obj.Spec.IPAddressPoolSelectors, pools, p)
	ad.NodeSelectors = convertSelectors(ref, "spec.nodeSelectors", obj.Spec.NodeSelectors, p)
	ad.ServiceSelectors = convertSelectors(ref, "spec.serviceSelectors", obj.Spec.ServiceSelectors, p)
	for i := range obj.Spec.PreferredNodeSelectors {
		pn := &obj.Spec.PreferredNodeSelectors[i]
		field := fmt.Sprintf("spec.preferredNodeSelectors[%d]", i)
		if pn.Weight < 1 || pn.Weight > 100 {
			p.add(ref.invalid(field+".weight", fmt.Sprint(pn.Weight), "must be between 1 and 100"))
			continue
		}
		sel, ok := convertSelector(ref, field+".preference", &pn.Preference, p)
		if !ok {
			continue
		}
		ad.PreferredNodes = append(ad.PreferredNodes, PreferredNode{Weight: pn.Weight, Selector: sel})
	}
	for i, ifc := range obj.Spec.Interfaces {
		if strings.TrimSpace(ifc) == "" {
			p.add(ref.invalid(fmt.Sprintf("spec.interfaces[%d]", i), "", "interface name must not be empty"))
		}
	}
	ad.Interfaces = slices.Compact(sortedCopy(obj.Spec.Interfaces))
	if len(p.invalid) != n {
		return nil
	}
	return ad
}

func buildBGPAdvertisement(obj *v1beta1.BGPAdvertisement, pools []*Pool, peerNames map[string]bool, aliases map[string]CommunityAlias, p *problems) *BGPAdvertisement {
	ref := objRef{KindBGPAdvertisement, obj.Namespace, obj.Name}
	n := len(p.invalid)
	ad := &BGPAdvertisement{Name: obj.Name, AggregationLength: 32, AggregationLengthV6: 128, LocalPref: obj.Spec.LocalPref}
	ad.Pools = selectPools(ref, obj.Spec.IPAddressPools, obj.Spec.IPAddressPoolSelectors, pools, p)
	if l := obj.Spec.AggregationLength; l != nil {
		if *l < 1 || *l > 32 {
			p.add(ref.invalid("spec.aggregationLength", fmt.Sprint(*l), "must be between 1 and 32"))
		}
		ad.AggregationLength = int(*l)
	}
	if l := obj.Spec.AggregationLengthV6; l != nil {
		if *l < 1 || *l > 128 {
			p.add(ref.invalid("spec.aggregationLengthV6", fmt.Sprint(*l), "must be between 1 and 128"))
		}
		ad.AggregationLengthV6 = int(*l)
	}
	ad.NodeSelectors = convertSelectors(ref, "spec.nodeSelectors", obj.Spec.NodeSelectors, p)
	ad.ServiceSelectors = convertSelectors(ref, "spec.serviceSelectors", obj.Spec.ServiceSelectors, p)
	if w, err := annotations.Bool(obj.Annotations, annotations.WeightedECMP); err != nil {
		p.add(ref.invalid("metadata.annotations["+annotations.WeightedECMP+"]", obj.Annotations[annotations.WeightedECMP], `must be "true" or "false"`))
	} else {
		ad.WeightedECMP = w
	}
	if len(obj.Spec.ServiceSelectors) > 0 && (ad.AggregationLength != 32 || ad.AggregationLengthV6 != 128) {
		p.add(ref.invalid("spec.serviceSelectors", "", "cannot be combined with a non-default aggregationLength (32) or aggregationLengthV6 (128): an aggregated prefix covers Services the selector does not match"))
	}
	seenComm := map[Community]int{}
	for i, s := range obj.Spec.Communities {
		field := fmt.Sprintf("spec.communities[%d]", i)
		c, transient, err := resolveCommunity(s, aliases)
		switch {
		case transient:
			p.addTransient(ref.transient(KindCommunity, field, s, "%s", err))
			ad.unresolved = append(ad.unresolved, s)
			continue
		case err != nil:
			p.add(ref.invalid(field, s, "%s", err))
			continue
		}
		if j, dup := seenComm[c]; dup {
			p.add(ref.invalid(field, s, "duplicate community %s (also spec.communities[%d])", c, j))
			continue
		}
		seenComm[c] = i
		ad.Communities = append(ad.Communities, c)
	}
	slices.SortFunc(ad.Communities, Community.Compare)
	seenPeer := map[string]int{}
	for i, name := range obj.Spec.Peers {
		field := fmt.Sprintf("spec.peers[%d]", i)
		if j, dup := seenPeer[name]; dup {
			p.add(ref.invalid(field, name, "duplicate of spec.peers[%d]", j))
			continue
		}
		seenPeer[name] = i
		if !peerNames[name] {
			p.warn(ref, field, "no BGPPeer named %q; the entry selects nothing", name)
		}
		ad.Peers = append(ad.Peers, name)
	}
	slices.Sort(ad.Peers)
	if len(p.invalid) != n {
		return nil
	}
	return ad
}

// checkAggregation rejects an aggregation length shorter than the prefix
// length of any address block of a selected pool: the aggregate would cover
// addresses outside the pool. As in MetalLB, a range entry is judged by the
// shortest prefix of its summary.
func checkAggregation(objs map[string]objRef, ads []*BGPAdvertisement, pools map[string]*Pool, p *problems) {
	for _, ad := range ads {
		ref := objs[ad.Name]
		for _, name := range ad.Pools {
			pool := pools[name]
			for i, b := range pool.Blocks {
				field, l := "spec.aggregationLength", ad.AggregationLength
				if b.First.Is6() {
					field, l = "spec.aggregationLengthV6", ad.AggregationLengthV6
				}
				if m := b.minBits(); l < m {
					p.add(ref.invalid(field, fmt.Sprint(l), "shorter than the /%d of IPAddressPool %s spec.addresses[%d] %q: the aggregated prefix would cover addresses outside the pool", m, pool.Name, i, b.Spec))
				}
			}
		}
	}
}

// LocalPrefCompatible reports whether two BGP advertisements of pool may
// coexist although their LOCAL_PREF differs (MetalLB's
// BGPAdvertisementsHaveCompatibleLocalPref): they must never announce the
// same prefix to the same peer from the same node. That holds when their
// aggregation lengths differ for every family the pool contains, or their
// peer lists are both non-empty and disjoint, or nodesOverlap reports that
// no node is selected by both. Equal LOCAL_PREFs are always compatible.
func LocalPrefCompatible(a, b *BGPAdvertisement, pool *Pool, nodesOverlap func(a, b []labels.Selector) bool) bool {
	if a.LocalPref == b.LocalPref {
		return true
	}
	v4, v6 := pool.HasIPv4(), pool.HasIPv6()
	if (!v4 || a.AggregationLength != b.AggregationLength) && (!v6 || a.AggregationLengthV6 != b.AggregationLengthV6) {
		return true
	}
	if len(a.Peers) > 0 && len(b.Peers) > 0 && !intersects(a.Peers, b.Peers) {
		return true
	}
	return !nodesOverlap(a.NodeSelectors, b.NodeSelectors)
}

// nodesOverlapFunc returns a function reporting whether some node is selected
// by both selector lists: always when both select everything, otherwise when
// one of nodes matches both.
func nodesOverlapFunc(nodes []labels.Set) func(a, b []labels.Selector) bool {
	return func(a, b []labels.Selector) bool {
		if selectsEverything(a) && selectsEverything(b) {
			return true
		}
		for _, n := range nodes {
			if matchesAny(a, n) && matchesAny(b, n) {
				return true
			}
		}
		return false
	}
}

// checkLocalPref applies LocalPrefCompatible to every pair of advertisements
// of every pool. Advertisements with serviceSelectors are skipped: whether
// they meet depends on the Service, so the speaker checks them per Service.
func checkLocalPref(objs map[string]objRef, pools []*Pool, overlap func(a, b []labels.Selector) bool, p *problems) {
	for _, pool := range pools {
		ads := pool.BGPAdvertisements
		for i, a := range ads {
			if len(a.ServiceSelectors) > 0 {
				continue
			}
			for _, b := range ads[i+1:] {
				if len(b.ServiceSelectors) > 0 || LocalPrefCompatible(a, b, pool, overlap) {
					continue
				}
				p.add(objs[b.Name].invalid("spec.localPref", fmt.Sprint(b.LocalPref),
					"conflicts with BGPAdvertisement %s (localPref %d) on IPAddressPool %s: both would announce the same prefixes to the same peers from the same nodes; make their aggregation lengths, peers or nodeSelectors disjoint, or use the same localPref",
					a.Name, a.LocalPref, pool.Name))
			}
		}
	}
}

func intersects(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

// bgpAdKey renders everything of a parsed advertisement except its name, to
// find advertisements that are identical.
func bgpAdKey(a *BGPAdvertisement) string {
	return fmt.Sprintf("pools=%q agg=%d/%d lp=%d comm=%v unresolved=%q peers=%q nodes=%q svc=%q wecmp=%t",
		a.Pools, a.AggregationLength, a.AggregationLengthV6, a.LocalPref, a.Communities, sortedCopy(a.unresolved), a.Peers,
		selectorStrings(a.NodeSelectors), selectorStrings(a.ServiceSelectors), a.WeightedECMP)
}

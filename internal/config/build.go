package config

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
)

// Resources is everything Build reads: the metallb.io objects plus the
// Secrets and Nodes they reference. Order does not matter. Namespaces are not
// read: a pool's namespaceSelectors are kept as selectors (see
// ServiceAllocation).
type Resources struct {
	Pools             []v1beta1.IPAddressPool
	L2Advertisements  []v1beta1.L2Advertisement
	BGPAdvertisements []v1beta1.BGPAdvertisement
	Peers             []v1beta2.BGPPeer
	Communities       []v1beta1.Community
	BFDProfiles       []v1beta1.BFDProfile
	// Secrets holding BGP passwords (only those in Options.Namespace are
	// used).
	Secrets []corev1.Secret
	// Nodes are used only for the rules that depend on which nodes exist
	// (peers meeting on a node, LOCAL_PREF conflicts) and to find
	// Options.NodeName's labels.
	Nodes []corev1.Node
}

// Options tune Build.
type Options struct {
	// Namespace is Herald's namespace. Objects elsewhere are invalid and
	// Secrets elsewhere are not used. "" disables the check (tests).
	Namespace string
	// IgnoreTransient drops transient errors (missing Secret, Community
	// alias) instead of returning them, so that the admission webhook does
	// not depend on the order in which objects are created.
	IgnoreTransient bool
	// DropTransient leaves out of the snapshot the objects whose only
	// problems are transient references (a BGPPeer whose password Secret
	// does not exist, a BGPAdvertisement naming a Community alias that is
	// not defined), instead of failing the whole build. Build then returns
	// the snapshot of everything else and lists the left-out objects' errors
	// in Snapshot.Dropped. Any validation error, and a transient error that
	// concerns no single droppable object (the speaker's own Node missing),
	// still fails the build. Used by the speakers, so that a deleted Secret
	// costs one peer, not the node's whole configuration (layer 2
	// included); whether a partial snapshot may replace the one in force is
	// configload.Tracker's decision.
	DropTransient bool
	// NodeName, when set, builds the snapshot of one speaker: BGPPeers and
	// BGPAdvertisements whose nodeSelectors do not match this node are left
	// out before validation, so a bad peer only breaks the nodes it targets.
	// The node must be in Resources.Nodes (else a transient error).
	NodeName string
}

// Build validates r and returns the configuration snapshot. On failure it
// returns every problem found, joined with errors.Join: *ValidationError for
// invalid configuration, *TransientError for references to objects that do
// not exist yet (see IsTransient and Split). The errors are sorted by kind,
// namespace, name and field, so the text is stable for status reporting.
func Build(r Resources, opts Options) (*Snapshot, error) {
	p := &problems{ignoreTransient: opts.IgnoreTransient}
	home := func(kind string, m *metav1.ObjectMeta) bool {
		if opts.Namespace == "" || m.Namespace == opts.Namespace {
			return true
		}
		p.add(objRef{kind, m.Namespace, m.Name}.invalid("metadata.namespace", m.Namespace, "%s objects must be in Herald's namespace %q", kind, opts.Namespace))
		return false
	}

	// The node this snapshot is for, and the node label sets the
	// node-dependent rules look at.
	var nodeSets []labels.Set
	var self labels.Set
	if opts.NodeName != "" {
		found := false
		for i := range r.Nodes {
			if r.Nodes[i].Name == opts.NodeName {
				self, found = labels.Set(r.Nodes[i].Labels), true
				break
			}
		}
		if !found {
			p.addTransient(&TransientError{Kind: KindNode, Name: opts.NodeName, Rule: "the speaker's own Node was not found", Missing: KindNode})
			self = labels.Set{}
		}
		nodeSets = []labels.Set{self}
	} else {
		for i := range r.Nodes {
			nodeSets = append(nodeSets, labels.Set(r.Nodes[i].Labels))
		}
	}
	forThisNode := func(sels []metav1.LabelSelector) bool {
		return opts.NodeName == "" || rawSelectorsMatch(sels, self)
	}

	snap := &Snapshot{nodeName: opts.NodeName}

	// Community aliases.
	var comms []communityObj
	seen := map[string]bool{}
	for i := range r.Communities {
		c := &r.Communities[i]
		if !home(KindCommunity, &c.ObjectMeta) || !uniqueName(KindCommunity, &c.ObjectMeta, seen, p) {
			continue
		}
		o := communityObj{ref: objRef{KindCommunity, c.Namespace, c.Name}}
		for _, a := range c.Spec.Communities {
			o.aliases = append(o.aliases, aliasSpec{a.Name, a.Value})
		}
		comms = append(comms, o)
	}
	slices.SortFunc(comms, func(a, b communityObj) int { return strings.Compare(a.ref.name, b.ref.name) })
	aliases := buildCommunityAliases(comms, p)
	for _, a := range aliases {
		snap.aliases = append(snap.aliases, a)
	}
	slices.SortFunc(snap.aliases, func(a, b CommunityAlias) int { return strings.Compare(a.Name, b.Name) })

	// BFD profiles, by name; an invalid one is kept as nil so that a peer
	// naming it is refused rather than waiting for it (transient).
	bfdProfiles := map[string]*BFDProfile{}
	seen = map[string]bool{}
	for i := range r.BFDProfiles {
		b := &r.BFDProfiles[i]
		if home(KindBFDProfile, &b.ObjectMeta) && uniqueName(KindBFDProfile, &b.ObjectMeta, seen, p) {
			bfdProfiles[b.Name] = buildBFDProfile(b, p)
		}
	}

	// Pools.
	var poolObjs []v1beta1.IPAddressPool
	for i := range r.Pools {
		if home(KindIPAddressPool, &r.Pools[i].ObjectMeta) {
			poolObjs = append(poolObjs, r.Pools[i])
		}
	}
	snap.pools = buildPools(poolObjs, p)
	poolByName := map[string]*Pool{}
	for _, pl := range snap.pools {
		poolByName[pl.Name] = pl
	}

	// Peers.
	env := peerEnv{namespace: opts.Namespace, secrets: map[string]*corev1.Secret{}, bfdProfiles: bfdProfiles}
	for i := range r.Secrets {
		s := &r.Secrets[i]
		if opts.Namespace == "" || s.Namespace == opts.Namespace {
			env.secrets[s.Namespace+"/"+s.Name] = s
		}
	}
	allPeerNames := map[string]bool{}
	peerRefs := map[string]objRef{}
	peerCreated := map[string]time.Time{}
	seen = map[string]bool{}
	for i := range r.Peers {
		obj := &r.Peers[i]
		if !home(KindBGPPeer, &obj.ObjectMeta) || !uniqueName(KindBGPPeer, &obj.ObjectMeta, seen, p) {
			continue
		}
		allPeerNames[obj.Name] = true
		if !forThisNode(obj.Spec.NodeSelectors) {
			continue
		}
		peerRefs[obj.Name] = objRef{KindBGPPeer, obj.Namespace, obj.Name}
		peerCreated[obj.Name] = obj.CreationTimestamp.Time
		if peer := buildPeer(obj, env, p); peer != nil {
			snap.peers = append(snap.peers, peer)
		}
	}
	sortPeers(snap.peers)
	if opts.DropTransient {
		snap.peers = slices.DeleteFunc(snap.peers, func(pe *Peer) bool { return p.hasTransient(KindBGPPeer, pe.Name) })
	}
	dupPeers := map[string]string{}
	snap.peers = slices.DeleteFunc(snap.peers, func(pe *Peer) bool {
		k := peerKey(pe)
		if first, dup := dupPeers[k]; dup {
			p.add(peerRefs[pe.Name].invalid("spec", "", "identical to BGPPeer %s; remove one of them", first))
			return true
		}
		dupPeers[k] = pe.Name
		return false
	})
	checkPeersPerNode(peerRefs, peerCreated, snap.peers, nodeSets, p)
	if opts.NodeName == "" {
		warnSharedRouterID(peerRefs, snap.peers, r.Nodes, p)
	}

	// L2 advertisements.
	seen = map[string]bool{}
	for i := range r.L2Advertisements {
		obj := &r.L2Advertisements[i]
		if !home(KindL2Advertisement, &obj.ObjectMeta) || !uniqueName(KindL2Advertisement, &obj.ObjectMeta, seen, p) {
			continue
		}
		if ad := buildL2Advertisement(obj, snap.pools, p); ad != nil {
			snap.l2 = append(snap.l2, ad)
		}
	}
	slices.SortFunc(snap.l2, func(a, b *L2Advertisement) int { return strings.Compare(a.Name, b.Name) })

	// BGP advertisements.
	adRefs := map[string]objRef{}
	seen = map[string]bool{}
	for i := range r.BGPAdvertisements {
		obj := &r.BGPAdvertisements[i]
		if !home(KindBGPAdvertisement, &obj.ObjectMeta) || !uniqueName(KindBGPAdvertisement, &obj.ObjectMeta, seen, p) {
			continue
		}
		if !forThisNode(obj.Spec.NodeSelectors) {
			continue
		}
		adRefs[obj.Name] = objRef{KindBGPAdvertisement, obj.Namespace, obj.Name}
		if ad := buildBGPAdvertisement(obj, snap.pools, allPeerNames, aliases, p); ad != nil {
			snap.bgp = append(snap.bgp, ad)
		}
	}
	slices.SortFunc(snap.bgp, func(a, b *BGPAdvertisement) int { return strings.Compare(a.Name, b.Name) })
	if opts.DropTransient {
		snap.bgp = slices.DeleteFunc(snap.bgp, func(ad *BGPAdvertisement) bool { return p.hasTransient(KindBGPAdvertisement, ad.Name) })
	}
	dupAds := map[string]string{}
	snap.bgp = slices.DeleteFunc(snap.bgp, func(ad *BGPAdvertisement) bool {
		k := bgpAdKey(ad)
		if first, dup := dupAds[k]; dup {
			p.add(adRefs[ad.Name].invalid("spec", "", "identical to BGPAdvertisement %s; remove one of them", first))
			return true
		}
		dupAds[k] = ad.Name
		return false
	})
	checkAggregation(adRefs, snap.bgp, poolByName, p)

	// Attach advertisements to their pools (both lists are sorted by name,
	// so each pool's lists are too).
	for _, ad := range snap.l2 {
		for _, name := range ad.Pools {
			poolByName[name].L2Advertisements = append(poolByName[name].L2Advertisements, ad)
		}
	}
	for _, ad := range snap.bgp {
		for _, name := range ad.Pools {
			poolByName[name].BGPAdvertisements = append(poolByName[name].BGPAdvertisements, ad)
		}
	}
	checkLocalPref(adRefs, snap.pools, nodesOverlapFunc(nodeSets), p)

	if opts.DropTransient {
		snap.dropped = p.takeDroppable()
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	snap.warnings = p.warnings
	slices.Sort(snap.warnings)
	snap.finish()
	return snap, nil
}

// uniqueName rejects a second object of one kind with the same name (the API
// server prevents it within a namespace; a merged candidate list may not).
func uniqueName(kind string, m *metav1.ObjectMeta, seen map[string]bool, p *problems) bool {
	if seen[m.Name] {
		p.add(objRef{kind, m.Namespace, m.Name}.invalid("metadata.name", "", "duplicate %s name", kind))
		return false
	}
	seen[m.Name] = true
	return true
}

// rawSelectorsMatch reports whether node matches one of sels (all when
// empty). A selector that does not convert counts as matching, so its error
// is reported rather than hidden by the per-node filter.
func rawSelectorsMatch(sels []metav1.LabelSelector, node labels.Set) bool {
	if len(sels) == 0 {
		return true
	}
	for i := range sels {
		s, err := metav1.LabelSelectorAsSelector(&sels[i])
		if err != nil || s.Matches(node) {
			return true
		}
	}
	return false
}

package config

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
)

// Snapshot is one validated configuration. It is immutable: Build creates it
// and nothing changes it afterwards, so it can be shared between goroutines
// without locks. Slices and pointers returned by its methods point into the
// snapshot and must not be modified. Every list is sorted by name.
type Snapshot struct {
	pools       []*Pool
	poolByName  map[string]*Pool
	l2          []*L2Advertisement
	bgp         []*BGPAdvertisement
	peers       []*Peer
	peerByName  map[string]*Peer
	aliases     []CommunityAlias
	warnings    []string
	index       []indexEntry // every address block, sorted by First
	nodeName    string
	fingerprint [sha256.Size]byte
	// dropped: see Dropped; not part of the fingerprint.
	dropped []*TransientError
}

type indexEntry struct {
	first, last netip.Addr
	pool        *Pool
}

// Dropped returns the errors of the objects Build left out under
// Options.DropTransient (each names the object, e.g. "BGPPeer ns/p2:
// spec.passwordSecret "ns/pw": Secret not found"), sorted; nil when nothing
// was left out. They are not part of Equal: two snapshots announcing the
// same thing are equal whatever was left out.
func (s *Snapshot) Dropped() []*TransientError { return s.dropped }

// DroppedError returns Dropped joined with errors.Join (IsTransient and
// Split work on it), or nil.
func (s *Snapshot) DroppedError() error {
	if s == nil || len(s.dropped) == 0 {
		return nil
	}
	errs := make([]error, len(s.dropped))
	for i, e := range s.dropped {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// Pools returns every pool, sorted by name.
func (s *Snapshot) Pools() []*Pool { return s.pools }

// Pool returns the pool called name.
func (s *Snapshot) Pool(name string) (*Pool, bool) {
	p, ok := s.poolByName[name]
	return p, ok
}

// L2Advertisements returns every L2Advertisement, sorted by name.
func (s *Snapshot) L2Advertisements() []*L2Advertisement { return s.l2 }

// BGPAdvertisements returns the BGPAdvertisements, sorted by name. With
// Options.NodeName, only those whose nodeSelectors match that node.
func (s *Snapshot) BGPAdvertisements() []*BGPAdvertisement { return s.bgp }

// Peers returns the BGP peers, sorted by name. With Options.NodeName, only
// those whose nodeSelectors match that node.
func (s *Snapshot) Peers() []*Peer { return s.peers }

// Peer returns the peer called name.
func (s *Snapshot) Peer(name string) (*Peer, bool) {
	p, ok := s.peerByName[name]
	return p, ok
}

// CommunityAliases returns every alias defined by Community objects, sorted
// by name.
func (s *Snapshot) CommunityAliases() []CommunityAlias { return s.aliases }

// Warnings returns messages about accepted but questionable configuration
// (deprecated fields, references to objects that do not exist, masked
// CIDRs), each prefixed with the object it concerns. The admission webhook
// returns them as warnings.
func (s *Snapshot) Warnings() []string { return s.warnings }

// NodeName returns Options.NodeName the snapshot was built for ("" for the
// whole cluster).
func (s *Snapshot) NodeName() string { return s.nodeName }

// PoolFor returns the pool containing ip, in O(log n) over all address
// blocks. As in MetalLB, an IPv4 address ending in .0 or .255 belongs to no
// pool when its pool has AvoidBuggyIPs. IPv4-mapped IPv6 addresses are
// unmapped and zones ignored first.
func (s *Snapshot) PoolFor(ip netip.Addr) (*Pool, bool) {
	ip = ip.Unmap().WithZone("")
	if !ip.IsValid() {
		return nil, false
	}
	// First entry starting after ip; the candidate is the one before it.
	i := sort.Search(len(s.index), func(i int) bool { return s.index[i].first.Compare(ip) > 0 })
	if i == 0 {
		return nil, false
	}
	e := s.index[i-1]
	if e.first.BitLen() != ip.BitLen() || e.last.Compare(ip) < 0 {
		return nil, false
	}
	if e.pool.AvoidBuggyIPs && isBuggyIP(ip) {
		return nil, false
	}
	return e.pool, true
}

// PeersForNode returns the peers a node with these labels opens sessions
// to, sorted by name.
func (s *Snapshot) PeersForNode(node labels.Labels) []*Peer {
	var out []*Peer
	for _, p := range s.peers {
		if p.MatchesNode(node) {
			out = append(out, p)
		}
	}
	return out
}

// RouterIDForNode returns the router ID set by the peers selecting a node
// (peers that leave routerID unset take no part), or the zero Addr when
// none sets one (the backend then picks one). Build guarantees that the
// peers that set one agree.
func (s *Snapshot) RouterIDForNode(node labels.Labels) netip.Addr {
	for _, p := range s.peers {
		if p.RouterID.IsValid() && p.MatchesNode(node) {
			return p.RouterID
		}
	}
	return netip.Addr{}
}

// Fingerprint returns a SHA-256 digest of the snapshot's semantic content
// (everything except warnings). Two snapshots with the same fingerprint
// configure the same behaviour, so a caller can skip reprocessing Services
// when a reconcile produced no semantic change (metallb#1606).
func (s *Snapshot) Fingerprint() [sha256.Size]byte { return s.fingerprint }

// Equal reports whether s and o have the same semantic content (see
// Fingerprint). Nil snapshots are equal only to each other.
func (s *Snapshot) Equal(o *Snapshot) bool {
	if s == nil || o == nil {
		return s == o
	}
	return s.fingerprint == o.fingerprint
}

// finish builds the lookup structures and the fingerprint.
func (s *Snapshot) finish() {
	s.poolByName = make(map[string]*Pool, len(s.pools))
	for _, p := range s.pools {
		s.poolByName[p.Name] = p
		for _, b := range p.Blocks {
			s.index = append(s.index, indexEntry{b.First, b.Last, p})
		}
	}
	slices.SortFunc(s.index, func(a, b indexEntry) int { return a.first.Compare(b.first) })
	s.peerByName = make(map[string]*Peer, len(s.peers))
	for _, p := range s.peers {
		s.peerByName[p.Name] = p
	}
	h := sha256.New()
	s.encode(h)
	h.Sum(s.fingerprint[:0])
}

// encode writes a canonical rendering of the semantic content.
func (s *Snapshot) encode(h hash.Hash) {
	w := func(format string, args ...any) { fmt.Fprintf(h, format+"\n", args...) }
	w("node %q", s.nodeName)
	for _, p := range s.pools {
		w("pool %q labels=%q auto=%v buggy=%v", p.Name, p.Labels.String(), p.AutoAssign, p.AvoidBuggyIPs)
		for _, b := range p.Blocks {
			w(" block %v-%v %v", b.First, b.Last, b.Prefixes)
		}
		if a := p.Allocation; a != nil {
			w(" alloc prio=%d ns=%q nssel=%q svc=%q", a.Priority, a.Namespaces,
				selectorStrings(a.NamespaceSelectors), selectorStrings(a.ServiceSelectors))
		}
		for _, a := range p.L2Advertisements {
			w(" l2 %q", a.Name)
		}
		for _, a := range p.BGPAdvertisements {
			w(" bgp %q", a.Name)
		}
	}
	for _, a := range s.l2 {
		w("l2 %q pools=%q nodes=%q svc=%q if=%q", a.Name, a.Pools, selectorStrings(a.NodeSelectors), selectorStrings(a.ServiceSelectors), a.Interfaces)
		for _, p := range a.PreferredNodes {
			w(" pref %d %q", p.Weight, p.Selector.String())
		}
	}
	for _, a := range s.bgp {
		w("bgp %q %s", a.Name, bgpAdKey(a))
	}
	for _, p := range s.peers {
		w("peer %q %s", p.Name, peerKey(p))
	}
	for _, a := range s.aliases {
		w("alias %q %v %q", a.Name, a.Value, a.Source)
	}
}

// String summarises the snapshot for logs (counts and fingerprint prefix;
// no secrets).
func (s *Snapshot) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "config snapshot %x: %d pools, %d L2 advertisements, %d BGP advertisements, %d peers",
		s.fingerprint[:6], len(s.pools), len(s.l2), len(s.bgp), len(s.peers))
	if s.nodeName != "" {
		fmt.Fprintf(&b, " (node %s)", s.nodeName)
	}
	return b.String()
}

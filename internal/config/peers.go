package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/herald-lb/herald/api/v1beta2"
)

// DefaultBGPPort is the BGP TCP port (RFC 4271 §8.2.1) used when
// spec.peerPort is unset.
const DefaultBGPPort = 179

// maxMD5KeyLen is the longest TCP-MD5 key Linux accepts
// (TCP_MD5SIG_MAXKEYLEN; RFC 2385).
const maxMD5KeyLen = 80

// maxHoldTime is the largest BGP hold time: the Hold Time field of the OPEN
// message is 2 octets (RFC 4271 §4.2).
const maxHoldTime = 65535 * time.Second

// Secret is a password. Its String method redacts it so it does not end up
// in logs via %v; use Reveal to read it.
type Secret string

// String returns "[redacted]" or "" for an empty secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// Reveal returns the password itself.
func (s Secret) Reveal() string { return string(s) }

// Peer is one parsed BGPPeer (v1beta2). Read-only.
type Peer struct {
	Name string

	MyASN    uint32 // local ASN, non-zero
	PeerASN  uint32 // remote ASN, non-zero (spec.dynamicASN is refused)
	LocalASN uint32 // spec.localASN (ASN presented to this peer), 0 when unset

	// Exactly one of Address (never zoned) and Interface (unnumbered BGP)
	// is set.
	Address   netip.Addr
	Interface string
	Port      uint16 // TCP port, default 179

	SourceAddress netip.Addr // zero when unset
	RouterID      netip.Addr // IPv4 BGP Identifier; zero when unset (backend picks)

	// Timers, whole seconds. HoldTime is 3 s..65535 s (RFC 4271 §4.2;
	// 0, no keepalives, is refused: the backend cannot send it).
	HoldTime      time.Duration
	KeepaliveTime time.Duration
	ConnectTime   time.Duration // 0 when unset (backend default)

	NodeSelectors []labels.Selector // empty: every node

	Password       Secret // TCP-MD5 key (RFC 2385), from spec.password or the Secret
	PasswordSecret string // "namespace/name" of the Secret it came from, or ""

	EBGPMultiHop    bool
	GracefulRestart bool // RFC 4724
	VRF             string
	DualStack       bool // spec.dualStackAddressFamily

	// BFD is the BFDProfile named by spec.bfdProfile (RFC 5880 asynchronous
	// mode, RFC 5881 single hop or, with EBGPMultiHop, RFC 5883 multihop
	// from SourceAddress); nil when unset.
	BFD *BFDProfile
}

// IBGP reports whether the session is internal BGP: the remote ASN equals the
// ASN presented to the peer (LocalASN if set, else MyASN).
func (p *Peer) IBGP() bool {
	return p.PeerASN == p.effectiveLocalASN()
}

func (p *Peer) effectiveLocalASN() uint32 {
	if p.LocalASN != 0 {
		return p.LocalASN
	}
	return p.MyASN
}

// MatchesNode reports whether a node with these labels opens this session.
func (p *Peer) MatchesNode(node labels.Labels) bool { return matchesAny(p.NodeSelectors, node) }

// peerEnv is what peer parsing needs besides the object.
type peerEnv struct {
	namespace string // Herald's namespace ("" = the peer's own namespace)
	secrets   map[string]*corev1.Secret
	// bfdProfiles are the BFDProfiles by name; nil for an invalid one.
	bfdProfiles map[string]*BFDProfile
}

func buildPeer(obj *v1beta2.BGPPeer, env peerEnv, p *problems) *Peer {
	ref := objRef{KindBGPPeer, obj.Namespace, obj.Name}
	s := &obj.Spec
	n := len(p.invalid)
	peer := &Peer{
		Name:            obj.Name,
		MyASN:           s.MyASN,
		PeerASN:         s.PeerASN,
		LocalASN:        s.LocalASN,
		Port:            s.PeerPort,
		EBGPMultiHop:    s.EBGPMultiHop,
		GracefulRestart: s.EnableGracefulRestart,
		VRF:             s.VRF,
		DualStack:       s.DualStackAddressFamily,
	}
	if peer.Port == 0 {
		peer.Port = DefaultBGPPort
	}
	if s.MyASN == 0 {
		p.add(ref.invalid("spec.myASN", "", "is required and must not be 0"))
	}

	switch {
	case s.PeerASN != 0 && s.DynamicASN != "":
		p.add(ref.invalid("spec.dynamicASN", string(s.DynamicASN), "set exactly one of peerASN and dynamicASN, not both"))
	case s.PeerASN == 0 && s.DynamicASN == "":
		p.add(ref.invalid("spec.peerASN", "", "set exactly one of peerASN and dynamicASN"))
	case s.DynamicASN == "":
	case s.DynamicASN != v1beta2.InternalASNMode && s.DynamicASN != v1beta2.ExternalASNMode:
		p.add(ref.invalid("spec.dynamicASN", string(s.DynamicASN), "must be %q or %q", v1beta2.InternalASNMode, v1beta2.ExternalASNMode))
	default:
		// Backend rule: gobgp takes a neighbor without an ASN as "accept
		// any ASN in the OPEN" and would not check the internal/external
		// class the user asked for.
		p.add(ref.invalid("spec.dynamicASN", string(s.DynamicASN), "not supported by Herald's BGP backend, which would accept any ASN the router sends without checking that it is %s; set spec.peerASN to the router's ASN", s.DynamicASN))
	}

	switch {
	case s.PeerAddress != "" && s.Interface != "":
		p.add(ref.invalid("spec.interface", s.Interface, "set exactly one of peerAddress and interface, not both"))
	case s.PeerAddress == "" && s.Interface == "":
		p.add(ref.invalid("spec.peerAddress", "", "set exactly one of peerAddress and interface"))
	case s.Interface != "":
		if strings.TrimSpace(s.Interface) != s.Interface || strings.ContainsAny(s.Interface, "/ \t") || len(s.Interface) > 15 {
			p.add(ref.invalid("spec.interface", s.Interface, "not a valid network interface name"))
			break
		}
		// Backend rule, found on the wire (e2e TestBGPPeerVariants/
		// Unnumbered against FRR): the session comes up, but gobgp v3.37
		// announces on it with the unspecified next hop "::" in both
		// families, and the router accepts none of the paths.
		p.add(ref.invalid("spec.interface", s.Interface, "unnumbered BGP is not supported by Herald's BGP backend: gobgp announces paths on such a session with the unspecified next hop (::), which routers refuse (FRR accepted none in Herald's lab test); set spec.peerAddress to the router's address on the link instead"))
		peer.Interface = s.Interface
	default:
		a, err := parseUnicast(s.PeerAddress)
		switch {
		case err != "":
			p.add(ref.invalid("spec.peerAddress", s.PeerAddress, "%s", err))
		case a.Zone() != "":
			// Backend rule: bgp.PeerConfig refuses a zoned neighbor address.
			p.add(ref.invalid("spec.peerAddress", s.PeerAddress, "an IPv6 zone is not supported by Herald's BGP backend (nor is unnumbered BGP, spec.interface): use the router's global address"))
		}
		peer.Address = a
	}
	if s.SourceAddress != "" {
		a, err := parseUnicast(s.SourceAddress)
		switch {
		case err != "":
			p.add(ref.invalid("spec.sourceAddress", s.SourceAddress, "%s", err))
		case peer.Address.IsValid() && a.Is4() != peer.Address.Is4():
			p.add(ref.invalid("spec.sourceAddress", s.SourceAddress, "must be of the same IP family as peerAddress %s", peer.Address))
		}
		peer.SourceAddress = a
	}
	if s.RouterID != "" {
		a, err := netip.ParseAddr(s.RouterID)
		switch {
		case err != nil:
			p.add(ref.invalid("spec.routerID", s.RouterID, "not an IP address"))
		case !a.Is4() || a.IsUnspecified():
			p.add(ref.invalid("spec.routerID", s.RouterID, "must be a non-zero IPv4 address: the BGP Identifier is 4 octets (RFC 4271 §4.2)"))
		}
		peer.RouterID = a
	}

	var hold, keep, conn *time.Duration
	if s.HoldTime != nil {
		hold = &s.HoldTime.Duration
	}
	if s.KeepaliveTime != nil {
		keep = &s.KeepaliveTime.Duration
	}
	if s.ConnectTime != nil {
		conn = &s.ConnectTime.Duration
	}
	h, k, terr := resolveTimers(hold, keep)
	if terr != nil {
		p.add(ref.invalid(terr.field, terr.value, "%s", terr.rule))
	}
	peer.HoldTime, peer.KeepaliveTime = h, k
	c, terr := checkConnectTime(conn)
	if terr != nil {
		p.add(ref.invalid(terr.field, terr.value, "%s", terr.rule))
	}
	peer.ConnectTime = c

	peer.NodeSelectors = convertSelectors(ref, "spec.nodeSelectors", s.NodeSelectors, p)

	// A passwordSecret without a name is absent, as in MetalLB (which
	// checks only passwordSecret.name, and whose configmaptocrs writes
	// passwordSecret: {} on every BGPPeer).
	secretRef := s.PasswordSecret
	if secretRef != nil && secretRef.Name == "" {
		if secretRef.Namespace != "" {
			p.warn(ref, "spec.passwordSecret", "has a namespace but no name: ignored, no password Secret is used (as in MetalLB)")
		}
		secretRef = nil
	}
	switch {
	case s.Password != "" && secretRef != nil:
		p.add(ref.invalid("spec.passwordSecret", "", "password and passwordSecret are mutually exclusive"))
	case s.Password != "":
		if len(s.Password) > maxMD5KeyLen {
			p.add(ref.invalid("spec.password", "", "longer than %d bytes, the TCP-MD5 key limit (RFC 2385, Linux TCP_MD5SIG_MAXKEYLEN)", maxMD5KeyLen))
		}
		peer.Password = Secret(s.Password)
	case secretRef != nil:
		peer.Password, peer.PasswordSecret = resolvePasswordSecret(ref, secretRef, env, p)
	}

	if s.BFDProfile != "" {
		peer.BFD = resolveBFDProfile(ref, s, env, p)
	}
	if s.EBGPMultiHop && peer.MyASN != 0 && peer.PeerASN != 0 && peer.IBGP() {
		p.add(ref.invalid("spec.ebgpMultiHop", "", "cannot be set on an iBGP session (peer ASN equals the local ASN)"))
	}
	if s.DualStackAddressFamily && s.Interface == "" {
		// Backend rule: gobgp gives a path of the other family the
		// session's own address as next hop (bgp.PeerConfig.Carries).
		p.warn(ref, "spec.dualStackAddressFamily", "the session negotiates both address families, but Herald announces only the session's own family on it: gobgp would send the other family's prefixes with the session's own address as next hop (an IPv4-mapped ::ffff:a.b.c.d for IPv6 over IPv4), which routers do not install; add a BGPPeer with the router's address of the other family")
	}
	if s.DisableMP {
		p.warn(ref, "spec.disableMP", "deprecated and ignored: Herald always negotiates multiprotocol BGP (RFC 4760)")
	}
	if len(p.invalid) != n {
		return nil
	}
	return peer
}

// parseUnicast parses an IP address that can identify a BGP endpoint. An
// IPv4-mapped IPv6 address is unmapped; a zone is kept. It returns a rule
// text on failure.
func parseUnicast(s string) (netip.Addr, string) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, "not an IP address"
	}
	a = a.Unmap()
	if a.IsUnspecified() || a.IsMulticast() {
		return a, "must be a unicast address"
	}
	return a, ""
}

// resolvePasswordSecret reads key "password" of a kubernetes.io/basic-auth
// Secret in Herald's namespace. A missing Secret is transient.
func resolvePasswordSecret(ref objRef, sr *corev1.SecretReference, env peerEnv, p *problems) (Secret, string) {
	ns := sr.Namespace
	home := env.namespace
	if home == "" {
		home = ref.ns
	}
	if ns == "" {
		ns = home
	}
	if ns != home {
		p.add(ref.invalid("spec.passwordSecret.namespace", sr.Namespace, "the Secret must be in Herald's namespace %q", home))
		return "", ""
	}
	key := ns + "/" + sr.Name
	sec, ok := env.secrets[key]
	if !ok {
		p.addTransient(ref.transient(KindSecret, "spec.passwordSecret", key, "Secret not found"))
		return "", key
	}
	if sec.Type != corev1.SecretTypeBasicAuth {
		p.add(ref.invalid("spec.passwordSecret", key, "Secret has type %q; it must be %q", sec.Type, corev1.SecretTypeBasicAuth))
		return "", key
	}
	pw, ok := sec.Data[corev1.BasicAuthPasswordKey]
	if !ok {
		if s, ok2 := sec.StringData[corev1.BasicAuthPasswordKey]; ok2 {
			pw, ok = []byte(s), true
		}
	}
	switch {
	case !ok:
		p.add(ref.invalid("spec.passwordSecret", key, "Secret has no key %q", corev1.BasicAuthPasswordKey))
	case len(pw) == 0:
		p.add(ref.invalid("spec.passwordSecret", key, "Secret key %q is empty", corev1.BasicAuthPasswordKey))
	case len(pw) > maxMD5KeyLen:
		p.add(ref.invalid("spec.passwordSecret", key, "password is longer than %d bytes, the TCP-MD5 key limit (RFC 2385)", maxMD5KeyLen))
	default:
		return Secret(pw), key
	}
	return "", key
}

// BFDProfileName is the name of the peer's BFDProfile, "" without BFD.
func (p *Peer) BFDProfileName() string {
	if p.BFD == nil {
		return ""
	}
	return p.BFD.Name
}

// bfdKey renders a peer's BFD profile, name and every field, so that a
// changed profile changes the snapshot's fingerprint.
func bfdKey(b *BFDProfile) string {
	if b == nil {
		return ""
	}
	return fmt.Sprintf("%+v", *b)
}

// resolveBFDProfile returns the BFDProfile named by spec.bfdProfile. A
// missing profile is transient (as in MetalLB); an invalid one, and what
// the speaker's BFD cannot run (a peer given by interface, a VRF, multihop
// without sourceAddress), are refused.
func resolveBFDProfile(ref objRef, s *v1beta2.BGPPeerSpec, env peerEnv, p *problems) *BFDProfile {
	b, ok := env.bfdProfiles[s.BFDProfile]
	switch {
	case s.Interface != "":
		p.add(ref.invalid("spec.bfdProfile", s.BFDProfile, "BFD is not supported on an unnumbered (spec.interface) peer: Herald's BFD needs the peer's address"))
	case s.VRF != "":
		p.add(ref.invalid("spec.bfdProfile", s.BFDProfile, "BFD is not supported on a peer in a VRF (spec.vrf): Herald's BFD sessions run in the default VRF"))
	case s.EBGPMultiHop && s.SourceAddress == "":
		p.add(ref.invalid("spec.bfdProfile", s.BFDProfile, "multihop BFD (RFC 5883, with spec.ebgpMultiHop) needs spec.sourceAddress, the address BFD packets are sent from"))
	case !ok:
		p.addTransient(ref.transient(KindBFDProfile, "spec.bfdProfile", s.BFDProfile, "BFDProfile not found"))
	case b == nil:
		p.add(ref.invalid("spec.bfdProfile", s.BFDProfile, "BFDProfile %s is invalid (see its errors)", s.BFDProfile))
	default:
		return b
	}
	return nil
}

// peerKey renders everything of a parsed peer except its name, to find
// duplicate peers.
func peerKey(p *Peer) string {
	return fmt.Sprintf("my=%d peer=%d local=%d addr=%v if=%s port=%d src=%v rid=%v t=%v/%v/%v nodes=%q pw=%q pwsecret=%q gr=%v mh=%v vrf=%s ds=%v bfd=%v",
		p.MyASN, p.PeerASN, p.LocalASN, p.Address, p.Interface, p.Port, p.SourceAddress, p.RouterID,
		p.HoldTime, p.KeepaliveTime, p.ConnectTime, selectorStrings(p.NodeSelectors), p.Password.Reveal(), p.PasswordSecret,
		p.GracefulRestart, p.EBGPMultiHop, p.VRF, p.DualStack, bfdKey(p.BFD))
}

// checkPeersPerNode enforces what one embedded gobgp server per speaker
// requires of the peers a node opens: one router ID (the peers that set
// routerID set the same one; a peer that leaves it unset states no
// preference and its session uses the node's, with a warning), one local
// ASN (myASN), and no two sessions to the same address or interface, also
// in different VRFs (gobgp keys neighbors by address alone). Two peers
// meet on a node when both select every node, or some node in nodes
// matches both. The newer peer of a pair (creationTimestamp; an object
// being created is the newest; then the later name) is reported, so the
// change that causes the conflict is the one blamed; the message names
// the other. peers must be sorted by name.
//
// Unset next to set is allowed (MetalLB's FRR mode refuses it) so that a
// node's peers can move from no routerID to one with an ordinary apply of
// each changed peer: requiring all or none would refuse the first of
// those edits, and only deleting and re-creating the peers would work.
func checkPeersPerNode(objs map[string]objRef, created map[string]time.Time, peers []*Peer, nodes []labels.Set, p *problems) {
	overlap := nodesOverlapFunc(nodes)
	reported := map[[2]string]bool{}
	warned := map[string]bool{} // peers warned about for an unset routerID
	for i, a := range peers {
		for _, b := range peers[i+1:] {
			if !overlap(a.NodeSelectors, b.NodeSelectors) {
				continue
			}
			if newer(created[a.Name], created[b.Name]) {
				a, b = b, a // the error names the newer peer, b
			}
			key := [2]string{a.Name, b.Name}
			if reported[key] {
				continue
			}
			ref := objs[b.Name]
			switch {
			case a.MyASN != b.MyASN:
				p.add(ref.invalid("spec.myASN", fmt.Sprint(b.MyASN), "BGPPeer %s selects the same node with myASN %d: peers on one node must share myASN (one BGP speaker per node; use localASN to present another ASN)", a.Name, a.MyASN))
			case a.RouterID.IsValid() && b.RouterID.IsValid() && a.RouterID != b.RouterID:
				p.add(ref.invalid("spec.routerID", b.RouterID.String(), "BGPPeer %s selects the same node with routerID %s: the BGPPeers of one node that set routerID must set the same one (one BGP Identifier per node, RFC 4271 §4.2; MetalLB's FRR mode has the same rule)", a.Name, a.RouterID))
			case a.Interface == "" && b.Interface == "" && a.Address == b.Address:
				msg := "one node can have only one session per neighbor address"
				if a.VRF != b.VRF {
					// Backend rule: gobgp keys its neighbors by address
					// alone (BgpServer.neighborMap), whatever the VRF.
					msg = fmt.Sprintf("the same neighbor address in different VRFs (%s) is not supported by Herald's BGP backend, which keys its sessions by address alone (MetalLB's FRR mode accepts it)", vrfPair(a.VRF, b.VRF))
				}
				p.add(ref.invalid("spec.peerAddress", b.Address.String(), "BGPPeer %s selects the same node with the same peerAddress: %s", a.Name, msg))
			case a.Interface != "" && a.Interface == b.Interface:
				p.add(ref.invalid("spec.interface", b.Interface, "BGPPeer %s selects the same node with the same interface: one node can have only one unnumbered session per interface", a.Name))
			default:
				warnUnsetRouterID(objs, a, b, warned, p)
				continue
			}
			reported[key] = true
		}
	}
}

// warnSharedRouterID warns about each peer that sets routerID and selects
// two nodes or more of nodes (the cluster's, when the snapshot is not one
// node's): each of them opens its session with that BGP Identifier, which
// RFC 6286 §2.1 asks to be unique within the AS, and a router that peers
// with two of them may refuse the second OPEN (RFC 4271 §6.2, Bad BGP
// Identifier) or treat the sessions as one speaker's. MetalLB admits it
// too, so it is a warning; a BGPPeer per node, or no routerID (each node
// uses its own IPv4 address, announce.RouterID), gives distinct ones.
func warnSharedRouterID(objs map[string]objRef, peers []*Peer, nodes []corev1.Node, p *problems) {
	for _, pe := range peers {
		if !pe.RouterID.IsValid() {
			continue
		}
		var names []string
		for i := range nodes {
			if matchesAny(pe.NodeSelectors, labels.Set(nodes[i].Labels)) {
				names = append(names, nodes[i].Name)
			}
		}
		if len(names) < 2 {
			continue
		}
		slices.Sort(names)
		list := strings.Join(names, ", ")
		if len(names) > 3 {
			list = strings.Join(names[:3], ", ") + fmt.Sprintf(" and %d more", len(names)-3)
		}
		p.warn(objs[pe.Name], "spec.routerID", "%s is the BGP Identifier of all %d nodes this peer selects (%s): it should be unique within the AS (RFC 6286 §2.1), and a router peering with two of them may refuse the second session; use a BGPPeer per node (spec.nodeSelectors), or leave routerID unset so that each node uses its own IPv4 address",
			pe.RouterID, len(names), list)
	}
}

// warnUnsetRouterID warns, once per peer, about a peer without routerID
// that meets one with routerID on a node: its session uses that one. a
// and b meet on some node.
func warnUnsetRouterID(objs map[string]objRef, a, b *Peer, warned map[string]bool, p *problems) {
	unset, set := a, b
	if a.RouterID.IsValid() {
		unset, set = b, a
	}
	if unset.RouterID.IsValid() || !set.RouterID.IsValid() || warned[unset.Name] {
		return
	}
	warned[unset.Name] = true
	p.warn(objs[unset.Name], "spec.routerID", "unset, so on the nodes it shares with BGPPeer %s this session uses that peer's routerID %s (one BGP Identifier per node); set it here too to say so (MetalLB's FRR mode requires it on all of a node's peers or none)", set.Name, set.RouterID)
}

// vrfPair renders two VRF names, "" as "default".
func vrfPair(a, b string) string {
	name := func(v string) string {
		if v == "" {
			return "the default VRF"
		}
		return "VRF " + v
	}
	return name(a) + " and " + name(b)
}

// newer reports whether an object created at x is newer than one created
// at y. A zero time (an object being created, as the webhook sees it) is
// the newest; equal times are not newer (name order decides).
func newer(x, y time.Time) bool {
	switch {
	case x.IsZero():
		return !y.IsZero()
	case y.IsZero():
		return false
	}
	return x.After(y)
}

// sortPeers orders peers by name.
func sortPeers(peers []*Peer) {
	slices.SortFunc(peers, func(a, b *Peer) int { return strings.Compare(a.Name, b.Name) })
}

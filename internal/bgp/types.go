package bgp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultPort is the BGP TCP port (RFC 4271 §8.2.1) used when PeerConfig.Port is 0.
const DefaultPort = 179

// ReservedLargeCommunityASN is the Global Administrator value (AS 4294967295,
// reserved by RFC 7300) that the gobgp implementation uses for internal
// per-peer markers. Paths must not carry large communities with this Global
// Administrator; Path.Validate rejects them with ErrReservedCommunity.
const ReservedLargeCommunityASN = 4294967295

// Sentinel errors returned (wrapped) by validation and by Speaker implementations.
var (
	// ErrInvalidPeer means a PeerConfig field is missing or out of range.
	ErrInvalidPeer = errors.New("invalid BGP peer")
	// ErrDuplicatePeer means two peers share a name or a neighbor address.
	ErrDuplicatePeer = errors.New("duplicate BGP peer")
	// ErrInvalidPath means a Path field is invalid.
	ErrInvalidPath = errors.New("invalid BGP path")
	// ErrReservedCommunity means a path carries a large community with the
	// Global Administrator ReservedLargeCommunityASN.
	ErrReservedCommunity = errors.New("reserved large community")
	// ErrRouterIDConflict means the peers ask for different router IDs but the
	// implementation supports one router ID per speaker.
	ErrRouterIDConflict = errors.New("conflicting router IDs")
	// ErrUnsupported means the implementation cannot honour a configured feature.
	ErrUnsupported = errors.New("unsupported BGP feature")
	// ErrNotApplied wraps a SetPaths error of applying (not of refusing a
	// path): the paths may be applied on a retry.
	ErrNotApplied = errors.New("BGP paths not applied")
	// ErrClosed is returned by calls on a closed Speaker.
	ErrClosed = errors.New("BGP speaker closed")
)

// PeerConfig is one BGP session as the speaker core wants it. Name is the
// identity (the BGPPeer object name); every other field is compared by value
// and a change recreates that one session.
type PeerConfig struct {
	// Name identifies the peer; Path.Peers refers to it. Required, unique.
	Name string
	// Address is the neighbor IP. Exactly one of Address and Interface is set.
	Address netip.Addr
	// Interface is the node interface for unnumbered BGP (RFC 5549 style,
	// neighbor discovered by IPv6 link-local). Exactly one of Address and Interface is set.
	Interface string
	// Port is the neighbor's TCP port; 0 means DefaultPort (179).
	Port uint16
	// MyASN is the local ASN announced in OPEN (RFC 4271 §4.2, 4-byte per RFC 6793). Required, non-zero.
	MyASN uint32
	// PeerASN is the expected remote ASN. Required, non-zero. MyASN == PeerASN is iBGP.
	PeerASN uint32
	// LocalASN, if non-zero, replaces MyASN on this session (FRR "local-as X
	// no-prepend replace-as"). The session is iBGP when LocalASN == PeerASN.
	LocalASN uint32
	// RouterID is the BGP identifier (RFC 4271 §4.2); must be IPv4 if set.
	// Implementations with one router ID per speaker reject differing values
	// with ErrRouterIDConflict, and a set of peers none of which sets it with
	// ErrInvalidPeer.
	RouterID netip.Addr
	// SourceAddress, if set, is the local address the session is opened from.
	SourceAddress netip.Addr
	// HoldTime in whole seconds, 0 or >= 3 s (RFC 4271 §4.2). 0 means the
	// implementation default (90 s for gobgp, which cannot send a Hold Time
	// of 0: internal/config refuses holdTime 0 on a BGPPeer).
	HoldTime time.Duration
	// KeepaliveTime in whole seconds; 0 means HoldTime/3 (RFC 4271 §10).
	KeepaliveTime time.Duration
	// ConnectTime is the ConnectRetry timer (RFC 4271 §10) in whole seconds; 0 means default (120 s for gobgp).
	ConnectTime time.Duration
	// Password is the TCP-MD5 key (RFC 2385), already resolved from a Secret; "" = none.
	Password string
	// EBGPMultiHop is the IP TTL for eBGP sessions to non-adjacent peers; 0
	// means directly connected (TTL 1 for eBGP). Must be 0 for iBGP.
	EBGPMultiHop uint8
	// GracefulRestart enables RFC 4724 graceful restart for every enabled
	// family, announcing a restart time of 120 s (RFC 4724 §3).
	GracefulRestart bool
	// VRF, if set, binds the session to that host VRF device.
	VRF string
	// DualStack also negotiates the other address family (IPv4 unicast over
	// an IPv6 session or vice versa, RFC 4760), but no path of that family
	// is announced on it (see Carries). Interface peers always get both.
	DualStack bool
}

// Key is the neighbor identity inside one speaker: the address, or "%"+Interface.
func (p PeerConfig) Key() string {
	if p.Interface != "" {
		return "%" + p.Interface
	}
	return p.Address.String()
}

// PortOrDefault returns Port, or DefaultPort when Port is 0.
func (p PeerConfig) PortOrDefault() uint16 {
	if p.Port == 0 {
		return DefaultPort
	}
	return p.Port
}

// MetricLabel is the MetalLB "peer" metric label: "IP:port" (or "iface:port").
func (p PeerConfig) MetricLabel() string {
	host := p.Interface
	if host == "" {
		host = p.Address.String()
	}
	return netipJoin(host, p.PortOrDefault())
}

func netipJoin(host string, port uint16) string {
	if a, err := netip.ParseAddr(host); err == nil {
		return netip.AddrPortFrom(a, port).String()
	}
	return host + ":" + strconv.Itoa(int(port))
}

// EffectiveASN is the ASN the session presents: LocalASN if set, else MyASN.
func (p PeerConfig) EffectiveASN() uint32 {
	if p.LocalASN != 0 {
		return p.LocalASN
	}
	return p.MyASN
}

// IsIBGP reports whether the session is internal (same ASN both sides).
func (p PeerConfig) IsIBGP() bool { return p.EffectiveASN() == p.PeerASN }

// Validate checks one peer. Errors wrap ErrInvalidPeer and name the field.
func (p PeerConfig) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("peer %q: %s: %s: %w", p.Name, field, fmt.Sprintf(format, args...), ErrInvalidPeer)
	}
	switch {
	case p.Name == "":
		return bad("name", "required")
	case p.Address.IsValid() == (p.Interface != ""):
		return bad("address", "exactly one of address and interface must be set")
	case p.Address.IsValid() && (p.Address.IsUnspecified() || p.Address.Zone() != ""):
		return bad("address", "%s is not a usable neighbor address", p.Address)
	case p.MyASN == 0:
		return bad("myASN", "must be non-zero")
	case p.PeerASN == 0:
		return bad("peerASN", "must be non-zero")
	case p.RouterID.IsValid() && !p.RouterID.Is4():
		return bad("routerID", "%s is not an IPv4 address", p.RouterID)
	case p.HoldTime != 0 && p.HoldTime < 3*time.Second:
		return bad("holdTime", "%s: must be 0 or >= 3s (RFC 4271 §4.2)", p.HoldTime)
	case p.HoldTime%time.Second != 0 || p.KeepaliveTime%time.Second != 0 || p.ConnectTime%time.Second != 0:
		return bad("timers", "must be whole seconds")
	case p.HoldTime > 65535*time.Second || p.ConnectTime > 65535*time.Second:
		return bad("timers", "must be <= 65535s")
	case p.KeepaliveTime < 0 || p.HoldTime < 0 || p.ConnectTime < 0:
		return bad("timers", "must not be negative")
	case p.HoldTime != 0 && p.KeepaliveTime > p.HoldTime:
		return bad("keepaliveTime", "%s exceeds holdTime %s", p.KeepaliveTime, p.HoldTime)
	case p.EBGPMultiHop != 0 && p.IsIBGP():
		return bad("ebgpMultiHop", "not allowed on an iBGP session")
	}
	return nil
}

// ValidatePeers validates every peer and rejects duplicate names and
// neighbor keys (ErrDuplicatePeer). All problems are joined.
func ValidatePeers(peers []PeerConfig) error {
	var errs []error
	names := make(map[string]bool, len(peers))
	keys := make(map[string]string, len(peers))
	for _, p := range peers {
		if err := p.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if names[p.Name] {
			errs = append(errs, fmt.Errorf("peer %q: name: %w", p.Name, ErrDuplicatePeer))
		}
		names[p.Name] = true
		k := p.VRF + "/" + p.Key()
		if other, ok := keys[k]; ok {
			errs = append(errs, fmt.Errorf("peer %q: address %s already used by peer %q: %w", p.Name, p.Key(), other, ErrDuplicatePeer))
		}
		keys[k] = p.Name
	}
	return errors.Join(errs...)
}

// Path is one prefix to announce with its attributes.
type Path struct {
	// Prefix is the announced NLRI; MergePaths masks it (Prefix.Masked()).
	Prefix netip.Prefix
	// Communities are RFC 1997 communities (high 16 bits ASN, low 16 bits value).
	Communities []uint32
	// LargeCommunities are RFC 8092 large communities (global admin, data1, data2).
	LargeCommunities [][3]uint32
	// LocalPref is LOCAL_PREF (RFC 4271 §5.1.5); nil means unset (gobgp sends
	// its default 100 to iBGP peers). Never sent to eBGP peers.
	LocalPref *uint32
	// Peers are the PeerConfig names that receive the path; empty means all peers.
	Peers []string
	// Weight, when non-zero, is this node's share of the prefix's traffic,
	// in endpoints: the path carries the link bandwidth extended community
	// (RFC 10005, formerly draft-ietf-idr-link-bandwidth: two-octet AS
	// specific, sub-type 0x04) with Weight × LinkBandwidthPerWeight
	// bytes/s, so that a router doing weighted ECMP sends each node
	// traffic in proportion to its Weight. 0: no community.
	Weight uint32
	// WeightSource names what Weight counts (the Service, "namespace/name").
	// MergePaths adds the weights of different sources sharing a prefix and
	// takes the largest of one source's (one Service through two
	// advertisements is counted once). "" after MergePaths.
	WeightSource string
}

// LinkBandwidthPerWeight is the bandwidth one unit of Path.Weight stands
// for in the link bandwidth extended community: 125,000 bytes/s (1 Mbit/s,
// the community's unit is bytes per second, RFC 10005 §3). Routers use
// only the ratio between paths; a whole number of Mbit/s survives the
// rounding of routers that keep the value in kbit/s or Mbit/s.
const LinkBandwidthPerWeight = 125_000

// MaxWeight bounds Path.Weight: Weight × LinkBandwidthPerWeight stays below
// 2^32 bytes/s, the range of routers that keep the value as a 32-bit
// integer (FRR). Path.Validate refuses more.
const MaxWeight = 34_000

// Validate checks one path. Errors wrap ErrInvalidPath or ErrReservedCommunity.
func (p Path) Validate() error {
	if !p.Prefix.IsValid() {
		return fmt.Errorf("path %v: prefix: invalid: %w", p.Prefix, ErrInvalidPath)
	}
	if p.Prefix.Addr().Zone() != "" || p.Prefix.Addr().Is4In6() {
		return fmt.Errorf("path %v: prefix: zoned or IPv4-mapped: %w", p.Prefix, ErrInvalidPath)
	}
	for _, lc := range p.LargeCommunities {
		if err := CheckLargeCommunity(lc); err != nil {
			return fmt.Errorf("path %v: %w", p.Prefix, err)
		}
	}
	if slices.Contains(p.Peers, "") {
		return fmt.Errorf("path %v: peers: empty name: %w", p.Prefix, ErrInvalidPath)
	}
	if p.Weight > MaxWeight {
		return fmt.Errorf("path %v: weight %d: more than %d: %w", p.Prefix, p.Weight, MaxWeight, ErrInvalidPath)
	}
	return nil
}

// CheckLargeCommunity reports whether a large community (RFC 8092: Global
// Administrator, Local Data Part 1, Local Data Part 2) may be carried by a
// Path. The one value refused is the Global Administrator
// ReservedLargeCommunityASN (AS 4294967295, reserved by RFC 7300), which the
// gobgp implementation uses for its per-peer markers; the error wraps
// ErrReservedCommunity. Configuration validation (internal/config) and
// Path.Validate both call it, so what the configuration admits is what a
// path can carry.
func CheckLargeCommunity(c [3]uint32) error {
	if c[0] == ReservedLargeCommunityASN {
		return fmt.Errorf("large community %d:%d:%d: Global Administrator %d is reserved (RFC 7300) and used internally by Herald for per-peer markers: %w",
			c[0], c[1], c[2], uint32(ReservedLargeCommunityASN), ErrReservedCommunity)
	}
	return nil
}

// PathError is the refusal of one Path by SetPaths: Err (wrapping
// ErrInvalidPath or ErrReservedCommunity) names the prefix.
type PathError struct {
	Prefix netip.Prefix
	Err    error
}

func (e *PathError) Error() string { return e.Err.Error() }
func (e *PathError) Unwrap() error { return e.Err }

// InvalidPathsError is what SetPaths returns when it refused some paths
// (Path.Validate) and applied every other one: a bad path never blocks the
// rest. Refused is sorted by prefix. A retry with the same paths refuses
// them again; a SetPaths error that also failed to apply wraps
// ErrNotApplied (joined with the *InvalidPathsError, if any).
type InvalidPathsError struct {
	Refused []*PathError
}

func (e *InvalidPathsError) Error() string {
	msgs := make([]string, len(e.Refused))
	for i, r := range e.Refused {
		msgs[i] = r.Error()
	}
	return fmt.Sprintf("%d path(s) refused, the others applied: %s", len(e.Refused), strings.Join(msgs, "; "))
}

// Unwrap returns the refusals, so errors.Is finds ErrInvalidPath and
// ErrReservedCommunity.
func (e *InvalidPathsError) Unwrap() []error {
	out := make([]error, len(e.Refused))
	for i, r := range e.Refused {
		out[i] = r
	}
	return out
}

// ValidatePaths splits paths into the valid ones and the refused ones (nil
// when none). A prefix with one invalid path among several (unmerged paths
// of different Services) keeps its valid paths.
func ValidatePaths(paths []Path) ([]Path, *InvalidPathsError) {
	var refused []*PathError
	valid := make([]Path, 0, len(paths))
	for _, p := range paths {
		if err := p.Validate(); err != nil {
			refused = append(refused, &PathError{Prefix: p.Prefix, Err: err})
			continue
		}
		valid = append(valid, p)
	}
	if refused == nil {
		return paths, nil
	}
	slices.SortStableFunc(refused, func(a, b *PathError) int { return a.Prefix.Addr().Compare(b.Prefix.Addr()) })
	return valid, &InvalidPathsError{Refused: refused}
}

// KeepLastGood returns valid plus, for every refused prefix without a
// valid path, the path previously desired for it (previous is merged: one
// path per prefix), so that refused input leaves the last good path of a
// prefix in force. valid's array may be appended to.
func KeepLastGood(valid []Path, refused *InvalidPathsError, previous []Path) []Path {
	have := make(map[netip.Prefix]bool, len(valid))
	for _, p := range valid {
		have[p.Prefix.Masked()] = true
	}
	prev := make(map[netip.Prefix]Path, len(previous))
	for _, p := range previous {
		prev[p.Prefix] = p
	}
	for _, r := range refused.Refused {
		pfx := r.Prefix.Masked()
		if old, ok := prev[pfx]; ok && !have[pfx] {
			valid = append(valid, old)
			have[pfx] = true
		}
	}
	return valid
}

// Carries reports whether the session carries announced prefixes of a's
// family: the family of Address, or both on an Interface (unnumbered)
// session. DualStack negotiates the other family too (RFC 4760) but
// announces nothing in it: gobgp would send the session's own address as
// the next hop (an IPv4-mapped ::ffff:a.b.c.d for IPv6 over IPv4), which
// routers do not install.
func (p PeerConfig) Carries(a netip.Addr) bool {
	if p.Interface != "" {
		return true
	}
	return p.Address.Is4() == a.Is4()
}

// Receives reports whether the session gets path: the path is sent to it
// (Path.SendsTo), its family is carried (Carries), and a path restricted
// to named peers (Path.Peers) is not on an Interface (unnumbered) session:
// per-peer restriction matches the neighbor by address, so unnumbered
// sessions receive only unrestricted paths. Speaker implementations send
// exactly these paths; ServiceBGPStatus lists exactly these peers.
func (p PeerConfig) Receives(path Path) bool {
	return path.SendsTo(p.Name) && p.Carries(path.Prefix.Addr()) && (len(path.Peers) == 0 || p.Interface == "")
}

// SendsTo reports whether the path goes to the named peer.
func (p Path) SendsTo(peer string) bool {
	return len(p.Peers) == 0 || slices.Contains(p.Peers, peer)
}

// SessionState is the BGP FSM state (RFC 4271 §8.2.2).
type SessionState int

// FSM states.
const (
	StateUnknown SessionState = iota
	StateIdle
	StateConnect
	StateActive
	StateOpenSent
	StateOpenConfirm
	StateEstablished
)

func (s SessionState) String() string {
	switch s {
	case StateIdle:
		return "Idle"
	case StateConnect:
		return "Connect"
	case StateActive:
		return "Active"
	case StateOpenSent:
		return "OpenSent"
	case StateOpenConfirm:
		return "OpenConfirm"
	case StateEstablished:
		return "Established"
	}
	return "Unknown"
}

// PeerState is a snapshot of one session.
type PeerState struct {
	// Name is the PeerConfig name.
	Name string
	// Peer is the "IP:port" label (PeerConfig.MetricLabel).
	Peer string
	// State is the FSM state.
	State SessionState
	// Since is when the session last became Established (zero if never).
	Since time.Time
	// EstablishedCount counts transitions to Established for this session
	// object (reset when the peer is recreated).
	EstablishedCount uint32
	// Advertised is the number of prefixes currently sent to the peer
	// (PeerStates only; 0 in state-change callbacks).
	Advertised uint64
	// Received is the number of prefixes the peer currently sends, before
	// import policy (PeerStates only; 0 in state-change callbacks).
	Received uint64
	// UpdatesSent counts UPDATE messages sent in this session object.
	UpdatesSent uint64
	// PrefixLimitFamily is set when the speaker closed the session because
	// the peer sent more than its received-prefix limit in that address
	// family ("ipv4-unicast", "ipv6-unicast"): a Cease NOTIFICATION with
	// subcode 1, "Maximum Number of Prefixes Reached" (RFC 4486 §4). It is
	// cleared when the session is Established again.
	PrefixLimitFamily string
	// PrefixLimit is the limit that was exceeded (with PrefixLimitFamily).
	PrefixLimit uint32
	// LastError is the latest reason the session went down or was
	// refused, "" if none yet: a NOTIFICATION sent or received (RFC 4271
	// §4.5, "notification received: code 6(cease) subcode 2(administrative
	// shutdown)", with the RFC 8203 shutdown communication when there is
	// one), "session down: <reason>" (hold-timer-expired, read-failed,
	// ...), or "connect: <error>" (the TCP connection failed: refused,
	// timed out). It is kept after the session is Established again.
	LastError string
	// LastErrorTime is when LastError first happened: the same error
	// again (a connection refused on every retry) keeps the time.
	LastErrorTime time.Time
}

// DefaultMaxReceivedPrefixes is the default received-prefix limit per
// session and address family. Herald only announces: it uses no route a
// router sends, but an embedded BGP implementation stores every received
// path (Adj-RIB-In) before import policy runs, so a router that sends a full
// table (about 1M paths) would grow the speaker by about 1 GiB. A session that
// exceeds the limit is closed (Cease, RFC 4486 subcode 1) and retried after
// a pause. 10,000 paths cost about 10 MiB (docs/bgp.md).
const DefaultMaxReceivedPrefixes = 10000

// Speaker is a BGP speaker driven by declarative desired state. All methods
// are safe for concurrent use; SetPeers and SetPaths are idempotent and apply
// only the difference to what is already applied.
type Speaker interface {
	// SetPeers makes the set of sessions equal to peers (validated with
	// ValidatePeers). A changed peer is recreated without touching others.
	SetPeers(ctx context.Context, peers []PeerConfig) error
	// SetPaths makes the announced set equal to paths (already merged with
	// MergePaths: one entry per prefix). Paths are withdrawn only when they
	// disappear from the set. A path that fails Path.Validate is refused
	// alone (an *InvalidPathsError; its prefix keeps its last good path)
	// and every other one is applied; errors of applying wrap
	// ErrNotApplied.
	SetPaths(ctx context.Context, paths []Path) error
	// PeerStates returns a snapshot of every configured session, sorted by name.
	PeerStates() []PeerState
	// ResetPeer closes the session to the peer called name at once (a
	// Cease NOTIFICATION, Administrative Reset, RFC 4486; reason is sent
	// where the link still carries it, RFC 8203, and logged); the session
	// then re-establishes on its own. The speaker calls it when the peer's
	// BFD session goes from Up to Down (RFC 5882 §4.3). An unknown name is
	// an error.
	ResetPeer(ctx context.Context, name, reason string) error
	// Close withdraws everything, closes all sessions (with a Cease
	// NOTIFICATION) and releases resources. Further calls return ErrClosed.
	Close() error
}

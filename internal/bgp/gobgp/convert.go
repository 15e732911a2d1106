package gobgp

import (
	"fmt"
	"hash/fnv"
	"math"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"google.golang.org/protobuf/proto"
	apb "google.golang.org/protobuf/types/known/anypb"

	"github.com/herald-lb/herald/internal/bgp"
)

// gracefulRestartTime is the RFC 4724 restart time announced with
// PeerConfig.GracefulRestart (FRR and gobgp use the same default).
const gracefulRestartTime = 120 * time.Second

var (
	familyV4 = &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	familyV6 = &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}
)

// markerID is the per-peer value carried in the second field of the internal
// marker large community (ReservedLargeCommunityASN:markerID:0). It is a
// 32-bit FNV-1a hash of the peer name, so it is stable across restarts;
// collisions among configured peers are rejected by SetPeers.
func markerID(peerName string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(peerName))
	return h.Sum32()
}

// seconds converts a validated whole-second duration.
func seconds(d time.Duration) uint64 { return uint64(d / time.Second) }

// familiesFor returns the AFI/SAFIs enabled on a session: the family of the
// neighbor address, plus the other one with DualStack (RFC 4760); interface
// (unnumbered) peers get both.
func familiesFor(p bgp.PeerConfig) []*api.Family {
	switch {
	case p.Interface != "" || p.DualStack:
		return []*api.Family{familyV4, familyV6}
	case p.Address.Is4():
		return []*api.Family{familyV4}
	default:
		return []*api.Family{familyV6}
	}
}

// prefixLimitWarnPct is the share of the received-prefix limit at which
// gobgp logs a warning before the limit closes the session.
const prefixLimitWarnPct = 80

// toAPIPeer translates a validated PeerConfig into a gobgp neighbor.
// maxReceived, if non-zero, is the received-prefix limit of every enabled
// family (gobgp's per AFI-SAFI prefix-limit: it closes the session with a
// Cease NOTIFICATION, RFC 4486 subcode 1, once the peer's Adj-RIB-In of that
// family holds more paths).
func toAPIPeer(p bgp.PeerConfig, maxReceived uint32) *api.Peer {
	conf := &api.PeerConf{
		Description: p.Name,
		PeerAsn:     p.PeerASN,
		// Per-session local ASN: gobgp uses it in OPEN, for the AS_PATH
		// prepend and for the iBGP/eBGP decision, so one global ASN serves
		// sessions with different myASN (and localASN).
		LocalAsn:     p.EffectiveASN(),
		AuthPassword: p.Password,
	}
	if p.Interface != "" {
		conf.NeighborInterface = p.Interface
	} else {
		conf.NeighborAddress = p.Address.String()
	}
	transport := &api.Transport{
		RemotePort:    uint32(p.PortOrDefault()),
		BindInterface: p.VRF, // SO_BINDTODEVICE on the VRF master device selects the VRF.
	}
	if p.SourceAddress.IsValid() {
		transport.LocalAddress = p.SourceAddress.String()
	}
	hold := seconds(p.HoldTime)
	keepalive := seconds(p.KeepaliveTime)
	if hold != 0 && keepalive == 0 {
		keepalive = hold / 3 // RFC 4271 §10 suggested ratio; gobgp would otherwise default to 30 s.
	}
	timers := &api.Timers{Config: &api.TimersConfig{
		HoldTime:          hold,
		KeepaliveInterval: keepalive,
		ConnectRetry:      seconds(p.ConnectTime),
		// After ResetPeer (BFD down) reconnect after ConnectRetry, not
		// gobgp's 30 s default.
		IdleHoldTimeAfterReset: seconds(p.ConnectTime),
	}}
	out := &api.Peer{Conf: conf, Transport: transport, Timers: timers}
	if p.EBGPMultiHop > 0 {
		out.EbgpMultihop = &api.EbgpMultihop{Enabled: true, MultihopTtl: uint32(p.EBGPMultiHop)}
	}
	if p.GracefulRestart {
		out.GracefulRestart = &api.GracefulRestart{Enabled: true, RestartTime: uint32(gracefulRestartTime / time.Second)}
	}
	for _, f := range familiesFor(p) {
		as := &api.AfiSafi{Config: &api.AfiSafiConfig{Family: f, Enabled: true}}
		if maxReceived > 0 {
			as.PrefixLimits = &api.PrefixLimit{Family: f, MaxPrefixes: maxReceived, ShutdownThresholdPct: prefixLimitWarnPct}
		}
		if p.GracefulRestart {
			// RFC 4724 §3: the capability lists each AFI/SAFI whose state is preserved.
			as.MpGracefulRestart = &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}
		}
		out.AfiSafis = append(out.AfiSafis, as)
	}
	return out
}

// Link bandwidth extended community (RFC 10005, formerly
// draft-ietf-idr-link-bandwidth): type two-octet AS specific, sub-type 0x04,
// the AS in the Global Administrator field and the bandwidth in bytes per
// second as an IEEE 754 single-precision float in the Local Administrator
// field.
const (
	linkBandwidthSubType = 0x04
	// asTrans stands for a four-octet ASN in a two-octet field (RFC 6793 §9).
	asTrans = 23456
)

// linkBandwidth returns the community for a path of the given weight
// (bgp.Path.Weight × bgp.LinkBandwidthPerWeight bytes/s) from AS asn. It is
// the transitive variant (type 0x00): the non-transitive one (0x40) SHOULD
// NOT cross an AS boundary (RFC 4360 §6), and Herald's sessions are eBGP
// as often as not; this is also what FRR sends by default ("set extcommunity
// bandwidth", draft-ietf-bess-ebgp-dmz) and RFC 10005 receivers treat both
// alike.
func linkBandwidth(asn uint32, weight uint32) *api.TwoOctetAsSpecificExtended {
	if asn > math.MaxUint16 {
		asn = asTrans
	}
	bw := float32(uint64(weight) * bgp.LinkBandwidthPerWeight)
	return &api.TwoOctetAsSpecificExtended{IsTransitive: true, SubType: linkBandwidthSubType, Asn: asn, LocalAdmin: math.Float32bits(bw)}
}

// toAPIPath translates a merged Path into a gobgp path. IPv4 uses NEXT_HOP
// 0.0.0.0 and IPv6 MP_REACH_NLRI with next hop "::" (RFC 4760); gobgp
// replaces an unspecified next hop of a local path with the session's local
// address for both eBGP and iBGP. peers restricts the path with marker
// large communities (see policy.go); nil sends it everywhere. A path with a
// Weight carries the link bandwidth extended community from AS asn (see
// linkBandwidth).
func toAPIPath(p bgp.Path, asn uint32) (*api.Path, error) {
	addr := p.Prefix.Addr()
	nlri, err := apb.New(&api.IPAddressPrefix{Prefix: addr.String(), PrefixLen: uint32(p.Prefix.Bits())})
	if err != nil {
		return nil, fmt.Errorf("encode NLRI %s: %w", p.Prefix, err)
	}
	attrs := make([]*apb.Any, 0, 5)
	add := func(m proto.Message) error {
		a, err := apb.New(m)
		if err != nil {
			return fmt.Errorf("encode attribute for %s: %w", p.Prefix, err)
		}
		attrs = append(attrs, a)
		return nil
	}
	if err := add(&api.OriginAttribute{Origin: 0}); err != nil { // IGP
		return nil, err
	}
	family := familyV4
	if addr.Is4() {
		if err := add(&api.NextHopAttribute{NextHop: "0.0.0.0"}); err != nil {
			return nil, err
		}
	} else {
		family = familyV6
		if err := add(&api.MpReachNLRIAttribute{Family: familyV6, NextHops: []string{"::"}, Nlris: []*apb.Any{nlri}}); err != nil {
			return nil, err
		}
	}
	if len(p.Communities) > 0 {
		if err := add(&api.CommunitiesAttribute{Communities: p.Communities}); err != nil {
			return nil, err
		}
	}
	large := make([]*api.LargeCommunity, 0, len(p.LargeCommunities)+len(p.Peers))
	for _, c := range p.LargeCommunities {
		large = append(large, &api.LargeCommunity{GlobalAdmin: c[0], LocalData1: c[1], LocalData2: c[2]})
	}
	for _, name := range p.Peers {
		large = append(large, &api.LargeCommunity{GlobalAdmin: bgp.ReservedLargeCommunityASN, LocalData1: markerID(name)})
	}
	if len(large) > 0 {
		if err := add(&api.LargeCommunitiesAttribute{Communities: large}); err != nil {
			return nil, err
		}
	}
	if p.LocalPref != nil {
		if err := add(&api.LocalPrefAttribute{LocalPref: *p.LocalPref}); err != nil {
			return nil, err
		}
	}
	if p.Weight > 0 {
		ec, err := apb.New(linkBandwidth(asn, p.Weight))
		if err != nil {
			return nil, fmt.Errorf("encode link bandwidth for %s: %w", p.Prefix, err)
		}
		if err := add(&api.ExtendedCommunitiesAttribute{Communities: []*apb.Any{ec}}); err != nil {
			return nil, err
		}
	}
	return &api.Path{Family: family, Nlri: nlri, Pattrs: attrs}, nil
}

func sessionState(s api.PeerState_SessionState) bgp.SessionState {
	switch s {
	case api.PeerState_IDLE:
		return bgp.StateIdle
	case api.PeerState_CONNECT:
		return bgp.StateConnect
	case api.PeerState_ACTIVE:
		return bgp.StateActive
	case api.PeerState_OPENSENT:
		return bgp.StateOpenSent
	case api.PeerState_OPENCONFIRM:
		return bgp.StateOpenConfirm
	case api.PeerState_ESTABLISHED:
		return bgp.StateEstablished
	}
	return bgp.StateUnknown
}

package bgpconfig

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net/netip"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/herald-lb/herald/internal/bgp"
	"github.com/herald-lb/herald/internal/config"
)

// DefaultConnectTime is the ConnectRetry timer (RFC 4271 §10) used when a
// BGPPeer sets no connectTime: 10 s, instead of gobgp's 120 s.
const DefaultConnectTime = 10 * time.Second

// MultiHopTTL is the IP TTL of eBGP sessions whose BGPPeer sets ebgpMultiHop
// (FRR's default for "neighbor X ebgp-multihop" without a hop count).
const MultiHopTTL = 255

// Errors returned (wrapped, naming the peer) by Peers for peers it leaves out.
var (
	// ErrDynamicASN: the peer uses spec.dynamicASN, which Herald's BGP
	// backend cannot enforce (see the package documentation).
	ErrDynamicASN = errors.New("dynamicASN is not supported by Herald's BGP speaker; set spec.peerASN")
	// ErrZonedAddress: the peer address carries an IPv6 zone; use
	// spec.interface for link-local (unnumbered) sessions.
	ErrZonedAddress = errors.New("peer address with an IPv6 zone is not supported; use spec.interface")
)

// Peers returns the sessions a node opens: one bgp.PeerConfig per peer of snap
// whose nodeSelectors match nodeLabels, sorted by name, with the router ID
// RouterID(snap, nodeName, nodeLabels, nodeIPv4). Peers that cannot be translated are left out and reported in err
// (errors.Join of one error per peer, each wrapping ErrDynamicASN or
// ErrZonedAddress); the others are still returned. A nil snap gives nil.
func Peers(snap *config.Snapshot, nodeName string, nodeLabels labels.Labels, nodeIPv4 netip.Addr) ([]bgp.PeerConfig, error) {
	if snap == nil {
		return nil, nil
	}
	routerID := RouterID(snap, nodeName, nodeLabels, nodeIPv4)
	var (
		out  []bgp.PeerConfig
		errs []error
	)
	for _, p := range snap.PeersForNode(nodeLabels) {
		pc, err := Peer(p, routerID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, pc)
	}
	return out, errors.Join(errs...)
}

// Peer translates one parsed BGPPeer. routerID is the node's router ID
// (the peer's own routerID wins when set). Errors wrap ErrDynamicASN or
// ErrZonedAddress and name the peer.
func Peer(p *config.Peer, routerID netip.Addr) (bgp.PeerConfig, error) {
	if p.DynamicASN != config.DynamicASNNone || p.PeerASN == 0 {
		return bgp.PeerConfig{}, fmt.Errorf("BGPPeer %s: spec.dynamicASN %q: %w", p.Name, p.DynamicASN, ErrDynamicASN)
	}
	if p.Address.Zone() != "" {
		return bgp.PeerConfig{}, fmt.Errorf("BGPPeer %s: spec.peerAddress %s: %w", p.Name, p.Address, ErrZonedAddress)
	}
	pc := bgp.PeerConfig{
		Name:            p.Name,
		Address:         p.Address,
		Interface:       p.Interface,
		Port:            p.Port,
		MyASN:           p.MyASN,
		PeerASN:         p.PeerASN,
		LocalASN:        p.LocalASN,
		RouterID:        routerID,
		SourceAddress:   p.SourceAddress,
		HoldTime:        p.HoldTime,
		KeepaliveTime:   p.KeepaliveTime,
		ConnectTime:     p.ConnectTime,
		Password:        p.Password.Reveal(),
		GracefulRestart: p.GracefulRestart,
		VRF:             p.VRF,
		DualStack:       p.DualStack,
	}
	if p.RouterID.IsValid() {
		pc.RouterID = p.RouterID
	}
	if pc.ConnectTime == 0 {
		pc.ConnectTime = DefaultConnectTime
	}
	if p.EBGPMultiHop && !p.IBGP() {
		pc.EBGPMultiHop = MultiHopTTL
	}
	return pc, nil
}

// RouterID returns the BGP Identifier of a node: the routerID its peers set
// (config.Build makes them agree), else nodeIPv4 when it is an IPv4 address
// (IPv4-mapped ones are unmapped), else NameRouterID(nodeName) for a node
// without IPv4 (as MetalLB derives it), else the zero Addr.
func RouterID(snap *config.Snapshot, nodeName string, nodeLabels labels.Labels, nodeIPv4 netip.Addr) netip.Addr {
	if snap != nil {
		if id := snap.RouterIDForNode(nodeLabels); id.IsValid() {
			return id
		}
	}
	if nodeIPv4.IsValid() && nodeIPv4.Unmap().Is4() {
		return nodeIPv4.Unmap()
	}
	if nodeName != "" {
		return NameRouterID(nodeName)
	}
	return netip.Addr{}
}

// NameRouterID derives a BGP Identifier for a node without IPv4 from its
// name: the CRC-32 (IEEE) of the name as four octets, 0.0.0.1 if that is
// zero. RFC 6286 §2.1 only asks for a non-zero 4-octet value unique within
// the AS; distinct node names collide with probability about n²/2³³, and a
// collision shows as the router refusing the second OPEN. Set routerID on
// the BGPPeers to choose it.
func NameRouterID(nodeName string) netip.Addr {
	v := crc32.ChecksumIEEE([]byte(nodeName))
	if v == 0 {
		v = 1
	}
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

package announce

import (
	"encoding/binary"
	"hash/crc32"
	"net/netip"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/herald-lb/herald/internal/bgp"
	"github.com/herald-lb/herald/internal/config"
)

// DefaultConnectTime is the ConnectRetry timer (RFC 4271 §10) of a session
// whose BGPPeer sets no connectTime: 10 s instead of gobgp's 120 s, so that
// a session to a restarted router comes back quickly (MetalLB's native
// speaker redials within seconds too).
const DefaultConnectTime = 10 * time.Second

// MultiHopTTL is the IP TTL of eBGP sessions whose BGPPeer sets
// ebgpMultiHop (FRR's default for "neighbor X ebgp-multihop" without a hop
// count).
const MultiHopTTL = 255

// Sessions returns the BGP sessions a node opens: one bgp.PeerConfig per
// peer of snap whose nodeSelectors match nodeLabels, sorted by name, each
// with the node's router ID RouterID(snap, nodeName, nodeLabels, nodeIPv4).
// A nil snap gives nil. It cannot fail: config.Build refuses every BGPPeer
// the backend cannot open (dynamicASN, a zoned peerAddress, a holdTime
// above 65535 s, peers of one node disagreeing on myASN or routerID), so
// each result passes bgp.ValidatePeers. BFD sessions are BFDSessions'.
//
// Translation, BGPPeer (v1beta2) field by field:
//
//   - name, myASN, peerASN, localASN, peerAddress or interface, peerPort,
//     sourceAddress, vrf and dualStackAddressFamily are copied.
//   - password / passwordSecret: the TCP-MD5 key (RFC 2385), already read
//     by config.Build from the Secret in Herald's namespace.
//   - holdTime and keepaliveTime: copied (config.Build fills the RFC 4271
//     §10 defaults, 90 s / 30 s, and derives one from the other).
//   - connectTime: copied; DefaultConnectTime when unset.
//   - ebgpMultiHop: sets the IP TTL of an eBGP session to MultiHopTTL; eBGP
//     sessions without it use TTL 1 (directly connected). Never on iBGP.
//   - enableGracefulRestart: RFC 4724 graceful restart (restart time 120 s).
//   - routerID: see RouterID.
func Sessions(snap *config.Snapshot, nodeName string, nodeLabels labels.Labels, nodeIPv4 netip.Addr) []bgp.PeerConfig {
	if snap == nil {
		return nil
	}
	routerID := RouterID(snap, nodeName, nodeLabels, nodeIPv4)
	var out []bgp.PeerConfig
	for _, p := range snap.PeersForNode(nodeLabels) {
		out = append(out, session(p, routerID))
	}
	return out
}

// session translates one parsed BGPPeer; routerID is the node's.
func session(p *config.Peer, routerID netip.Addr) bgp.PeerConfig {
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
	if pc.ConnectTime == 0 {
		pc.ConnectTime = DefaultConnectTime
	}
	if p.EBGPMultiHop && !p.IBGP() {
		pc.EBGPMultiHop = MultiHopTTL
	}
	return pc
}

// RouterID returns the BGP Identifier (RFC 4271 §4.2) of a node: the
// routerID its peers set (config.Build makes them agree), else nodeIPv4
// when it is an IPv4 address (IPv4-mapped ones are unmapped; normally the
// node's InternalIP), else NameRouterID(nodeName) for a node without IPv4
// (as MetalLB derives it), else the zero Addr. snap may be nil.
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

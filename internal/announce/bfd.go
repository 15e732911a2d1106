package announce

import (
	"net/netip"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/herald-lb/herald/internal/bfd"
	"github.com/herald-lb/herald/internal/config"
)

// BFDSession is the BFD session (RFC 5880 asynchronous mode) a node runs
// alongside the BGP session of one BGPPeer that names a BFDProfile.
type BFDSession struct {
	// Peer is the BGPPeer's name, the Name of its bgp.PeerConfig.
	Peer string
	// Address is the peer's address (spec.peerAddress, never zoned).
	Address netip.Addr
	// Local is spec.sourceAddress: the source of sent packets. The zero
	// Addr (single hop only) lets the kernel choose.
	Local netip.Addr
	// Multihop is RFC 5883 (UDP 4784, spec.ebgpMultiHop); otherwise RFC
	// 5881 single hop (UDP 3784, TTL 255).
	Multihop bool
	// Params are the BFDProfile's fields (config.BFDProfile.Params).
	Params bfd.Params
	// Profile is the BFDProfile's name, for logs and events.
	Profile string
}

// BFDSessions returns the BFD sessions a node runs: one per peer of snap
// selecting nodeLabels (the peers of Sessions) that names a BFDProfile,
// sorted by peer name. A nil snap gives nil. config.Build refuses BFD
// where it cannot run (interface and VRF peers, multihop without
// sourceAddress), so each result has an address and, when Multihop, a
// local address.
func BFDSessions(snap *config.Snapshot, nodeLabels labels.Labels) []BFDSession {
	if snap == nil {
		return nil
	}
	var out []BFDSession
	for _, p := range snap.PeersForNode(nodeLabels) {
		if p.BFD == nil || !p.Address.IsValid() {
			continue
		}
		out = append(out, BFDSession{
			Peer: p.Name, Address: p.Address, Local: p.SourceAddress,
			Multihop: p.EBGPMultiHop && !p.IBGP(),
			Params:   p.BFD.Params(), Profile: p.BFD.Name,
		})
	}
	return out
}

package speaker

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/herald-lb/herald/internal/announce"
	"github.com/herald-lb/herald/internal/bfd"
)

// Event reasons on a BGPPeer for its BFD session.
const (
	reasonBFDDown = "bfdSessionDown"
	reasonBFDUp   = "bfdSessionUp"
)

// BFDSessions runs this node's BFD sessions (speaker/main.go wires
// internal/bfd/bfdnet).
type BFDSessions interface {
	// SetSessions makes the running sessions equal to sessions (one per
	// peer address): adds new ones, updates changed parameters (a Poll
	// Sequence, RFC 5880 §6.5), restarts a session whose local address or
	// hop mode changed, and removes the others (AdminDown, RFC 5880
	// §6.8.16). Errors of single sessions are joined; the rest is applied.
	SetSessions(sessions []announce.BFDSession) error
}

// BFDChange is a state change of the BFD session of a BGPPeer, as
// delivered on Options.BFDChanges.
type BFDChange struct {
	// Peer is the BGPPeer's name; Address its peerAddress.
	Peer    string
	Address netip.Addr
	bfd.Transition
	Time time.Time
}

// bfdState keeps when each peer's BFD session last went down (for the
// time down in the up event).
type bfdState struct {
	mu   sync.Mutex
	down map[string]time.Time
}

// syncBFD applies the node's BFD sessions.
func (s *Controller) syncBFD(sessions []announce.BFDSession) error {
	if s.opts.BFD == nil {
		return nil
	}
	if err := s.opts.BFD.SetSessions(sessions); err != nil {
		s.log.Error("applying BFD sessions failed", "error", err)
		return fmt.Errorf("apply BFD sessions: %w", err)
	}
	return nil
}

// bfdChange acts on one BFD state change. Up to Down (detection time
// expired, or the peer signalled Down or AdminDown) resets the BGP session
// to that peer at once (RFC 5882 §4.3: BFD as the session's liveness
// detection), with a bfdSessionDown event; BGP then re-establishes on its
// own when the path works again. Up is reported (bfdSessionUp, with the
// time down). Our own removal (AdminDown, CauseAdmin) changes nothing.
//
// The BGP session is reset, not held down until BFD is Up: a router with
// dynamic neighbors (FRR's "bgp listen range") deletes the neighbor, and
// with it its BFD session, when BGP goes down, so BFD could never come up
// again while BGP waited for it.
func (s *Controller) bfdChange(ctx context.Context, c BFDChange) {
	if c.Cause != bfd.CauseAdmin {
		s.sessions.bfdState(c.Peer, c.To)
	}
	switch {
	case c.Cause == bfd.CauseAdmin:
		return
	case c.From == bfd.StateUp && c.To != bfd.StateUp:
		s.bfd.mu.Lock()
		s.bfd.down[c.Peer] = c.Time
		s.bfd.mu.Unlock()
		err := s.opts.BGP.ResetPeer(ctx, c.Peer, fmt.Sprintf("BFD session down (%s)", c.Diag))
		s.log.Warn("BFD session down: BGP session reset", "peer", c.Peer, "address", c.Address,
			"state", c.To.String(), "diag", c.Diag.String(), "error", err)
		s.peerEvent(ctx, c.Peer, corev1.EventTypeWarning, reasonBFDDown,
			"BFD session to %s down on node %s (%s): BGP session reset", c.Address, s.opts.NodeName, c.Diag)
	case c.To == bfd.StateUp:
		s.bfd.mu.Lock()
		since, wasDown := s.bfd.down[c.Peer]
		delete(s.bfd.down, c.Peer)
		s.bfd.mu.Unlock()
		if wasDown {
			d := c.Time.Sub(since).Round(time.Millisecond)
			s.log.Info("BFD session up again", "peer", c.Peer, "address", c.Address, "down", d.String())
			s.peerEvent(ctx, c.Peer, corev1.EventTypeNormal, reasonBFDUp,
				"BFD session to %s up again on node %s after %s", c.Address, s.opts.NodeName, d)
			return
		}
		s.log.Info("BFD session up", "peer", c.Peer, "address", c.Address)
		s.peerEvent(ctx, c.Peer, corev1.EventTypeNormal, reasonBFDUp, "BFD session to %s up on node %s", c.Address, s.opts.NodeName)
	}
}

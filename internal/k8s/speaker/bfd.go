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

// bfdState is what the glue knows of the BFD sessions: which BGP sessions
// it holds down, and when each BFD session last went down (for the
// measured time in the up event).
type bfdState struct {
	mu   sync.Mutex
	held map[string]bool
	down map[string]time.Time
}

// syncBFD applies the node's BFD sessions and releases the BGP sessions
// held down for a peer that no longer has one.
func (s *Controller) syncBFD(ctx context.Context, sessions []announce.BFDSession) error {
	if s.opts.BFD == nil {
		return nil
	}
	err := s.opts.BFD.SetSessions(sessions)
	want := map[string]bool{}
	for _, b := range sessions {
		want[b.Peer] = true
	}
	s.bfd.mu.Lock()
	var release []string
	for name := range s.bfd.held {
		if !want[name] {
			release = append(release, name)
			delete(s.bfd.held, name)
		}
	}
	s.bfd.mu.Unlock()
	for _, name := range release {
		if rerr := s.opts.BGP.SetPeerHeld(ctx, name, false, "BFD no longer configured"); rerr != nil {
			s.log.Error("releasing the BGP session held down by BFD failed", "peer", name, "error", rerr)
		}
	}
	if err != nil {
		s.log.Error("applying BFD sessions failed", "error", err)
		return fmt.Errorf("apply BFD sessions: %w", err)
	}
	return nil
}

// bfdChange acts on one BFD state change: Up to Down (detection time
// expired or the peer signalled Down or AdminDown) closes the BGP session
// to that peer at once and holds it down; Up again releases it (RFC 5882
// §4.3: BFD as the BGP session's liveness). Our own removal (AdminDown,
// CauseAdmin) changes nothing.
func (s *Controller) bfdChange(ctx context.Context, c BFDChange) {
	switch {
	case c.Cause == bfd.CauseAdmin:
		return
	case c.From == bfd.StateUp && c.To != bfd.StateUp:
		s.bfd.mu.Lock()
		s.bfd.held[c.Peer] = true
		s.bfd.down[c.Peer] = c.Time
		s.bfd.mu.Unlock()
		reason := fmt.Sprintf("BFD session down (%s)", c.Diag)
		err := s.opts.BGP.SetPeerHeld(ctx, c.Peer, true, reason)
		s.log.Warn("BFD session down: BGP session closed and held down", "peer", c.Peer, "address", c.Address,
			"state", c.To, "diag", c.Diag, "error", err)
		s.peerEvent(ctx, c.Peer, corev1.EventTypeWarning, reasonBFDDown,
			"BFD session to %s down on node %s (%s): BGP session closed until BFD is up again", c.Address, s.opts.NodeName, c.Diag)
	case c.To == bfd.StateUp:
		s.bfd.mu.Lock()
		wasHeld := s.bfd.held[c.Peer]
		delete(s.bfd.held, c.Peer)
		since, wasDown := s.bfd.down[c.Peer]
		delete(s.bfd.down, c.Peer)
		s.bfd.mu.Unlock()
		var err error
		if wasHeld {
			err = s.opts.BGP.SetPeerHeld(ctx, c.Peer, false, "BFD session up")
		}
		s.log.Info("BFD session up", "peer", c.Peer, "address", c.Address, "bgpReleased", wasHeld, "error", err)
		if wasDown {
			s.peerEvent(ctx, c.Peer, corev1.EventTypeNormal, reasonBFDUp,
				"BFD session to %s up again on node %s after %s: BGP session re-establishing", c.Address, s.opts.NodeName, c.Time.Sub(since).Round(time.Millisecond))
		} else {
			s.peerEvent(ctx, c.Peer, corev1.EventTypeNormal, reasonBFDUp, "BFD session to %s up on node %s", c.Address, s.opts.NodeName)
		}
	}
}

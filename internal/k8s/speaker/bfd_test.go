package speaker

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/announce"
	"github.com/herald-lb/herald/internal/bfd"
	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

// fakeBFD records the sessions the glue applies (the UDP side is
// internal/bfd/bfdnet's, tested against FRR's bfdd there and in e2e).
type fakeBFD struct {
	mu       sync.Mutex
	sessions []announce.BFDSession
	calls    int
}

func (f *fakeBFD) SetSessions(s []announce.BFDSession) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sessions, f.calls = slices.Clone(s), f.calls+1
	return nil
}

func (f *fakeBFD) get() []announce.BFDSession {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sessions)
}

// TestBFDResetsBGP: a BGPPeer naming a BFDProfile gets a BFD session
// with the profile's parameters; BFD Up to Down resets that BGP session
// with a bfdSessionDown event, Up again gives bfdSessionUp with the time
// down, our own AdminDown changes nothing, and dropping the profile from
// the peer removes the session.
func TestBFDResetsBGP(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	c := env.Client
	ns := env.Namespace(t)
	createReadyNode(t, c, "n1", "198.51.100.11")
	u32 := func(v uint32) *uint32 { return &v }
	must(t, c.Create(ctx, &v1beta1.BFDProfile{ObjectMeta: metav1.ObjectMeta{Name: "fast", Namespace: ns},
		Spec: v1beta1.BFDProfileSpec{ReceiveInterval: u32(300), TransmitInterval: u32(300), DetectMultiplier: u32(3)}}))
	peer := &v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: ns},
		Spec: v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64513, PeerAddress: "203.0.113.1", BFDProfile: "fast"}}
	must(t, c.Create(ctx, peer))
	s := startSpeakerWith(t, env, ns, "n1", nil, 7946)

	addr := netip.MustParseAddr("203.0.113.1")
	poll.Until(t, 30*time.Second, "BFD session applied", func() error {
		got := s.bfd.get()
		want := bfd.Params{ReceiveInterval: 300 * time.Millisecond, TransmitInterval: 300 * time.Millisecond, DetectMultiplier: 3, MinimumTTL: 254}
		if len(got) != 1 || got[0].Peer != "p1" || got[0].Address != addr || got[0].Multihop || got[0].Params != want {
			return fmt.Errorf("sessions %+v", got)
		}
		if len(s.bgp.Peers()) != 1 {
			return errors.New("BGP peer not applied")
		}
		return nil
	})

	send := func(from, to bfd.State, cause bfd.Cause) {
		s.bfdCh <- BFDChange{Peer: "p1", Address: addr, Transition: bfd.Transition{From: from, To: to, Diag: bfd.DiagControlDetectionTimeExpired, Cause: cause}, Time: time.Now()}
	}
	event := func(what, substr string) {
		t.Helper()
		poll.Until(t, 10*time.Second, what, func() error {
			if !s.rec.has(substr) {
				return fmt.Errorf("events %v", s.rec.all())
			}
			return nil
		})
	}
	send(bfd.StateDown, bfd.StateUp, bfd.CauseReceived)
	event("bfdSessionUp event", "BGPPeer/p1 Normal bfdSessionUp: BFD session to 203.0.113.1 up on node n1")
	if n := s.bgp.Resets("p1"); n != 0 {
		t.Fatalf("BGP reset %d times by BFD coming up", n)
	}

	send(bfd.StateUp, bfd.StateDown, bfd.CauseDetectionTimer)
	event("bfdSessionDown event", "BGPPeer/p1 Warning bfdSessionDown: BFD session to 203.0.113.1 down on node n1 (Control Detection Time Expired): BGP session reset")
	if n := s.bgp.Resets("p1"); n != 1 {
		t.Fatalf("BGP reset %d times, want 1", n)
	}
	send(bfd.StateDown, bfd.StateUp, bfd.CauseReceived)
	event("bfdSessionUp event with the time down", "bfdSessionUp: BFD session to 203.0.113.1 up again on node n1 after")

	// Our own removal (AdminDown, CauseAdmin) resets nothing.
	send(bfd.StateUp, bfd.StateAdminDown, bfd.CauseAdmin)
	send(bfd.StateDown, bfd.StateUp, bfd.CauseReceived) // a marker: handled after the AdminDown
	poll.Until(t, 10*time.Second, "marker handled", func() error {
		if n := s.rec.count("bfdSessionUp: BFD session to 203.0.113.1 up on node n1"); n != 2 {
			return fmt.Errorf("%d first-up events", n)
		}
		return nil
	})
	if n := s.bgp.Resets("p1"); n != 1 {
		t.Errorf("BGP reset %d times after our own AdminDown, want 1", n)
	}

	must(t, c.Get(ctx, client.ObjectKeyFromObject(peer), peer))
	peer.Spec.BFDProfile = ""
	must(t, c.Update(ctx, peer))
	poll.Until(t, 30*time.Second, "BFD session removed", func() error {
		if got := s.bfd.get(); len(got) != 0 {
			return fmt.Errorf("sessions %+v", got)
		}
		return nil
	})
}

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

// TestBFDHoldsBGPDown: a BGPPeer naming a BFDProfile gets a BFD session
// with the profile's parameters; BFD Up to Down holds that BGP session down
// with a bfdSessionDown event, Up releases it with bfdSessionUp, our own
// AdminDown changes nothing, and dropping the profile from the peer
// removes the session and releases a held BGP session.
func TestBFDHoldsBGPDown(t *testing.T) {
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
	send(bfd.StateDown, bfd.StateUp, bfd.CauseReceived)
	poll.Until(t, 10*time.Second, "bfdSessionUp event", func() error {
		if !s.rec.has("BGPPeer/p1 Normal bfdSessionUp: BFD session to 203.0.113.1 up on node n1") {
			return fmt.Errorf("events %v", s.rec.events)
		}
		return nil
	})
	if s.bgp.Held("p1") {
		t.Fatal("BGP held down after BFD came up the first time")
	}

	send(bfd.StateUp, bfd.StateDown, bfd.CauseDetectionTimer)
	poll.Until(t, 10*time.Second, "BGP held down, bfdSessionDown event", func() error {
		if !s.bgp.Held("p1") {
			return errors.New("BGP session not held down")
		}
		if !s.rec.has("BGPPeer/p1 Warning bfdSessionDown: BFD session to 203.0.113.1 down on node n1 (Control Detection Time Expired): BGP session closed until BFD is up again") {
			return fmt.Errorf("events %v", s.rec.events)
		}
		return nil
	})

	send(bfd.StateDown, bfd.StateUp, bfd.CauseReceived)
	poll.Until(t, 10*time.Second, "BGP released, bfdSessionUp event with the time down", func() error {
		if s.bgp.Held("p1") {
			return errors.New("BGP session still held down")
		}
		if !s.rec.has("bfdSessionUp: BFD session to 203.0.113.1 up again on node n1 after") {
			return fmt.Errorf("events %v", s.rec.events)
		}
		return nil
	})

	// Our own removal (AdminDown, CauseAdmin) holds nothing.
	send(bfd.StateUp, bfd.StateAdminDown, bfd.CauseAdmin)
	// Down again, then the profile is dropped from the peer: the BFD
	// session goes and the BGP session is released.
	send(bfd.StateUp, bfd.StateDown, bfd.CauseDetectionTimer)
	poll.Until(t, 10*time.Second, "held down again", func() error {
		if !s.bgp.Held("p1") {
			return errors.New("BGP session not held down")
		}
		return nil
	})
	if n := s.rec.count("bfdSessionDown"); n != 2 {
		t.Errorf("%d bfdSessionDown events, want 2 (our AdminDown is none)", n)
	}
	must(t, c.Get(ctx, client.ObjectKeyFromObject(peer), peer))
	peer.Spec.BFDProfile = ""
	must(t, c.Update(ctx, peer))
	poll.Until(t, 30*time.Second, "BFD session removed, BGP released", func() error {
		if got := s.bfd.get(); len(got) != 0 {
			return fmt.Errorf("sessions %+v", got)
		}
		if s.bgp.Held("p1") {
			return errors.New("BGP session still held down")
		}
		return nil
	})
}

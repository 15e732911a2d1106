package speaker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1alpha1"
	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/bfd"
	"github.com/herald-lb/herald/internal/bgp"
	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

func TestSessionStateName(t *testing.T) {
	long := strings.Repeat("a", 200)
	for _, tc := range []struct{ node, peer string }{
		{"n1", "p1"}, {"a-b", "c"}, {"a", "b-c"}, {long, long + ".x"}, {"node.example.com", "peer.example"},
	} {
		name := sessionStateName(tc.node, tc.peer)
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("sessionStateName(%q, %q) = %q: %v", tc.node, tc.peer, name, errs)
		}
	}
	if sessionStateName("a-b", "c") == sessionStateName("a", "b-c") {
		t.Error("node a-b peer c and node a peer b-c share an object name")
	}
}

// TestBGPSessionStates runs a speaker against a real API server: one
// BGPSessionState per configured peer, owned by the Node, with BFD "N/A"
// or the BFD state; a state change is written; a flap of many changes is
// coalesced into a few writes bounded by the write interval and ends with
// the latest state; an object an earlier speaker left for a peer that is
// gone is deleted, as is one of this node under a name no speaker uses,
// another node's object is left alone, and deleting a BGPPeer deletes its
// object.
func TestBGPSessionStates(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	c := env.Client
	ns := env.Namespace(t)
	createReadyNode(t, c, "n1", "198.51.100.11")
	u32 := func(v uint32) *uint32 { return &v }
	must(t, c.Create(ctx, &v1beta1.BFDProfile{ObjectMeta: metav1.ObjectMeta{Name: "fast", Namespace: ns},
		Spec: v1beta1.BFDProfileSpec{ReceiveInterval: u32(300), TransmitInterval: u32(300), DetectMultiplier: u32(3)}}))
	must(t, c.Create(ctx, &v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: ns},
		Spec: v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64513, PeerAddress: "203.0.113.1"}}))
	p2 := &v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "p2", Namespace: ns},
		Spec: v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64513, PeerAddress: "203.0.113.2", BFDProfile: "fast"}}
	must(t, c.Create(ctx, p2))
	// Left by earlier speakers: n1's for a peer that is gone, n2's for p1.
	for _, o := range []struct{ node, peer string }{{"n1", "gone"}, {"n2", "p1"}} {
		obj := &v1alpha1.BGPSessionState{ObjectMeta: metav1.ObjectMeta{Name: sessionStateName(o.node, o.peer), Namespace: ns,
			Labels: map[string]string{v1alpha1.LabelNode: o.node}}}
		must(t, c.Create(ctx, obj))
		obj.Status = v1alpha1.BGPSessionStateStatus{Node: o.node, BGPPeer: o.peer, BGPStatus: "Established"}
		must(t, c.Status().Update(ctx, obj))
	}
	// n1's for p1, marked not known by the controller while no speaker
	// ran (internal/k8s/sessiongc): the new speaker overwrites the mark.
	marked := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	var n1 corev1.Node
	must(t, c.Get(ctx, client.ObjectKey{Name: "n1"}, &n1))
	p1Marked := &v1alpha1.BGPSessionState{ObjectMeta: metav1.ObjectMeta{Name: sessionStateName("n1", "p1"), Namespace: ns,
		Labels:          map[string]string{v1alpha1.LabelNode: "n1", v1alpha1.LabelBGPPeer: "p1"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n1", UID: n1.UID}}}}
	must(t, c.Create(ctx, p1Marked))
	p1Marked.Status = v1alpha1.BGPSessionStateStatus{Node: "n1", Peer: "203.0.113.1", BGPPeer: "p1", BGPStatus: "Unknown", BFDStatus: "N/A",
		LastTransitionTime: &marked, LastErrorTime: &marked,
		LastError: "speaker on node n1 not running since " + marked.UTC().Format(time.RFC3339) + ": speaker container not running"}
	must(t, c.Status().Update(ctx, p1Marked))

	// And one of n1 that no speaker names so (another writer's).
	stray := &v1alpha1.BGPSessionState{ObjectMeta: metav1.ObjectMeta{Name: "stray", Namespace: ns,
		Labels: map[string]string{v1alpha1.LabelNode: "n1"}}}
	must(t, c.Create(ctx, stray))

	s := startSpeakerWith(t, env, ns, "n1", nil, 7946)
	get := func(peer string) (*v1alpha1.BGPSessionState, error) {
		var o v1alpha1.BGPSessionState
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: sessionStateName("n1", peer)}, &o)
		return &o, err
	}
	poll.Until(t, 30*time.Second, "objects of p1 and p2", func() error {
		for peer, want := range map[string]v1alpha1.BGPSessionStateStatus{
			"p1": {Node: "n1", Peer: "203.0.113.1", BGPPeer: "p1", BGPStatus: "Unknown", BFDStatus: "N/A"},
			"p2": {Node: "n1", Peer: "203.0.113.2", BGPPeer: "p2", BGPStatus: "Unknown", BFDStatus: "Down"},
		} {
			o, err := get(peer)
			if err != nil {
				return err
			}
			if o.Status != want {
				return fmt.Errorf("%s: status %+v, want %+v", peer, o.Status, want)
			}
			if len(o.OwnerReferences) != 1 || o.OwnerReferences[0].Kind != "Node" || o.OwnerReferences[0].Name != "n1" {
				return fmt.Errorf("%s: owners %+v, want the Node n1", peer, o.OwnerReferences)
			}
			if o.Labels[v1alpha1.LabelNode] != "n1" || o.Labels[v1alpha1.LabelBGPPeer] != peer {
				return fmt.Errorf("%s: labels %v", peer, o.Labels)
			}
		}
		return nil
	})
	poll.Until(t, 30*time.Second, "n1's object of the gone peer deleted", func() error {
		_, err := get("gone")
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%w)", err)
	})
	poll.Until(t, 30*time.Second, "n1's stray object deleted", func() error {
		err := c.Get(ctx, client.ObjectKeyFromObject(stray), &v1alpha1.BGPSessionState{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%w)", err)
	})
	var other v1alpha1.BGPSessionState
	must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: sessionStateName("n2", "p1")}, &other))

	// Established, BFD Up.
	s.states.Put(bgp.PeerState{Name: "p1", State: bgp.StateEstablished})
	s.bfdCh <- BFDChange{Peer: "p2", Transition: bfd.Transition{From: bfd.StateDown, To: bfd.StateUp}, Time: time.Now()}
	poll.Until(t, 30*time.Second, "p1 Established, p2's BFD Up", func() error {
		o, err := get("p1")
		if err != nil {
			return err
		}
		if o.Status.BGPStatus != "Established" || o.Status.LastTransitionTime == nil {
			return fmt.Errorf("p1 %+v", o.Status)
		}
		if o, err = get("p2"); err != nil || o.Status.BFDStatus != "Up" {
			return fmt.Errorf("p2 %+v %w", o.Status, err)
		}
		return nil
	})

	// A flap: 40 changes, the last one Active with a NOTIFICATION.
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	must(t, err)
	start, err := get("p1")
	must(t, err)
	w, err := wc.Watch(ctx, &v1alpha1.BGPSessionStateList{}, client.InNamespace(ns),
		client.MatchingFields{"metadata.name": start.Name}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: start.ResourceVersion}})
	must(t, err)
	defer w.Stop()
	const lastErr = "notification received: code 6(cease) subcode 2(administrative shutdown)"
	// The changes are spread over two session checks each (75 ms apart),
	// time enough for a writer without the interval to write every one.
	const flaps = 40
	began := time.Now()
	for i := range flaps {
		st := flapState(i, flaps, lastErr)
		checks := s.spk.sessionChecks.Load()
		s.states.Put(st)
		poll.Until(t, 30*time.Second, "two session checks", func() bool { return s.spk.sessionChecks.Load() >= checks+2 })
	}
	writes := 0
	deadline := time.After(60 * time.Second)
	for done := false; !done; {
		select {
		case ev := <-w.ResultChan():
			if ev.Type != watch.Modified {
				t.Fatalf("watch event %s %+v", ev.Type, ev.Object)
			}
			writes++
			o := ev.Object.(*v1alpha1.BGPSessionState)
			done = o.Status.BGPStatus == "Active" && o.Status.LastError == lastErr && o.Status.LastErrorTime != nil
		case <-deadline:
			t.Fatalf("the flap's last state (Active, %q) not written within 60s (%d writes)", lastErr, writes)
		}
	}
	elapsed := time.Since(began)
	// One write per interval at most, plus the first one at once.
	if bound := 2 + int(elapsed/testSessionStateInterval); writes > bound {
		t.Errorf("%d state changes in %s: %d writes, want at most %d (one per %s)", flaps, elapsed, writes, bound, testSessionStateInterval)
	}
	t.Logf("%d state changes: %d writes in %s", flaps, writes, elapsed)

	// Deleting the BGPPeer deletes its object.
	must(t, c.Delete(ctx, p2))
	poll.Until(t, 30*time.Second, "p2's object deleted", func() error {
		_, err := get("p2")
		if apierrors.IsNotFound(err) {
			return nil
		}
		return errors.Join(errors.New("still there"), err)
	})
	if _, err := get("p1"); err != nil {
		t.Errorf("p1's object: %v", err)
	}
}

// reportingBGP is bgp.Fake whose SetPeers, when it applies a peer at
// reportAddr, reports that session Active (as gobgp does while it adds the
// neighbor) and waits until the speaker has recorded it: the state change
// of the new session arrives before SetPeers returns.
type reportingBGP struct {
	*bgp.Fake
	reportAddr string
	report     func(bgp.PeerState) // sends into the speaker and waits
}

func (b *reportingBGP) SetPeers(ctx context.Context, peers []bgp.PeerConfig) error {
	if err := b.Fake.SetPeers(ctx, peers); err != nil {
		return err
	}
	for _, p := range peers {
		if p.Address.String() == b.reportAddr {
			b.report(bgp.PeerState{Name: p.Name, Peer: p.MetricLabel(), State: bgp.StateActive})
		}
	}
	return nil
}

// TestBGPSessionStateAfterAddressChange: a BGPPeer's peerAddress changes;
// the speaker's BGP reports the new session Active while it applies the
// peers (before SetPeers returns). The object shows Active, the new
// session's state, not Unknown (the state it had before it was reported):
// a session retrying in Active reports no further change. The old
// session's lastError is not the new one's.
func TestBGPSessionStateAfterAddressChange(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	c := env.Client
	ns := env.Namespace(t)
	createReadyNode(t, c, "n1", "198.51.100.11")
	peer := &v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: ns},
		Spec: v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64513, PeerAddress: "203.0.113.1"}}
	must(t, c.Create(ctx, peer))
	s := startSpeakerProbed(t, env, ns, "n1", nil, 7946, "0", func(ts *testSpeaker, o *Options) {
		o.BGP = &reportingBGP{Fake: ts.bgp, reportAddr: "198.51.100.8", report: func(st bgp.PeerState) {
			ts.states.Put(st)
			poll.Until(t, 30*time.Second, "the speaker recorded the new session's state", func() bool {
				w := ts.spk.sessions
				w.mu.Lock()
				defer w.mu.Unlock()
				e := w.entries[st.Name]
				return e != nil && e.state == st.State
			})
		}}
	})
	get := func() (*v1alpha1.BGPSessionState, error) {
		var o v1alpha1.BGPSessionState
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: sessionStateName("n1", "p1")}, &o)
		return &o, err
	}
	const oldErr = "connect: dial tcp 203.0.113.1:179: connect: connection refused"
	s.states.Put(bgp.PeerState{Name: "p1", State: bgp.StateEstablished, LastError: oldErr, LastErrorTime: time.Now()})
	poll.Until(t, 30*time.Second, "p1 Established at 203.0.113.1", func() error {
		o, err := get()
		if err != nil {
			return err
		}
		if o.Status.BGPStatus != "Established" || o.Status.Peer != "203.0.113.1" || o.Status.LastError != oldErr {
			return fmt.Errorf("status %+v", o.Status)
		}
		return nil
	})

	must(t, c.Patch(ctx, peer, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"peerAddress":"198.51.100.8"}}`))))
	poll.Until(t, 30*time.Second, "p1 Active at 198.51.100.8", func() error {
		o, err := get()
		if err != nil {
			return err
		}
		if o.Status.BGPStatus != "Active" || o.Status.Peer != "198.51.100.8" || o.Status.LastError != "" || o.Status.LastErrorTime != nil {
			return fmt.Errorf("status %+v", o.Status)
		}
		return nil
	})
}

// TestBGPSessionStateAfterFlood: far more state changes than the speaker
// queues one by one (bgp.DefaultStateChangesQueue) arrive before it takes
// any (here: before it starts), the last one Active while the session
// retries, after which gobgp reports nothing more. The object shows that
// last state; a queue that drops the changes that do not fit (as the
// speaker's 64-slot channel did) would leave it at the 64th for good.
func TestBGPSessionStateAfterFlood(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	c := env.Client
	ns := env.Namespace(t)
	createReadyNode(t, c, "n1", "198.51.100.11")
	must(t, c.Create(ctx, &v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: ns},
		Spec: v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64513, PeerAddress: "203.0.113.1"}}))
	const lastErr = "connect: dial tcp 203.0.113.1:179: connect: connection refused"
	const changes = 3 * bgp.DefaultStateChangesQueue
	startSpeakerProbed(t, env, ns, "n1", nil, 7946, "0", func(ts *testSpeaker, _ *Options) {
		for i := range changes {
			ts.states.Put(flapState(i, changes, lastErr))
		}
	})
	poll.Until(t, 30*time.Second, "p1's object shows the last change (Active)", func() error {
		var o v1alpha1.BGPSessionState
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: sessionStateName("n1", "p1")}, &o); err != nil {
			return err
		}
		if o.Status.BGPStatus != "Active" || o.Status.LastError != lastErr {
			return fmt.Errorf("status %+v", o.Status)
		}
		return nil
	})
}

// flapState is change i of n of session p1 flapping: Idle and Established
// in turn, the last one Active with lastErr.
func flapState(i, n int, lastErr string) bgp.PeerState {
	switch {
	case i == n-1:
		return bgp.PeerState{Name: "p1", State: bgp.StateActive, LastError: lastErr, LastErrorTime: time.Now()}
	case i%2 == 1:
		return bgp.PeerState{Name: "p1", State: bgp.StateEstablished}
	}
	return bgp.PeerState{Name: "p1", State: bgp.StateIdle}
}

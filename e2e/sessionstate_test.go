package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1alpha1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/e2e/lab"
	"github.com/herald-lb/herald/internal/poll"
)

// sessionStates returns the BGPSessionState objects of BGPPeer peer by
// node.
func (e *bgpEnv) sessionStates(ctx context.Context, peer string) (map[string]v1alpha1.BGPSessionState, error) {
	var l v1alpha1.BGPSessionStateList
	if err := e.c.List(ctx, &l, client.InNamespace(lab.HeraldNamespace), client.MatchingLabels{v1alpha1.LabelBGPPeer: peer}); err != nil {
		return nil, err
	}
	out := map[string]v1alpha1.BGPSessionState{}
	for _, o := range l.Items {
		out[o.Status.Node] = o
	}
	return out, nil
}

// waitSessionStates waits until the BGPSessionState of peer on each of
// nodes (and on no other node) satisfies ok.
func (e *bgpEnv) waitSessionStates(ctx context.Context, t *testing.T, peer string, nodes []string, what string, ok func(v1alpha1.BGPSessionStateStatus) error) {
	t.Helper()
	_, err := poll.Wait(ctx, time.Minute, "", func() error {
		got, err := e.sessionStates(ctx, peer)
		if err != nil {
			return err
		}
		if len(got) != len(nodes) {
			return fmt.Errorf("BGPSessionState of %s on %d nodes, want %v: %+v", peer, len(got), nodes, got)
		}
		for _, n := range nodes {
			o, found := got[n]
			if !found {
				return fmt.Errorf("no BGPSessionState of %s on %s", peer, n)
			}
			if err := ok(o.Status); err != nil {
				return fmt.Errorf("%s on %s: %w (%+v)", peer, n, err, o.Status)
			}
		}
		return nil
	}, bgpEvery)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// testSessionState reads the sessions with kubectl's view of them, the
// BGPSessionState objects (herald.io): the ebgp4 sessions of n1-n3 say
// Established with FRR's address as peer; FRR's "neighbor NODES shutdown
// message ..." (Cease, administrative shutdown, RFC 8203 communication)
// makes them say so (not Established, the NOTIFICATION as last error)
// until "no neighbor NODES shutdown" brings them back; a session to a
// closed port says "connect: ... connection refused"; a BGPPeer's objects
// go with it.
func (e *bgpEnv) testSessionState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e.failDump(t)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := e.l.Kubectl(context.Background(), "get", "bgpsessionstates.herald.io", "-A", "-o", "wide")
			t.Logf("kubectl get bgpsessionstates.herald.io -A -o wide:\n%s", out)
		}
	})
	nodes := []string{"n1", "n2", "n3"}
	established := func(st v1alpha1.BGPSessionStateStatus) error {
		if st.BGPStatus != "Established" || st.Peer != lab.RouterAddr.String() || st.BGPPeer != "ebgp4" || st.BFDStatus != v1alpha1.BFDStatusNotConfigured || st.LastTransitionTime == nil {
			return fmt.Errorf("want Established to %s, BFD N/A, with a transition time", lab.RouterAddr)
		}
		return nil
	}
	e.waitSessionStates(ctx, t, "ebgp4", nodes, "ebgp4 Established", established)
	out, err := e.l.Kubectl(ctx, "get", "bgpsessionstates.herald.io", "-A")
	if err != nil {
		t.Fatalf("kubectl get bgpsessionstates.herald.io -A: %v\n%s", err, out)
	}
	for _, col := range []string{"NODE", "PEER", "BGP", "BFD", "SINCE", "LAST ERROR", "Established"} {
		if !strings.Contains(out, col) {
			t.Errorf("kubectl get bgpsessionstates.herald.io -A lacks %q:\n%s", col, out)
		}
	}
	t.Logf("kubectl get bgpsessionstates.herald.io -A:\n%s", out)

	const message = "herald-e2e maintenance"
	router := fmt.Sprintf("router bgp %d", lab.RouterASN)
	if out, err := e.l.Vtysh(ctx, "configure terminal", router, fmt.Sprintf("neighbor NODES shutdown message %s", message)); err != nil {
		t.Fatalf("vtysh: %v\n%s", err, out)
	}
	restored := false
	restore := func() {
		if restored {
			return
		}
		restored = true
		if out, err := e.l.Vtysh(context.Background(), "configure terminal", router, "no neighbor NODES shutdown"); err != nil {
			t.Errorf("vtysh: %v\n%s", err, out)
		}
	}
	t.Cleanup(restore)
	e.waitSessionStates(ctx, t, "ebgp4", nodes, "ebgp4 down with FRR's shutdown NOTIFICATION", func(st v1alpha1.BGPSessionStateStatus) error {
		if st.BGPStatus == "Established" || !strings.Contains(st.LastError, "notification received: code 6(cease) subcode 2(administrative shutdown)") ||
			!strings.Contains(st.LastError, message) || st.LastErrorTime == nil {
			return fmt.Errorf("want not Established, last error the Cease/administrative shutdown with %q", message)
		}
		return nil
	})
	out, _ = e.l.Kubectl(ctx, "get", "bgpsessionstates.herald.io", "-A")
	t.Logf("after neighbor NODES shutdown:\n%s", out)
	restore()
	e.waitSessionStates(ctx, t, "ebgp4", nodes, "ebgp4 Established again, the shutdown kept as last error", func(st v1alpha1.BGPSessionStateStatus) error {
		if err := established(st); err != nil {
			return err
		}
		if !strings.Contains(st.LastError, message) {
			return fmt.Errorf("last error %q, want the shutdown kept", st.LastError)
		}
		return nil
	})

	// A BGPPeer of n4 to a router port nobody listens on: its object says
	// so (not Established, the connection refused as last error) and is
	// deleted with the BGPPeer.
	p := e.applyPeer(ctx, t, "sessionstate", lab.RouterAddr, lab.NodeASN, lab.RouterASN, "ibgp", func(s *v1beta2.BGPPeerSpec) {
		s.PeerPort = 1
	})
	e.waitSessionStates(ctx, t, "sessionstate", []string{"n4"}, "sessionstate's object on n4", func(st v1alpha1.BGPSessionStateStatus) error {
		if st.Peer != lab.RouterAddr.String() || st.BGPStatus == "Established" || st.BGPStatus == "" ||
			!strings.HasPrefix(st.LastError, "connect: ") || !strings.Contains(st.LastError, "connection refused") {
			return fmt.Errorf("want a session to %s, not Established, the connection refused as last error", lab.RouterAddr)
		}
		return nil
	})
	out, _ = e.l.Kubectl(ctx, "get", "bgpsessionstates.herald.io", "-A", "-o", "wide")
	t.Logf("with the BGPPeer sessionstate:\n%s", out)
	bgpDelete(t, e.c, p)
	e.waitSessionStates(ctx, t, "sessionstate", nil, "sessionstate's object deleted with the BGPPeer", func(v1alpha1.BGPSessionStateStatus) error { return nil })
}

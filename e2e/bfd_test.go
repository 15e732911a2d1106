package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1alpha1"
	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/e2e/lab"
	"github.com/herald-lb/herald/internal/poll"
)

// frrBFDPeer is one entry of FRR's "show bfd peers json".
type frrBFDPeer struct {
	Peer             string `json:"peer"`
	Status           string `json:"status"`
	Multihop         bool   `json:"multihop"`
	RemoteReceive    int    `json:"remote-receive-interval"`
	RemoteTransmit   int    `json:"remote-transmit-interval"`
	RemoteDetectMult int    `json:"remote-detect-multiplier"`
}

func frrBFDPeers(ctx context.Context, l *lab.Lab) (map[string]frrBFDPeer, error) {
	out, err := l.Vtysh(ctx, "show bfd peers json")
	if err != nil {
		return nil, fmt.Errorf("show bfd peers: %w: %s", err, out)
	}
	var ps []frrBFDPeer
	if err := json.Unmarshal([]byte(out), &ps); err != nil {
		return nil, fmt.Errorf("show bfd peers: %w: %s", err, out)
	}
	m := map[string]frrBFDPeer{}
	for _, p := range ps {
		m[p.Peer] = p
	}
	return m, nil
}

// testBFD runs BFD (RFC 5880, single hop RFC 5881) between Herald's
// speakers and FRR's bfdd: the ebgp4 peer names a BFDProfile of 300 ms x 3
// and FRR runs "neighbor NODES bfd profile fast". All three BFD sessions
// come Up on FRR with Herald's intervals; cutting n1's switch port makes
// FRR withdraw n1's path (BFD detection instead of the 9 s hold time), and
// Herald's speaker on n1 reports BFD down and resets its BGP session;
// after the restore BGP and BFD come up again and FRR has n1's path again. Times are measured and logged, not asserted.
func (e *bgpEnv) testBFD(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e.failDump(t)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := e.l.Vtysh(context.Background(), "show bfd peers")
			t.Logf("FRR BFD peers:\n%s", out)
		}
	})
	cfg := []string{"configure terminal", "bfd", "profile fast", "receive-interval 300", "transmit-interval 300", "detect-multiplier 3", "exit", "exit",
		fmt.Sprintf("router bgp %d", lab.RouterASN), "neighbor NODES bfd", "neighbor NODES bfd profile fast"}
	if out, err := e.l.Vtysh(ctx, cfg...); err != nil {
		t.Fatalf("vtysh: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := e.l.Vtysh(context.Background(), "configure terminal", fmt.Sprintf("router bgp %d", lab.RouterASN), "no neighbor NODES bfd"); err != nil {
			t.Errorf("vtysh: %v\n%s", err, out)
		}
	})
	bgpApply(ctx, t, e.c, &v1beta1.BFDProfile{ObjectMeta: metav1.ObjectMeta{Name: "fast", Namespace: lab.HeraldNamespace},
		Spec: v1beta1.BFDProfileSpec{ReceiveInterval: ptr.To[uint32](300), TransmitInterval: ptr.To[uint32](300), DetectMultiplier: ptr.To[uint32](3)}})
	setProfile := func(ctx context.Context, name string) error {
		var p v1beta2.BGPPeer
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: lab.HeraldNamespace, Name: "ebgp4"}, &p); err != nil {
			return err
		}
		p.Spec.BFDProfile = name
		return e.c.Update(ctx, &p)
	}
	// Before the profile (whose deletion the BGPPeer would block) goes.
	t.Cleanup(func() {
		if err := setProfile(context.Background(), ""); err != nil {
			t.Errorf("ebgp4 without bfdProfile: %v", err)
		}
	})
	if err := setProfile(ctx, "fast"); err != nil {
		t.Fatal(err)
	}

	e.applyPoolAdv(ctx, t, "bfd", []string{"203.0.113.160/28"}, nil)
	addrs := e.service(ctx, t, "bfd", "bfd", false, false, "n1", "n2", "n3")
	e.failDump(t, addrs...)
	prefix := bgpHostPrefix(addrs[0])
	if _, err := bgpWaitPrefix(ctx, e.l, prefix, bgpV4Peers(1, 2, 3), time.Minute); err != nil {
		t.Fatal(err)
	}

	n1 := lab.NodeAddr(1).String()
	_, err := poll.Wait(ctx, time.Minute, "", func() error {
		ps, err := frrBFDPeers(ctx, e.l)
		if err != nil {
			return err
		}
		for _, a := range bgpV4Peers(1, 2, 3) {
			p := ps[a]
			if p.Status != "up" {
				return fmt.Errorf("FRR BFD peer %s: %+v, want up (all: %v)", a, p, ps)
			}
			if p.Multihop || p.RemoteReceive != 300 || p.RemoteTransmit != 300 || p.RemoteDetectMult != 3 {
				return fmt.Errorf("FRR BFD peer %s: %+v, want single hop, Herald's 300 ms x 3", a, p)
			}
		}
		return nil
	}, bgpEvery)
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(e.l.StateDir(), e.h.SpeakerProcessName("n1")+".log")
	logStart := fileSize(t, log)

	cut := time.Now()
	if err := e.h.CutLink(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	restored := false
	t.Cleanup(func() {
		if !restored {
			_ = e.h.RestoreLink(context.Background(), "n1")
		}
	})
	var bfdDown time.Duration
	_, err = poll.Wait(ctx, time.Minute, "", func() error {
		if bfdDown == 0 {
			ps, err := frrBFDPeers(ctx, e.l)
			if err != nil {
				return err
			}
			if ps[n1].Status == "up" {
				return fmt.Errorf("FRR BFD peer %s still up", n1)
			}
			bfdDown = time.Since(cut)
		}
		return nil
	}, bgpEvery)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bgpWaitPrefix(ctx, e.l, prefix, bgpV4Peers(2, 3), time.Minute); err != nil {
		t.Fatal(err)
	}
	withdrawn := time.Since(cut)
	_, err = poll.Wait(ctx, time.Minute, "", func() error {
		if s := readFrom(t, log, logStart); !strings.Contains(s, "BFD session down: BGP session reset") || !strings.Contains(s, `"msg":"BGP session reset"`) {
			return fmt.Errorf("speaker n1 has not logged BFD down and the BGP reset")
		}
		return nil
	}, bgpEvery)
	if err != nil {
		t.Fatal(err)
	}
	speakerDown := time.Since(cut)

	restore := time.Now()
	if err := e.h.RestoreLink(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	restored = true
	if _, err := bgpWaitPrefix(ctx, e.l, prefix, bgpV4Peers(1, 2, 3), 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	back := time.Since(restore)
	_, err = poll.Wait(ctx, time.Minute, "", func() error {
		if s := readFrom(t, log, logStart); !strings.Contains(s, "BFD session up again") {
			return fmt.Errorf("speaker n1 has not logged BFD up again")
		}
		ps, err := frrBFDPeers(ctx, e.l)
		if err != nil {
			return err
		}
		if ps[n1].Status != "up" {
			return fmt.Errorf("FRR BFD peer %s: %+v, want up", n1, ps[n1])
		}
		return nil
	}, bgpEvery)
	if err != nil {
		t.Fatal(err)
	}
	// The events of n1's speaker reach the API server once its link is back.
	_, err = poll.Wait(ctx, time.Minute, "", func() error {
		var evs corev1.EventList
		if err := e.c.List(ctx, &evs, client.InNamespace(lab.HeraldNamespace)); err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, ev := range evs.Items {
			if ev.InvolvedObject.Kind == "BGPPeer" && ev.InvolvedObject.Name == "ebgp4" && strings.Contains(ev.Message, "on node n1") {
				seen[ev.Reason] = true
			}
		}
		if !seen["bfdSessionDown"] || !seen["bfdSessionUp"] {
			return fmt.Errorf("BGPPeer ebgp4 events from n1: %v, want bfdSessionDown and bfdSessionUp", seen)
		}
		return nil
	}, bgpEvery)
	if err != nil {
		t.Fatal(err)
	}
	// The BGPSessionState objects say BFD Up, and n1's keeps why its BGP
	// session was reset: the Cease it sent when BFD went down.
	e.waitSessionStates(ctx, t, "ebgp4", []string{"n1", "n2", "n3"}, "ebgp4's BGPSessionState: BFD Up", func(st v1alpha1.BGPSessionStateStatus) error {
		if st.BFDStatus != "Up" || st.BGPStatus != "Established" {
			return fmt.Errorf("want BGP Established, BFD Up")
		}
		if st.Node == "n1" && !strings.Contains(st.LastError, "BFD session down") {
			return fmt.Errorf("n1's last error %q, want the reset for BFD down", st.LastError)
		}
		return nil
	})
	// A changed profile reaches the Up sessions by a Poll Sequence (RFC
	// 5880 §6.5), without taking them down.
	changeStart := fileSize(t, log)
	var prof v1beta1.BFDProfile
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: lab.HeraldNamespace, Name: "fast"}, &prof); err != nil {
		t.Fatal(err)
	}
	prof.Spec.ReceiveInterval, prof.Spec.TransmitInterval = ptr.To[uint32](200), ptr.To[uint32](200)
	if err := e.c.Update(ctx, &prof); err != nil {
		t.Fatal(err)
	}
	_, err = poll.Wait(ctx, time.Minute, "", func() error {
		ps, err := frrBFDPeers(ctx, e.l)
		if err != nil {
			return err
		}
		for _, a := range bgpV4Peers(1, 2, 3) {
			if p := ps[a]; p.Status != "up" || p.RemoteReceive != 200 || p.RemoteTransmit != 200 {
				return fmt.Errorf("FRR BFD peer %s: %+v, want up with Herald's 200 ms", a, p)
			}
		}
		return nil
	}, bgpEvery)
	if err != nil {
		t.Fatal(err)
	}
	if s := readFrom(t, log, changeStart); strings.Contains(s, "BFD session down") {
		t.Errorf("speaker n1's BFD session went down on a profile change:\n%s", s)
	}
	t.Logf("BFD 300 ms x 3, n1's link cut: FRR's BFD down after %s, n1's path withdrawn after %s, n1's speaker logged BFD down and reset BGP by %s; link restored: n1's path back after %s",
		bfdDown.Round(time.Millisecond), withdrawn.Round(time.Millisecond), speakerDown.Round(time.Millisecond), back.Round(time.Millisecond))
}

// Multihop BFD addresses: the router's loopback address and n1's, off the
// segment, routed to each other across it (RFC 5883 §2: a session between
// addresses that are not on one link).
var (
	bfdMHRouter = netip.MustParseAddr("2001:db8:ffff::1")
	bfdMHNode   = netip.MustParseAddr("2001:db8:fffe::11")
)

// testBFDMultihop runs multihop BFD (RFC 5883, UDP 4784) between n1's
// speaker and FRR's bfdd: a BGPPeer "mh6" with ebgpMultiHop and a
// sourceAddress from n1's loopback to the router's loopback (static
// routes on both sides via the segment), FRR's static neighbor with
// ebgp-multihop, update-source and "bfd profile fast". FRR's BFD session
// comes Up as multihop between the two loopbacks with Herald's intervals;
// removing the router's route to n1's loopback (the link stays up, so
// only the multihop path breaks) takes it down on both sides, and n1's
// speaker resets that BGP session; with the route back BFD and BGP come
// up again.
func (e *bgpEnv) testBFDMultihop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e.failDump(t)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := e.l.Vtysh(context.Background(), "show bfd peers")
			t.Logf("FRR BFD peers:\n%s", out)
		}
	})
	n1, ok := e.l.Node("n1")
	if !ok {
		t.Fatal("no lab node n1")
	}
	rtr := e.l.RouterNamespace()
	ip := func(ns string, args ...string) {
		t.Helper()
		if out, err := e.l.Exec(ctx, ns, append([]string{"ip", "-6"}, args...)...); err != nil {
			t.Fatalf("ip %v in %s: %v: %s", args, ns, err, out)
		}
	}
	routeToNode := []string{"route", "add", bfdMHNode.String() + "/128", "via", n1.IPv6.String()}
	ip(rtr, "addr", "add", bfdMHRouter.String()+"/128", "dev", "lo")
	ip(n1.Namespace, "addr", "add", bfdMHNode.String()+"/128", "dev", "lo")
	ip(rtr, routeToNode...)
	ip(n1.Namespace, "route", "add", bfdMHRouter.String()+"/128", "via", lab.RouterAddrV6.String())
	t.Cleanup(func() {
		for _, c := range []struct {
			ns   string
			args []string
		}{
			{n1.Namespace, []string{"route", "del", bfdMHRouter.String() + "/128"}},
			{rtr, []string{"route", "del", bfdMHNode.String() + "/128"}},
			{n1.Namespace, []string{"addr", "del", bfdMHNode.String() + "/128", "dev", "lo"}},
			{rtr, []string{"addr", "del", bfdMHRouter.String() + "/128", "dev", "lo"}},
		} {
			_, _ = e.l.Exec(context.Background(), c.ns, append([]string{"ip", "-6"}, c.args...)...)
		}
	})

	nb := "neighbor " + bfdMHNode.String()
	cfg := []string{"configure terminal", "bfd", "profile fast", "receive-interval 300", "transmit-interval 300", "detect-multiplier 3", "exit", "exit",
		fmt.Sprintf("router bgp %d", lab.RouterASN), nb + " remote-as external", nb + " ebgp-multihop 2", nb + " update-source " + bfdMHRouter.String(),
		nb + " passive", nb + " bfd", nb + " bfd profile fast", "address-family ipv6 unicast", nb + " activate"}
	if out, err := e.l.Vtysh(ctx, cfg...); err != nil {
		t.Fatalf("vtysh: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := e.l.Vtysh(context.Background(), "configure terminal", fmt.Sprintf("router bgp %d", lab.RouterASN), "no "+nb); err != nil {
			t.Errorf("vtysh: %v\n%s", err, out)
		}
	})
	bgpApply(ctx, t, e.c, &v1beta1.BFDProfile{ObjectMeta: metav1.ObjectMeta{Name: "mh", Namespace: lab.HeraldNamespace},
		Spec: v1beta1.BFDProfileSpec{ReceiveInterval: ptr.To[uint32](300), TransmitInterval: ptr.To[uint32](300), DetectMultiplier: ptr.To[uint32](3)}})
	e.applyPeer(ctx, t, "mh6", bfdMHRouter, lab.NodeASN, lab.RouterASN, "ebgp", func(s *v1beta2.BGPPeerSpec) {
		s.EBGPMultiHop = true
		s.SourceAddress = bfdMHNode.String()
		s.BFDProfile = "mh"
		s.NodeSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"kubernetes.io/hostname": "n1"}}}
	})

	up := func(ctx context.Context) error {
		s, err := e.l.BGPSummary(ctx)
		if err != nil {
			return err
		}
		if st := s["ipv6Unicast"].Peers[bfdMHNode.String()].State; st != "Established" {
			return fmt.Errorf("FRR's multihop session to %s: %q, want Established", bfdMHNode, st)
		}
		ps, err := frrBFDPeers(ctx, e.l)
		if err != nil {
			return err
		}
		p, ok := ps[bfdMHNode.String()]
		if !ok || p.Status != "up" || !p.Multihop || p.RemoteReceive != 300 || p.RemoteTransmit != 300 || p.RemoteDetectMult != 3 {
			return fmt.Errorf("FRR BFD peer %s: %+v (present %v), want up, multihop, Herald's 300 ms x 3", bfdMHNode, p, ok)
		}
		return nil
	}
	if _, err := poll.Wait(ctx, 2*time.Minute, "", func() error { return up(ctx) }, bgpEvery); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(e.l.StateDir(), e.h.SpeakerProcessName("n1")+".log")
	logStart := fileSize(t, log)

	// Only the multihop path breaks: n1's link and its single hop
	// sessions stay up.
	cut := time.Now()
	ip(rtr, "route", "del", bfdMHNode.String()+"/128")
	restored := false
	t.Cleanup(func() {
		if !restored {
			_, _ = e.l.Exec(context.Background(), rtr, append([]string{"ip", "-6"}, routeToNode...)...)
		}
	})
	var bfdDown time.Duration
	_, err := poll.Wait(ctx, time.Minute, "", func() error {
		if bfdDown == 0 {
			ps, err := frrBFDPeers(ctx, e.l)
			if err != nil {
				return err
			}
			if p, ok := ps[bfdMHNode.String()]; ok && p.Status == "up" {
				return fmt.Errorf("FRR BFD peer %s still up", bfdMHNode)
			}
			bfdDown = time.Since(cut)
		}
		s := readFrom(t, log, logStart)
		for _, line := range strings.Split(s, "\n") {
			if strings.Contains(line, "BFD session down: BGP session reset") && strings.Contains(line, bfdMHRouter.String()) {
				return nil
			}
		}
		return fmt.Errorf("speaker n1 has not logged BFD down for %s", bfdMHRouter)
	}, bgpEvery)
	if err != nil {
		t.Fatal(err)
	}
	speakerDown := time.Since(cut)
	restore := time.Now()
	ip(rtr, routeToNode...)
	restored = true
	if _, err := poll.Wait(ctx, 2*time.Minute, "", func() error { return up(ctx) }, bgpEvery); err != nil {
		t.Fatal(err)
	}
	_, err = poll.Wait(ctx, time.Minute, "", func() error {
		s := readFrom(t, log, logStart)
		for _, line := range strings.Split(s, "\n") {
			if strings.Contains(line, "BFD session up again") && strings.Contains(line, bfdMHRouter.String()) {
				return nil
			}
		}
		return fmt.Errorf("speaker n1 has not logged BFD up again for %s", bfdMHRouter)
	}, bgpEvery)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("multihop BFD 300 ms x 3, router's route to n1's loopback removed: FRR's BFD down after %s, n1's speaker logged BFD down and reset BGP by %s; route restored: BGP and BFD up again after %s",
		bfdDown.Round(time.Millisecond), speakerDown.Round(time.Millisecond), time.Since(restore).Round(time.Millisecond))
}

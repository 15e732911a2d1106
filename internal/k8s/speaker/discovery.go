package speaker

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/bgp"
)

// Event reasons on BGPPeers (Herald's; MetalLB has no session events).
const (
	reasonSessionEstablished = "sessionEstablished"
	reasonSessionDown        = "sessionDown"
	reasonSessionNotUp       = "sessionNotEstablished"
	reasonPeerNotApplied     = "peerNotApplied"
	reasonPrefixLimit        = "prefixLimitExceeded"
)

// speakerAddrs returns podIP:port of every running, not terminating Pod
// with an IP, sorted.
func speakerAddrs(pods []corev1.Pod, port int) []netip.AddrPort {
	var out []netip.AddrPort
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		ip, err := netip.ParseAddr(p.Status.PodIP)
		if err != nil {
			continue
		}
		out = append(out, netip.AddrPortFrom(ip.Unmap(), uint16(port)))
	}
	slices.SortFunc(out, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return slices.Compact(out)
}

// syncPods hands the speaker Pods' memberlist addresses to Members.
func (s *Controller) syncPods(ctx context.Context) error {
	if s.opts.Members == nil {
		return nil
	}
	var pods corev1.PodList
	if err := s.client.List(ctx, &pods, client.InNamespace(s.opts.Namespace),
		client.MatchingLabelsSelector{Selector: s.opts.MemberSelector}); err != nil {
		return fmt.Errorf("list speaker Pods: %w", err)
	}
	addrs := speakerAddrs(pods.Items, s.opts.MemberPort)
	s.log.Debug("speaker peers discovered", "addrs", addrs)
	s.opts.Members.SetPeers(addrs)
	return nil
}

// session is what the trigger goroutine knows of one BGP session.
type session struct {
	last      bgp.PeerState // the latest state reported
	downSince time.Time     // when it left Established (or was first seen down); zero while Established
	warned    bool          // sessionNotEstablished was emitted for this stretch down
}

// to is " to <peer address>" for event messages, or "" when unknown.
func (ss *session) to() string {
	if ss.last.Peer == "" {
		return ""
	}
	return " to " + ss.last.Peer
}

// peerState records a BGP session state change and emits an event on the
// BGPPeer when the session comes up or goes down. sessions is only touched
// by the trigger goroutine.
func (s *Controller) peerState(ctx context.Context, st bgp.PeerState, sessions map[string]*session) {
	ss, seen := sessions[st.Name]
	if !seen {
		ss = &session{}
		sessions[st.Name] = ss
	}
	prev := ss.last.State
	ss.last = st
	s.sessions.bgpState(st, time.Now())
	up := st.State == bgp.StateEstablished
	switch {
	case up:
		ss.downSince, ss.warned = time.Time{}, false
	case ss.downSince.IsZero():
		ss.downSince = time.Now()
	}
	if seen && prev == st.State {
		return
	}
	// The BGP speaker logs every transition itself; this is for correlation.
	s.log.Debug("BGP session state", "peer", st.Name, "state", st.State.String(), "previous", prev.String())
	switch {
	case up && prev != bgp.StateEstablished:
		s.peerEvent(ctx, st.Name, corev1.EventTypeNormal, reasonSessionEstablished, "session%s established on node %s", ss.to(), s.opts.NodeName)
	case !up && prev == bgp.StateEstablished:
		s.peerEvent(ctx, st.Name, corev1.EventTypeWarning, reasonSessionDown, "session%s down on node %s (state %s)", ss.to(), s.opts.NodeName, st.State)
	}
	if !up && st.PrefixLimitFamily != "" && prev == bgp.StateEstablished {
		s.peerEvent(ctx, st.Name, corev1.EventTypeWarning, reasonPrefixLimit,
			"session%s on node %s closed: the peer sent more than %d %s prefixes (--bgp-max-received-prefixes); Herald uses no received routes: filter what the router sends to the speakers, or raise the limit",
			ss.to(), s.opts.NodeName, st.PrefixLimit, st.PrefixLimitFamily)
	}
}

func (s *Controller) peerEvent(ctx context.Context, name, eventtype, reason, format string, args ...any) {
	if s.opts.Recorder == nil {
		return
	}
	var peer v1beta2.BGPPeer
	if err := s.client.Get(ctx, types.NamespacedName{Namespace: s.opts.Namespace, Name: name}, &peer); err != nil {
		return
	}
	s.opts.Recorder.Eventf(&peer, eventtype, reason, format, args...)
}

// warnSessionsDown emits sessionNotEstablished once for each configured
// session that has not been Established for SessionWarnAfter (never came
// up, or went down and stayed down), and forgets sessions that are no longer
// configured. states are bgp.Speaker.PeerStates (one per configured peer).
func (s *Controller) warnSessionsDown(ctx context.Context, sessions map[string]*session, states []bgp.PeerState) {
	if s.opts.BGP == nil || len(sessions) == 0 {
		return
	}
	configured := map[string]bool{}
	for _, p := range states {
		configured[p.Name] = true
	}
	for name, ss := range sessions {
		if !configured[name] {
			delete(sessions, name)
			continue
		}
		if ss.downSince.IsZero() || ss.warned || time.Since(ss.downSince) < s.opts.SessionWarnAfter {
			continue
		}
		ss.warned = true
		s.log.Warn("BGP session not established", "peer", name, "state", ss.last.State.String(), "for", time.Since(ss.downSince).Round(time.Second).String())
		s.peerEvent(ctx, name, corev1.EventTypeWarning, reasonSessionNotUp,
			"session%s not established on node %s for %s (state %s): check peerAddress, peerASN/myASN, password and the router's neighbor configuration",
			ss.to(), s.opts.NodeName, s.opts.SessionWarnAfter, ss.last.State)
	}
}

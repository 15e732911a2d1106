package explain

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/api/v1alpha1"
	"github.com/herald-lb/herald/api/v1beta1"
)

// sessionState returns node's BGPSessionState for peer tor.
func sessionState(node, state, lastError string, since time.Time) v1alpha1.BGPSessionState {
	t := metav1.NewTime(since)
	return v1alpha1.BGPSessionState{ObjectMeta: hmeta(node + "-tor"), Status: v1alpha1.BGPSessionStateStatus{
		Node: node, BGPPeer: "tor", BGPStatus: state, LastTransitionTime: &t, LastError: lastError}}
}

// TestWhyBGPSessions: a Service announced over BGP is a problem (exit 1)
// for each session its paths go to that is not Established (issue #14: a
// wrong password left every session Active and why said "Problems: none");
// a session without a BGPSessionState is shown Unknown, not a problem.
func TestWhyBGPSessions(t *testing.T) {
	since := time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		sessions []v1alpha1.BGPSessionState
		// states of the sessions n1, n2 (to tor), problems wanted ("" none).
		states   [2]string
		problems []string
	}{
		{name: "established",
			sessions: []v1alpha1.BGPSessionState{sessionState("n1", "Established", "", since), sessionState("n2", "Established", "", since)},
			states:   [2]string{"Established", "Established"}},
		{name: "active everywhere (wrong password)",
			sessions: []v1alpha1.BGPSessionState{
				sessionState("n1", "Active", "NOTIFICATION received: code 6 (Cease) subcode 0", since),
				sessionState("n2", "Active", "", since)},
			states: [2]string{"Active", "Active"},
			problems: []string{
				"node n1, peer tor: BGP session Active since 2026-12-01T22:00:00Z, last error: NOTIFICATION received: code 6 (Cease) subcode 0: the peer does not receive",
				"node n2, peer tor: BGP session Active since 2026-12-01T22:00:00Z, no error reported"}},
		{name: "one node down",
			sessions: []v1alpha1.BGPSessionState{sessionState("n1", "Established", "", since), sessionState("n2", "Connect", "connect: connection refused", since)},
			states:   [2]string{"Established", "Connect"},
			problems: []string{"node n2, peer tor: BGP session Connect since 2026-12-01T22:00:00Z, last error: connect: connection refused"}},
		{name: "no objects (older speakers)",
			states: [2]string{"Unknown", "Unknown"}},
		{name: "one object missing",
			sessions: []v1alpha1.BGPSessionState{sessionState("n1", "Idle", "", since)},
			states:   [2]string{"Idle", "Unknown"},
			problems: []string{"node n1, peer tor: BGP session Idle since"}},
		{name: "session of another node",
			sessions: []v1alpha1.BGPSessionState{sessionState("n3", "Active", "", since)},
			states:   [2]string{"Unknown", "Unknown"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := lab()
			c.Resources.L2Advertisements = nil
			c.withBGP()
			c.service("web", []string{"198.51.100.1"}, "n1", "n2")
			c.Services[0].Spec.ExternalTrafficPolicy = "Local"
			for _, n := range []string{"n1", "n2"} {
				c.BGPStatuses = append(c.BGPStatuses, v1beta1.ServiceBGPStatus{ObjectMeta: hmeta("bgp-" + n),
					Status: v1beta1.ServiceBGPStatusStatus{ServiceStatusCommon: v1beta1.ServiceStatusCommon{Node: n, ServiceName: "web", ServiceNamespace: "demo"}, Peers: []string{"tor"}}})
			}
			c.SessionStates = tc.sessions
			r := mustWhy(t, c, "web")
			if len(r.Problems) != len(tc.problems) {
				t.Fatalf("problems %q, want %d like %q", r.Problems, len(tc.problems), tc.problems)
			}
			for _, p := range tc.problems {
				if !hasProblem(r.Problems, p) {
					t.Errorf("problems %q, want one with %q", r.Problems, p)
				}
			}
			paths := r.IPs[0].BGP.Paths
			if len(paths) != 2 {
				t.Fatalf("paths %+v", paths)
			}
			for i, p := range paths {
				if len(p.Sessions) != 1 || p.Sessions[0].Node != p.Node || p.Sessions[0].Peer != "tor" || p.Sessions[0].State != tc.states[i] {
					t.Errorf("path %d sessions %+v, want %s/tor %s", i, p.Sessions, p.Node, tc.states[i])
				}
			}
			for i, b := range r.Reported.BGP {
				if len(b.Sessions) != 1 || b.Sessions[0].State != tc.states[i] {
					t.Errorf("ServiceBGPStatus %s sessions %+v, want %s", b.Object, b.Sessions, tc.states[i])
				}
			}
		})
	}
}

// TestObjectSessionsDescribe: the source says what the speakers write when
// (docs/bgp.md): the state on change, the counters every 15 s.
func TestObjectSessionsDescribe(t *testing.T) {
	d := NewObjectSessions(nil, nil).Describe()
	if !strings.Contains(d, "the state is written when it changes") || !strings.Contains(d, "prefix counters are refreshed every 15 s") {
		t.Errorf("Describe %q", d)
	}
}

package explain

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/api/v1alpha1"
	"github.com/herald-lb/herald/api/v1beta1"
)

// TestPools: counters after the replay, the advertisements, the namespaces
// a serviceAllocation admits now, and pending Services as problems.
func TestPools(t *testing.T) {
	c := lab()
	c.Resources.Pools = append(c.Resources.Pools, v1beta1.IPAddressPool{ObjectMeta: hmeta("blue"), Spec: v1beta1.IPAddressPoolSpec{
		Addresses: []string{"203.0.113.0/31", "2001:db8::/126"}, ServiceAllocation: &v1beta1.ServiceAllocation{Priority: 5,
			Namespaces: []string{"ops"}, NamespaceSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"team": "blue"}}}}}})
	c.service("a", []string{"198.51.100.1"})
	c.service("b", []string{"203.0.113.0"})
	r := Pools(c)
	rows := map[string]PoolRow{}
	for _, p := range r.Pools {
		rows[p.Pool+"/"+p.Family] = p
	}
	if p := rows["p/IPv4"]; p.Size != 8 || p.Used != 1 || p.Free != 7 || strings.Join(p.L2Advertisements, ",") != "l2" ||
		strings.Join(p.Namespaces, ",") != "*" || strings.Join(p.Services, ",") != "demo/a" {
		t.Errorf("p/IPv4 %+v", p)
	}
	if p := rows["blue/IPv4"]; p.Size != 2 || p.Used != 1 || strings.Join(p.Namespaces, ",") != "demo,ops" || p.Priority != 5 {
		t.Errorf("blue/IPv4 %+v", p)
	}
	if p, ok := rows["blue/IPv6"]; !ok || p.Size != 4 || p.Used != 0 {
		t.Errorf("blue/IPv6 %+v", p)
	}
	if !hasProblem(r.Problems, "pool blue (IPv4): 1 addresses in use, but no L2Advertisement") {
		t.Errorf("unadvertised pool in use not flagged: %q", r.Problems)
	}
	c.Resources.Pools = c.Resources.Pools[:1]
	c.Resources.Pools[0].Spec.Addresses = []string{"198.51.100.1/32"}
	c.service("c", nil)
	r = Pools(c)
	if len(r.Pending) != 1 || r.Pending[0].Service != "demo/c" || !hasProblem(r.Problems, "Service demo/c is pending") ||
		!hasProblem(r.Problems, "Service demo/b: the addresses its status shows are not valid") {
		t.Errorf("pending %+v problems %q", r.Pending, r.Problems)
	}
	if p := r.Pools[0]; p.ReportedUsed != -1 {
		t.Errorf("no status written: reported used %d, want -1", p.ReportedUsed)
	}
	c.Resources.Pools[0].Status = v1beta1.IPAddressPoolStatus{AssignedIPv4: 0, AvailableIPv4: 1}
	if r = Pools(c); !hasProblem(r.Notes, "pool p (IPv4): its status says 0 used, 1 free; the replay 1 used, 0 free") {
		t.Errorf("status disagreement not noted: %q", r.Notes)
	}
	if !hasProblem(r.Notes, "pool p (IPv4) is full") {
		t.Errorf("notes %q", r.Notes)
	}
}

// TestPeers: the sessions each node opens, with their state from the
// BGPPeer events (newest wins); a session not established and a node
// without a live speaker are problems.
func TestPeers(t *testing.T) {
	c := lab()
	c.withBGP()
	c.SpeakerPods = c.SpeakerPods[:2]
	ev := func(reason, msg string, sec int64) corev1.Event {
		return corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: reason + msg, Namespace: hns}, Reason: reason, Message: msg,
			InvolvedObject: corev1.ObjectReference{Kind: "BGPPeer", Namespace: hns, Name: "tor"},
			LastTimestamp:  metav1.Unix(1700000000+sec, 0)}
	}
	c.Events = []corev1.Event{
		ev("sessionEstablished", "session to 203.0.113.1 established on node n1", 1),
		ev("sessionEstablished", "session to 203.0.113.1 established on node n2", 1),
		ev("sessionDown", "session to 203.0.113.1 down on node n2 (state Active)", 2),
	}
	r := Peers(c, NewEventSessions(c.Events, hns))
	if len(r.Sessions) != 3 {
		t.Fatalf("sessions %+v", r.Sessions)
	}
	got := map[string]string{}
	for _, s := range r.Sessions {
		got[s.Node] = s.State
		if s.Peer != "tor" || s.Address != "203.0.113.1" || s.PeerASN != 64512 {
			t.Errorf("row %+v", s)
		}
	}
	if got["n1"] != "Established" || got["n2"] != "Down" || got["n3"] != "Unknown" {
		t.Errorf("states %v", got)
	}
	if !hasProblem(r.Problems, "node n2, peer tor: session Down") || !hasProblem(r.Problems, "node n3, peer tor: no session: no speaker Pod") ||
		hasProblem(r.Problems, "node n1") {
		t.Errorf("problems %q", r.Problems)
	}
	if !strings.Contains(r.Source, "events") {
		t.Errorf("source %q does not say where the state comes from", r.Source)
	}
}

// TestPeersFromSessionObjects: the speakers' BGPSessionState objects give
// state, since, prefixes and last error; a session without one falls back
// to the events.
func TestPeersFromSessionObjects(t *testing.T) {
	c := lab()
	c.withBGP()
	since := metav1.Unix(1700000100, 0)
	obj := func(node, state, bfd, lastErr string, adv int64) v1alpha1.BGPSessionState {
		return v1alpha1.BGPSessionState{ObjectMeta: metav1.ObjectMeta{Name: node + "-tor", Namespace: hns},
			Status: v1alpha1.BGPSessionStateStatus{Node: node, Peer: "203.0.113.1", BGPPeer: "tor", BGPStatus: state, BFDStatus: bfd,
				LastTransitionTime: &since, LastError: lastErr, PrefixesAdvertised: adv}}
	}
	c.SessionStates = []v1alpha1.BGPSessionState{
		obj("n1", "Established", "Up", "", 4),
		obj("n2", "Active", "N/A", "connect: connection refused", 0),
	}
	c.Events = []corev1.Event{{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: hns}, Reason: "sessionEstablished",
		Message:        "session to 203.0.113.1 established on node n3",
		InvolvedObject: corev1.ObjectReference{Kind: "BGPPeer", Namespace: hns, Name: "tor"}, LastTimestamp: metav1.Unix(1700000000, 0)}}
	r := Peers(c, NewObjectSessions(c.SessionStates, NewEventSessions(c.Events, hns)))
	got := map[string]SessionState{}
	for _, s := range r.Sessions {
		got[s.Node] = s.SessionState
	}
	if s := got["n1"]; s.State != "Established" || s.Prefixes != 4 || s.Since != "2023-11-14T22:15:00Z" || s.Detail != "BFD Up" {
		t.Errorf("n1 %+v", s)
	}
	if s := got["n2"]; s.State != "Active" || s.Detail != "last error: connect: connection refused" {
		t.Errorf("n2 %+v", s)
	}
	if s := got["n3"]; s.State != "Established" || s.Prefixes != -1 {
		t.Errorf("n3 (from the events) %+v", s)
	}
	if !hasProblem(r.Problems, "node n2, peer tor: session Active since 2023-11-14T22:15:00Z (last error: connect: connection refused)") {
		t.Errorf("problems %q", r.Problems)
	}
	if !strings.Contains(r.Source, "BGPSessionState") || !strings.Contains(r.Source, "events") {
		t.Errorf("source %q", r.Source)
	}
}

// TestConfig: every ConfigurationState, Invalid ones and Ready speakers
// without one as problems, and the plugin's own build.
func TestConfig(t *testing.T) {
	c := lab()
	cs := func(name, comp, node string, res v1beta1.ConfigurationResult, summary string) v1beta1.ConfigurationState {
		return v1beta1.ConfigurationState{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: hns,
			Labels: map[string]string{v1beta1.LabelComponentType: comp, v1beta1.LabelNodeName: node}},
			Status: v1beta1.ConfigurationStateStatus{Result: res, ErrorSummary: summary}}
	}
	c.ConfigStates = []v1beta1.ConfigurationState{
		cs("controller", "controller", "", v1beta1.ConfigurationResultValid, ""),
		cs("speaker-n1", "speaker", "n1", v1beta1.ConfigurationResultValid, ""),
		cs("speaker-n2", "speaker", "n2", v1beta1.ConfigurationResultInvalid, "BGPPeer herald-system/x: spec.holdTime: bad"),
	}
	r := Config(c)
	if len(r.Components) != 3 || r.Build != "Valid" {
		t.Fatalf("%+v", r)
	}
	if !hasProblem(r.Problems, "speaker-n2: Invalid: BGPPeer herald-system/x: spec.holdTime") ||
		!hasProblem(r.Problems, "the speaker on node n3 is Ready but has written no ConfigurationState") || len(r.Problems) != 2 {
		t.Errorf("problems %q", r.Problems)
	}
	c.Resources.Pools = append(c.Resources.Pools, v1beta1.IPAddressPool{ObjectMeta: hmeta("overlap"), Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"198.51.100.4/30"}}})
	if r = Config(c); r.Build != "Invalid" || !hasProblem(r.Problems, "overlap") {
		t.Errorf("overlapping pools: build %q problems %q", r.Build, r.Problems)
	}
}

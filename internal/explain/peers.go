package explain

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/herald-lb/herald/api/v1alpha1"
	"github.com/herald-lb/herald/internal/announce"
)

// SessionState is what is known of one BGP session (node, peer).
type SessionState struct {
	// State is "Established", "Down", "NotEstablished", ... or "Unknown".
	State string `json:"state"`
	// Since is when the state was reported (RFC 3339, UTC), "" unknown.
	Since string `json:"since,omitempty"`
	// Detail is the reporting object's message.
	Detail string `json:"detail,omitempty"`
	// Prefixes advertised on the session, -1 when unknown.
	Prefixes int `json:"prefixes"`
	// LastError is the BGPSessionState's lastError (why the session last
	// went down or was refused, kept after it is up again), with " at
	// TIME" (RFC 3339, UTC) when its time is known; "" none or unknown.
	LastError string `json:"lastError,omitempty"`
}

// Established reports whether the session is up.
func (s SessionState) Established() bool { return s.State == "Established" }

// Known reports whether a source knew the session.
func (s SessionState) Known() bool { return s.State != "" && s.State != "Unknown" }

// SessionSource tells the state of the BGP sessions. Today's source is the
// BGPPeer events ([EventSessions]); a per-(node, peer) session status object
// will be another implementation.
type SessionSource interface {
	// Session returns the state of node's session to peer; ok false when
	// the source knows nothing of it.
	Session(node, peer string) (s SessionState, ok bool)
	// Describe says where the states come from, for the output.
	Describe() string
}

// Speaker event reasons on BGPPeers (internal/k8s/speaker/discovery.go).
const (
	eventSessionEstablished = "sessionEstablished"
	eventSessionDown        = "sessionDown"
	eventSessionNotUp       = "sessionNotEstablished"
	eventPeerNotApplied     = "peerNotApplied"
	eventPrefixLimit        = "prefixLimitExceeded"
	eventBFDDown            = "bfdSessionDown"
)

// EventSessions is the SessionSource of today: the speakers' events on
// BGPPeer objects (sessionEstablished, sessionDown, sessionNotEstablished,
// peerNotApplied, prefixLimitExceeded, bfdSessionDown), whose messages name
// the node ("... on node n1"). The newest event of a (node, peer) gives its
// state. Events expire (the API server's --event-ttl, 1 h by default): a
// session that has been up for longer shows as Unknown.
type EventSessions struct {
	states map[[2]string]SessionState
}

// NewEventSessions indexes the BGPPeer events in namespace.
func NewEventSessions(events []corev1.Event, namespace string) *EventSessions {
	type seen struct {
		t time.Time
		s SessionState
	}
	newest := map[[2]string]seen{}
	for i := range events {
		e := &events[i]
		if e.InvolvedObject.Kind != "BGPPeer" || e.InvolvedObject.Namespace != namespace {
			continue
		}
		node := nodeOfMessage(e.Message)
		if node == "" {
			continue
		}
		var state string
		switch e.Reason {
		case eventSessionEstablished:
			state = "Established"
		case eventSessionDown, eventBFDDown, eventPrefixLimit:
			state = "Down"
		case eventSessionNotUp:
			state = "NotEstablished"
		case eventPeerNotApplied:
			state = "NotApplied"
		default:
			continue
		}
		k := [2]string{node, e.InvolvedObject.Name}
		t := eventTime(e)
		if old, ok := newest[k]; ok && old.t.After(t) {
			continue
		}
		newest[k] = seen{t, SessionState{State: state, Since: t.UTC().Format(time.RFC3339), Detail: e.Reason + ": " + e.Message, Prefixes: -1}}
	}
	es := &EventSessions{states: map[[2]string]SessionState{}}
	for k, s := range newest {
		es.states[k] = s.s
	}
	return es
}

// nodeOfMessage returns NAME from "... on node NAME[ (...)]".
func nodeOfMessage(msg string) string {
	i := strings.Index(msg, " on node ")
	if i < 0 {
		return ""
	}
	rest := msg[i+len(" on node "):]
	if j := strings.IndexAny(rest, " :,"); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// Session implements SessionSource.
func (e *EventSessions) Session(node, peer string) (SessionState, bool) {
	s, ok := e.states[[2]string{node, peer}]
	return s, ok
}

// Describe implements SessionSource.
func (e *EventSessions) Describe() string {
	return "session state: the speakers' events on the BGPPeers (sessionEstablished, sessionDown, ...); events expire after the API server's --event-ttl (1 h by default), so an old session shows Unknown; prefixes: unknown (metrics need the node's metrics port)"
}

// ObjectSessions is the SessionSource the speakers write for it: one
// BGPSessionState (herald.io/v1alpha1) per node and BGPPeer, keyed by
// status.node and status.bgpPeer. A session without an object falls back to
// Fallback (the events), so a speaker that has not written its objects yet
// (or an older speaker) still shows what is known.
type ObjectSessions struct {
	states   map[[2]string]SessionState
	Fallback SessionSource
}

// NewObjectSessions indexes objs; fallback may be nil.
func NewObjectSessions(objs []v1alpha1.BGPSessionState, fallback SessionSource) *ObjectSessions {
	o := &ObjectSessions{states: map[[2]string]SessionState{}, Fallback: fallback}
	for i := range objs {
		st := &objs[i].Status
		node := cmpOr(st.Node, objs[i].Labels[v1alpha1.LabelNode])
		peer := cmpOr(st.BGPPeer, objs[i].Labels[v1alpha1.LabelBGPPeer])
		if node == "" || peer == "" {
			continue
		}
		s := SessionState{State: cmpOr(st.BGPStatus, "Unknown"), Prefixes: int(st.PrefixesAdvertised)}
		if st.LastTransitionTime != nil {
			s.Since = st.LastTransitionTime.UTC().Format(time.RFC3339)
		}
		var detail []string
		if st.BFDStatus != "" && st.BFDStatus != "N/A" {
			detail = append(detail, "BFD "+st.BFDStatus)
		}
		if st.LastError != "" {
			s.LastError = st.LastError
			if st.LastErrorTime != nil {
				s.LastError += " at " + st.LastErrorTime.UTC().Format(time.RFC3339)
			}
			detail = append(detail, "last error: "+s.LastError)
		}
		s.Detail = strings.Join(detail, "; ")
		o.states[[2]string{node, peer}] = s
	}
	return o
}

// Session implements SessionSource.
func (o *ObjectSessions) Session(node, peer string) (SessionState, bool) {
	if s, ok := o.states[[2]string{node, peer}]; ok {
		return s, true
	}
	if o.Fallback != nil {
		return o.Fallback.Session(node, peer)
	}
	return SessionState{}, false
}

// Describe implements SessionSource.
func (o *ObjectSessions) Describe() string {
	d := "session state and prefixes advertised: the speakers' BGPSessionState objects (herald.io/v1alpha1): the state is written when it changes (at most once a second per session), the prefix counters are refreshed every 15 s"
	if o.Fallback != nil {
		d += "; sessions without an object: " + o.Fallback.Describe()
	}
	return d
}

// PeersReport is kubectl herald peers.
type PeersReport struct {
	Sessions []SessionRow `json:"sessions"`
	Source   string       `json:"source"`
	Notes    []string     `json:"notes,omitempty"`
	Problems []string     `json:"problems,omitempty"`
}

// SessionRow is one session a node should open.
type SessionRow struct {
	Node     string `json:"node"`
	Peer     string `json:"peer"`
	Address  string `json:"address"`
	MyASN    uint32 `json:"myASN"`
	PeerASN  uint32 `json:"peerASN"`
	RouterID string `json:"routerID,omitempty"`
	// Live: the node's speaker Pod is Running and Ready.
	Live bool `json:"live"`
	// Services are the Services whose ServiceBGPStatus from the node names
	// the peer.
	Services int `json:"services"`
	SessionState
}

// Peers lists, per node and peer, the sessions the node opens
// (announce.Sessions over its configuration snapshot) and their state from
// src.
func Peers(c *Cluster, src SessionSource) *PeersReport {
	v := newView(c)
	r := &PeersReport{Source: src.Describe(), Notes: []string{v.liveNote}}
	services := map[[2]string]int{}
	for _, s := range c.BGPStatuses {
		for _, p := range s.Status.Peers {
			services[[2]string{cmpOr(s.Status.Node, s.Labels["metallb.io/node"]), p}]++
		}
	}
	for i := range c.Resources.Nodes {
		n := &c.Resources.Nodes[i]
		snap, err := v.nodeSnapshot(n.Name)
		if snap == nil {
			r.Problems = append(r.Problems, fmt.Sprintf("node %s: the speaker's configuration does not build: %v", n.Name, err))
			continue
		}
		an := announce.NodeFromK8s(n)
		for _, s := range announce.Sessions(snap, n.Name, an.Labels, announce.NodeIPv4(n)) {
			row := SessionRow{Node: n.Name, Peer: s.Name, MyASN: s.MyASN, PeerASN: s.PeerASN, Live: v.live[n.Name],
				Services: services[[2]string{n.Name, s.Name}]}
			if s.Address.IsValid() {
				row.Address = s.Address.String()
			} else {
				row.Address = "interface " + s.Interface
			}
			if s.RouterID.IsValid() {
				row.RouterID = s.RouterID.String()
			}
			st, ok := src.Session(n.Name, s.Name)
			if !ok {
				st = SessionState{State: "Unknown", Prefixes: -1}
			}
			row.SessionState = st
			switch {
			case !row.Live:
				r.Problems = append(r.Problems, fmt.Sprintf("node %s, peer %s: no session: %s", n.Name, s.Name, v.notLiveWhy(n.Name)))
			case st.Known() && !st.Established():
				r.Problems = append(r.Problems, fmt.Sprintf("node %s, peer %s: session %s since %s (%s)", n.Name, s.Name, st.State, st.Since, st.Detail))
			}
			r.Sessions = append(r.Sessions, row)
		}
	}
	sort.Slice(r.Sessions, func(i, j int) bool {
		a, b := r.Sessions[i], r.Sessions[j]
		if a.Node != b.Node {
			return a.Node < b.Node
		}
		return a.Peer < b.Peer
	})
	r.Problems = oneLine(r.Problems)
	return r
}

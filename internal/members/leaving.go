package members

import (
	"bytes"
	"time"

	"github.com/hashicorp/memberlist"
)

// Leaving announcements. A memberlist leave reaches the other members by
// gossip, one GossipInterval tick or more after Leave is called, and the
// EventDelegate cannot tell a leave from a failure (v0.7.0 never sets
// Node.State). So a speaker that shuts down gracefully first sends every
// other member a best-effort user message "herald-leaving:<node name>" (UDP,
// encrypted like all gossip), then calls Leave. A receiver marks the sender
// not live at once (graceful failover then costs one packet, not a gossip
// round) and counts a "leave" event; memberlist's own leave follows and is
// not counted again. If the announcement is lost, memberlist's leave still
// arrives (counted as "failed"). A member that announced leaving stays not
// live until memberlist reports it joining again (or, if memberlist never
// saw it leave, for leavingMemory).

// leavingPrefix starts the leaving announcement.
const leavingPrefix = "herald-leaving:"

// leavingMemory is how long an announcement keeps the sender not live when
// memberlist's own leave does not follow (it normally follows within a gossip
// round and then supersedes the announcement). It bounds how long a speaker
// that restarted before its leave was gossiped could be ignored.
const leavingMemory = 10 * time.Second

func (l *List) announceLeaving(ml *memberlist.Memberlist) {
	msg := []byte(leavingPrefix + l.cfg.NodeName)
	// The members from this package's copy (see List.nodes): the Nodes
	// that ml.Members returns are rewritten by memberlist concurrently.
	l.mu.Lock()
	others := make([]memberlist.Node, 0, len(l.nodes))
	for name, n := range l.nodes {
		if name != l.cfg.NodeName {
			others = append(others, n)
		}
	}
	l.mu.Unlock()
	for _, n := range others {
		if err := ml.SendBestEffort(&n, msg); err != nil {
			l.log.Debug("memberlist leaving announcement not sent", "member", n.Name, "error", err)
		}
	}
}

// delegate is the memberlist.Delegate: it receives leaving announcements
// and marks push/pull exchanges (see LocalState). memberlist calls NotifyMsg
// from its packet handler and MergeRemoteState from its stream handler,
// without holding its node lock.
type delegate List

// pushPullState is the user state every Herald speaker (since the start-up
// gate) sends in a push/pull exchange. Its content is not used: memberlist
// calls MergeRemoteState only with a non-empty user state, and only after it
// merged the peer's member list (mergeRemoteState in memberlist's net.go), so
// receiving it means a complete state exchange with another speaker happened,
// whichever side started it. Speakers of an older Herald send none and
// ignore it; our own joins of them are covered by Join's return.
var pushPullState = []byte("herald:v1")

func (d *delegate) NotifyMsg(msg []byte) {
	b, ok := bytes.CutPrefix(msg, []byte(leavingPrefix))
	if !ok || len(b) == 0 {
		return
	}
	name := string(b)
	l := (*List)(d)
	now := time.Now()
	l.mu.Lock()
	for n, at := range l.leaving {
		if now.Sub(at) > leavingMemory {
			delete(l.leaving, n)
		}
	}
	alive := l.live[name]
	if alive {
		l.leaving[name] = now
	}
	l.mu.Unlock()
	if alive {
		l.setLive(name, false, "leave", nil)
	}
}

func (d *delegate) NodeMeta(int) []byte             { return nil }
func (d *delegate) GetBroadcasts(int, int) [][]byte { return nil }
func (d *delegate) LocalState(bool) []byte          { return pushPullState }

// MergeRemoteState marks this speaker joined: a peer's member list was just
// merged (see pushPullState).
func (d *delegate) MergeRemoteState([]byte, bool) {
	(*List)(d).markJoined("joined the cluster (state exchange)", false)
}

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
// encrypted like all gossip), waits until each of them has acknowledged it
// ("herald-leaving-ack:<its name>") or leavingAckTimeout has passed, and only
// then calls Leave. A receiver marks the sender not live at once (graceful
// failover then costs one packet, not a gossip round), counts a "leave"
// event and acknowledges; memberlist's own leave follows and is not counted
// again. A member that announced leaving stays not live until memberlist
// reports it joining again (or, if memberlist never saw it leave, for
// leavingMemory).
//
// Why the acknowledgement: memberlist queues received gossip and user
// messages for its packet handler and handles the newest first (LIFO,
// getNextMessage in its net.go), so on a busy receiver an announcement and
// the dead message that Leave sends a gossip tick later can sit in the queue
// together and be handled in the wrong order: the leave was then counted as
// "failed" (TestJoinLiveAndGracefulLeave failed so under -race). Waiting for
// the acknowledgement means the announcement was handled before the dead
// message is sent. If an acknowledgement is lost, or the receiver is a
// Herald from before the acknowledgement (it never sends one), the sender
// leaves after leavingAckTimeout, and the receiver may count the leave as
// "failed" as before.

// leavingPrefix starts the leaving announcement.
const leavingPrefix = "herald-leaving:"

// leavingAckPrefix starts the acknowledgement of a leaving announcement.
const leavingAckPrefix = "herald-leaving-ack:"

// leavingAckTimeout bounds the wait for acknowledgements: 500 ms, or half of
// leaveTimeout if that is shorter, so that the whole graceful leave stays
// within about 1.5 × LeaveTimeout.
func leavingAckTimeout(leaveTimeout time.Duration) time.Duration {
	return min(500*time.Millisecond, leaveTimeout/2)
}

// leavingMemory is how long an announcement keeps the sender not live when
// memberlist's own leave does not follow (it normally follows within a gossip
// round and then supersedes the announcement). It bounds how long a speaker
// that restarted before its leave was gossiped could be ignored.
const leavingMemory = 10 * time.Second

// announceLeaving sends the leaving announcement to every other member and
// waits until each one it was sent to has acknowledged it, at most
// leavingAckTimeout.
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
	acks := make(chan string, len(others))
	l.leavingAcks = acks
	l.mu.Unlock()
	pending := map[string]bool{}
	for _, n := range others {
		if err := ml.SendBestEffort(&n, msg); err != nil {
			l.log.Debug("memberlist leaving announcement not sent", "member", n.Name, "error", err)
			continue
		}
		pending[n.Name] = true
	}
	if l.leavingWaitHook != nil {
		l.leavingWaitHook()
	}
	timeout := time.NewTimer(leavingAckTimeout(l.cfg.Timings.LeaveTimeout))
	defer timeout.Stop()
	for len(pending) > 0 {
		select {
		case name := <-acks:
			delete(pending, name)
		case <-timeout.C:
			l.log.Debug("memberlist leaving announcement not acknowledged by every member; leaving anyway",
				"unacknowledged", len(pending))
			return
		}
	}
}

// ackLeaving acknowledges name's leaving announcement (see announceLeaving).
func (l *List) ackLeaving(name string) {
	l.mu.Lock()
	ml := l.ml
	n, known := l.nodes[name]
	l.mu.Unlock()
	if ml == nil || !known {
		return
	}
	if err := ml.SendBestEffort(&n, []byte(leavingAckPrefix+l.cfg.NodeName)); err != nil {
		l.log.Debug("memberlist leaving acknowledgement not sent", "member", name, "error", err)
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
	l := (*List)(d)
	if l.notifyHook != nil {
		l.notifyHook(msg)
	}
	if l.handleRelease(msg) {
		return
	}
	if b, ok := bytes.CutPrefix(msg, []byte(leavingAckPrefix)); ok {
		l.mu.Lock()
		acks := l.leavingAcks
		l.mu.Unlock()
		if acks != nil {
			select {
			case acks <- string(b):
			default: // more acknowledgements than announcements sent
			}
		}
		return
	}
	b, ok := bytes.CutPrefix(msg, []byte(leavingPrefix))
	if !ok || len(b) == 0 {
		return
	}
	name := string(b)
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
	// Acknowledged after the leave is recorded, also when name was not
	// live here, so that its sender does not wait for us.
	l.ackLeaving(name)
}

func (d *delegate) NodeMeta(int) []byte             { return nil }
func (d *delegate) GetBroadcasts(int, int) [][]byte { return nil }
func (d *delegate) LocalState(bool) []byte          { return pushPullState }

// MergeRemoteState marks this speaker joined: a peer's member list was just
// merged (see pushPullState).
func (d *delegate) MergeRemoteState([]byte, bool) {
	(*List)(d).markJoined("joined the cluster (state exchange)", false)
}

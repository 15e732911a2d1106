package bgp

import "sync"

// DefaultStateChangesQueue is how many session state changes a
// StateChanges keeps one by one before it coalesces.
const DefaultStateChangesQueue = 64

// StateChanges carries session state changes from a producer that must
// never block (the BGP implementation's event goroutine, e.g. gobgp's
// Options.OnPeerState) to one consumer, without losing the last state of
// any session:
//
//   - while at most queue changes wait, every change is kept, in order (the
//     consumer sees each transition, for events);
//   - beyond that, further changes are coalesced per session until the
//     consumer takes them: each session's latest change replaces its
//     earlier ones, so a consumer that falls behind a flapping session
//     misses intermediate states but always gets the state the session
//     settled in (Active while it retries, say).
//
// Memory is bounded by queue plus the number of sessions, not by the rate
// of changes. Safe for concurrent use; make one with NewStateChanges.
type StateChanges struct {
	mu       sync.Mutex
	limit    int
	queue    []PeerState          // kept one by one, oldest first
	overflow map[string]PeerState // newer than every queued change, latest per session
	order    []string             // the names in overflow, by first change
	ready    chan struct{}
}

// NewStateChanges returns an empty StateChanges that keeps up to queue
// changes one by one (queue <= 0 selects DefaultStateChangesQueue).
func NewStateChanges(queue int) *StateChanges {
	if queue <= 0 {
		queue = DefaultStateChangesQueue
	}
	return &StateChanges{limit: queue, overflow: map[string]PeerState{}, ready: make(chan struct{}, 1)}
}

// Put records st, a change of the session st.Name, and signals Ready. It
// never blocks.
func (c *StateChanges) Put(st PeerState) {
	c.mu.Lock()
	switch _, seen := c.overflow[st.Name]; {
	case len(c.order) == 0 && len(c.queue) < c.limit:
		// Nothing coalesced yet: everything queued is older than st.
		c.queue = append(c.queue, st)
	case seen:
		c.overflow[st.Name] = st
	default:
		c.overflow[st.Name] = st
		c.order = append(c.order, st.Name)
	}
	c.mu.Unlock()
	select {
	case c.ready <- struct{}{}:
	default: // already signalled; Take returns this change too
	}
}

// Ready receives a value after a Put; the consumer then calls Take. One
// signal may stand for many Puts.
func (c *StateChanges) Ready() <-chan struct{} { return c.ready }

// Take returns the changes put since the last Take, oldest first (the
// coalesced ones last, one per session, by each session's first coalesced
// change), and forgets them. It returns nil when there are none.
func (c *StateChanges) Take() []PeerState {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 && len(c.order) == 0 {
		return nil
	}
	out := make([]PeerState, 0, len(c.queue)+len(c.order))
	out = append(out, c.queue...)
	for _, name := range c.order {
		out = append(out, c.overflow[name])
	}
	c.queue = c.queue[:0]
	clear(c.overflow)
	c.order = c.order[:0]
	return out
}

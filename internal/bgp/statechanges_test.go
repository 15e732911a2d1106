package bgp

import (
	"fmt"
	"slices"
	"sync"
	"testing"
)

// TestStateChangesKeepsEachChange: while fewer than the queue's changes
// wait, every one is taken, in order.
func TestStateChangesKeepsEachChange(t *testing.T) {
	c := NewStateChanges(4)
	want := []PeerState{{Name: "p1", State: StateActive}, {Name: "p1", State: StateEstablished}, {Name: "p2", State: StateIdle}, {Name: "p1", State: StateIdle}}
	for _, st := range want {
		c.Put(st)
	}
	select {
	case <-c.Ready():
	default:
		t.Fatal("Ready not signalled after Put")
	}
	if got := c.Take(); !slices.Equal(got, want) {
		t.Errorf("Take = %v, want %v", got, want)
	}
	if got := c.Take(); got != nil {
		t.Errorf("second Take = %v, want nil", got)
	}
}

// TestStateChangesFloodKeepsLastState: far more changes than the queue
// holds, none taken meanwhile (a consumer that fell behind). The queued
// changes come first, in order, then each session's latest change: the
// state every session settled in is there (a bounded queue that drops
// what does not fit loses it).
func TestStateChangesFloodKeepsLastState(t *testing.T) {
	c := NewStateChanges(0)
	const n = 1000
	last := map[string]PeerState{}
	var first []PeerState
	for i := range n {
		st := PeerState{Name: fmt.Sprintf("p%d", i%3), State: StateIdle, UpdatesSent: uint64(i)}
		if i%2 == 1 {
			st.State = StateEstablished
		}
		if i >= n-3 {
			st.State, st.LastError = StateActive, "connect: connection refused"
		}
		c.Put(st)
		last[st.Name] = st
		if i < DefaultStateChangesQueue {
			first = append(first, st)
		}
	}
	got := c.Take()
	if len(got) != DefaultStateChangesQueue+3 {
		t.Fatalf("Take returned %d changes, want %d queued + 3 coalesced", len(got), DefaultStateChangesQueue)
	}
	if !slices.Equal(got[:DefaultStateChangesQueue], first) {
		t.Errorf("queued changes = %v, want the first %d put", got[:DefaultStateChangesQueue], DefaultStateChangesQueue)
	}
	final := map[string]PeerState{}
	for _, st := range got {
		final[st.Name] = st // later changes win, as for the consumer
	}
	for name, want := range last {
		if final[name] != want {
			t.Errorf("%s: last change taken %+v, want the last put %+v", name, final[name], want)
		}
	}
	// After a Take, changes are queued one by one again.
	c.Put(PeerState{Name: "p0", State: StateIdle})
	c.Put(PeerState{Name: "p0", State: StateEstablished})
	if got := c.Take(); len(got) != 2 {
		t.Errorf("after Take: %v, want both changes", got)
	}
}

// TestStateChangesConcurrent: a producer that never waits and a consumer
// that takes when signalled; the consumer ends with every session's last
// state, and Put never blocks (the producer finishes without the
// consumer).
func TestStateChangesConcurrent(t *testing.T) {
	c := NewStateChanges(8)
	const n = 20000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			st := PeerState{Name: fmt.Sprintf("p%d", i%5), State: SessionState(1 + i%6), UpdatesSent: uint64(i)}
			c.Put(st)
		}
	}()
	seen := map[string]PeerState{}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for finished := false; !finished; {
		select {
		case <-c.Ready():
		case <-done:
			finished = true
		}
		for _, st := range c.Take() {
			if prev, ok := seen[st.Name]; ok && st.UpdatesSent <= prev.UpdatesSent {
				t.Fatalf("%s: change %d taken after %d", st.Name, st.UpdatesSent, prev.UpdatesSent)
			}
			seen[st.Name] = st
		}
	}
	for _, st := range c.Take() {
		seen[st.Name] = st
	}
	for i := n - 5; i < n; i++ {
		name := fmt.Sprintf("p%d", i%5)
		if got := seen[name].UpdatesSent; got != uint64(i) {
			t.Errorf("%s: last change taken is #%d, want #%d", name, got, i)
		}
	}
}

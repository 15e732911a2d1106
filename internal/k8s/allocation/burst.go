package allocation

import (
	"context"
	"sync"
	"time"
)

// Low-priority work (annotation, events) waits while Services are being
// created (no creation for burstQuiet, no status work queued), but never
// longer than maxDefer after it was queued. maxDefer is 5 minutes (60 s
// before 2026-12-05): a 10,000-Service burst on a 2-CPU API server lasts
// about 3 to 4 minutes, and events written during it (each costs the API
// server about as much as the Service's status write) put the
// controller's p99 at 1.57x the ideal allocator's, 1.22x with the events
// after the burst (docs/performance.md, "Events after the burst"). The
// Service's condition and addresses are written at once either way.
const (
	burstQuiet = 100 * time.Millisecond
	maxDefer   = 5 * time.Minute
)

// deferral decides whether low-priority work queued at queued may run at
// now, given when the last Service was created (lastAdd) and how many
// Services wait for their status work (statusQueued). When it may not, wait
// is how long until the decision can change by time alone: until the burst
// is quiet, else until maxDefer is reached; an emptied status queue is
// signalled separately (Controller.svcDrained).
func deferral(now, queued, lastAdd time.Time, statusQueued int) (run bool, wait time.Duration) {
	deadline := queued.Add(maxDefer)
	if !now.Before(deadline) {
		return true, 0
	}
	wait = deadline.Sub(now)
	quietAt := lastAdd.Add(burstQuiet)
	if now.Before(quietAt) {
		return false, min(wait, quietAt.Sub(now))
	}
	if statusQueued == 0 {
		return true, 0
	}
	return false, wait
}

// yield makes low-priority work for key wait during a burst, so a burst of
// new Services gets its addresses with one write each, before any annotation
// or event is written. It sleeps until deferral's time has passed or a
// worker took the last queued Service, and decides again.
func (c *Controller) yield(ctx context.Context, key string) {
	c.mu.Lock()
	queued, ok := c.annSince[key]
	c.mu.Unlock()
	if !ok {
		queued = time.Now()
	}
	for ctx.Err() == nil {
		drained := c.svcDrained.wait() // before the check: no signal is missed
		run, wait := deferral(time.Now(), queued, time.Unix(0, c.lastAdd.Load()), c.svcQueue.Len())
		if run {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-drained:
		case <-t.C:
		}
		t.Stop()
	}
}

// signal wakes every waiter once per broadcast. The zero value is ready.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed by the next broadcast.
func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// broadcast wakes the current waiters.
func (s *signal) broadcast() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

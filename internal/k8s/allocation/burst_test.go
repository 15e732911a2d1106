package allocation

import (
	"context"
	"runtime"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
)

func TestDeferral(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	tests := []struct {
		name         string
		now, lastAdd time.Time
		statusQueued int
		wantRun      bool
		wantWait     time.Duration
	}{
		{name: "quiet, nothing queued", now: t0.Add(time.Second), lastAdd: t0, wantRun: true},
		{name: "no Service created yet", now: t0, lastAdd: time.Unix(0, 0), wantRun: true},
		{name: "quiet exactly at burstQuiet", now: t0.Add(burstQuiet), lastAdd: t0, wantRun: true},
		{name: "a creation 30 ms ago: wait for the quiet", now: t0.Add(30 * ms), lastAdd: t0, wantWait: 70 * ms},
		{
			name: "quiet but status work queued: until the queue empties (signal) or maxDefer",
			now:  t0.Add(time.Second), lastAdd: t0, statusQueued: 3, wantWait: maxDefer - time.Second,
		},
		{name: "busy at maxDefer: runs anyway", now: t0.Add(maxDefer), lastAdd: t0.Add(maxDefer - ms), statusQueued: 5, wantRun: true},
		{
			name: "close to maxDefer: the deadline comes before the quiet",
			now:  t0.Add(maxDefer - 20*ms), lastAdd: t0.Add(maxDefer - 30*ms), wantWait: 20 * ms,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Queued at t0 for all cases.
			run, wait := deferral(tt.now, t0, tt.lastAdd, tt.statusQueued)
			if run != tt.wantRun || wait != tt.wantWait {
				t.Errorf("deferral = %v, %v; want %v, %v", run, wait, tt.wantRun, tt.wantWait)
			}
		})
	}
}

// TestYieldWakesWhenStatusQueueDrains: low-priority work waiting behind
// queued status work goes as soon as a worker takes the last queued Service
// (the drained signal), not after maxDefer.
func TestYieldWakesWhenStatusQueueDrains(t *testing.T) {
	c := &Controller{
		svcQueue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		annSince: map[string]time.Time{},
	}
	defer c.svcQueue.ShutDown()
	c.svcQueue.Add("ns/busy")
	ctx, cancel := context.WithTimeout(context.Background(), maxDefer/2) // fails long before maxDefer
	defer cancel()
	done := make(chan struct{})
	go func() {
		c.yield(ctx, "ns/low")
		close(done)
	}()
	// Until yield waits on the signal (it takes the channel before it
	// looks at the queue), so the signal is what must wake it.
	for !c.svcDrained.waited() {
		if ctx.Err() != nil {
			t.Fatal("yield never waited for the drained signal")
		}
		runtime.Gosched()
	}
	// What run does when a worker takes the last item.
	key, _ := c.svcQueue.Get()
	if c.svcQueue.Len() == 0 {
		c.svcDrained.broadcast()
	}
	c.svcQueue.Done(key)
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("yield did not return after the status queue drained")
	}
	if ctx.Err() != nil {
		t.Fatal("yield returned only because its context ended")
	}
}

// waited reports whether someone waits for the next broadcast.
func (s *signal) waited() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch != nil
}

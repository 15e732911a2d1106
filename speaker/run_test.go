package main

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder is a component run function that records when it stops.
type recorder struct {
	mu      sync.Mutex
	stopped []string
}

func (r *recorder) run(name string, block <-chan struct{}) func(context.Context) error {
	return func(ctx context.Context) error {
		<-ctx.Done()
		if block != nil {
			<-block // ignores cancellation until block is closed
		}
		r.mu.Lock()
		r.stopped = append(r.stopped, name)
		r.mu.Unlock()
		return nil
	}
}

func (r *recorder) order() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.stopped)
}

// TestShutdownOrder: layer 2 first (the stopping speaker answers no ARP/NDP
// and sends no gratuitous burst once the others may elect successors, so
// their takeover is the last word and raises no l2Conflict), then
// memberlist (the leave), then the manager, and shutdown returns once all
// are stopped.
func TestShutdownOrder(t *testing.T) {
	var r recorder
	fail := make(chan error, 3)
	ml := start("memberlist", r.run("memberlist", nil), fail)
	mgr := start("manager", r.run("manager", nil), fail)
	l2 := start("layer2", r.run("layer2", nil), fail)
	if err := shutdown(slog.New(slog.DiscardHandler), time.Minute, nil, ml, mgr, l2); err != nil {
		t.Fatal(err)
	}
	if got, want := r.order(), []string{"layer2", "memberlist", "manager"}; !slices.Equal(got, want) {
		t.Errorf("stop order %v, want %v", got, want)
	}
}

// TestShutdownLeavesDespiteStuckLayer2: a layer 2 announcer that does not
// stop delays the memberlist leave by layer2StopWait at most (the others
// must still be told, or its addresses wait for failure detection), and
// shutdown returns once it has stopped.
func TestShutdownLeavesDespiteStuckLayer2(t *testing.T) {
	var r recorder
	fail := make(chan error, 3)
	stuck := make(chan struct{})
	ml := start("memberlist", r.run("memberlist", nil), fail)
	mgr := start("manager", r.run("manager", nil), fail)
	l2 := start("layer2", r.run("layer2", stuck), fail)
	done := make(chan error, 1)
	go func() { done <- shutdown(slog.New(slog.DiscardHandler), time.Minute, nil, ml, mgr, l2) }()
	<-mgr.done // memberlist and the manager stop while layer 2 is stuck
	select {
	case err := <-done:
		t.Fatalf("shutdown returned %v while layer 2 was still stopping", err)
	default:
	}
	close(stuck)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, want := r.order(), []string{"memberlist", "manager", "layer2"}; !slices.Equal(got, want) {
		t.Errorf("stop order %v, want %v", got, want)
	}
}

// TestShutdownBudget: a component that does not stop (memberlist stuck in
// a join) does not hold shutdown past its budget; the error says so.
func TestShutdownBudget(t *testing.T) {
	var r recorder
	fail := make(chan error, 3)
	stuck := make(chan struct{})
	defer close(stuck)
	ml := start("memberlist", r.run("memberlist", stuck), fail)
	mgr := start("manager", r.run("manager", nil), fail)
	err := shutdown(slog.New(slog.DiscardHandler), 50*time.Millisecond, nil, ml, mgr, nil)
	if err == nil || !strings.Contains(err.Error(), "shutdown not finished within 50ms") {
		t.Fatalf("err %v, want the budget error", err)
	}
	if got := r.order(); len(got) != 0 {
		t.Errorf("stopped %v while memberlist was stuck, want nothing yet", got)
	}
}

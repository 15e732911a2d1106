package members

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestEventCountedBeforeLiveChanges checks the ordering a reader of Live and
// the events metric relies on (TestFailureDetection, alerts that compare the
// two): once Live reports a member failed, the "failed" event that made it so
// is already counted. Before the fix the counter was incremented after the
// live map was published, and a reader that ran in between (a preempted
// memberlist goroutine on a loaded machine) saw a failed member with no
// failed event. The writer and reader race here without sleeps; the reader
// checks the invariant on every read.
func TestEventCountedBeforeLiveChanges(t *testing.T) {
	t.Parallel()
	cfg := testConfig("self", nil)
	cfg.Registerer = prometheus.NewRegistry()
	l, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	const members = 20000
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(done)
		ev := (*events)(l)
		for i := range members {
			n := &memberlist.Node{Name: fmt.Sprintf("m%d", i)}
			ev.NotifyJoin(n)
			ev.NotifyLeave(n)
		}
	})
	failed := l.metrics.events.WithLabelValues("failed")
	joined := l.metrics.events.WithLabelValues("join")
	violations := 0
	for reading := true; reading; {
		select {
		case <-done:
			reading = false
		default:
		}
		// Read the counters after Live: anything Live shows must be counted.
		dead, alive := 0, 0
		for name, ok := range l.Live() {
			if name == "self" {
				continue
			}
			if ok {
				alive++
			} else {
				dead++
			}
		}
		if f, j := testutil.ToFloat64(failed), testutil.ToFloat64(joined); f < float64(dead) || j < float64(dead+alive) {
			violations++
		}
	}
	wg.Wait()
	if violations > 0 {
		t.Errorf("%d reads saw members in Live that the events metric had not counted yet", violations)
	}
	if got := testutil.ToFloat64(failed); got != members {
		t.Errorf("failed events = %v, want %d", got, members)
	}
}

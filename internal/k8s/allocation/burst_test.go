package allocation

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/internal/k8s/eventrec"
	"github.com/herald-lb/herald/internal/poll"
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

// Events due before a burst are not written during it (issue #16: each
// costs the API server about as much CPU as a Service's status write). The
// low-priority workers start flushing five events after a quiet moment; the
// API server holds the first write until a new burst runs, then answers at
// once. Only the events already handed to the recorder (one per worker) may
// be written during the burst; the others once it is over. Before
// the low-priority queue waited for each write, all five were in the
// recorder's queue by then and written during the burst.
func TestEventsWaitOutABurst(t *testing.T) {
	const n = 5
	var (
		mu    sync.Mutex
		posts int
	)
	held, release := make(chan struct{}), make(chan struct{})
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/events") {
			http.Error(w, "not here", http.StatusNotFound)
			return
		}
		mu.Lock()
		posts++
		i := posts
		mu.Unlock()
		if i == 1 {
			close(held)
			<-release
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"kind":"Event","apiVersion":"v1","metadata":{"name":"e%d","namespace":%q,"resourceVersion":"%d"}}`, i, stubNamespace, i)
	}))
	defer api.Close()
	written := func() int {
		mu.Lock()
		defer mu.Unlock()
		return posts
	}
	rec, err := eventrec.New(&rest.Config{Host: api.URL}, clientgoscheme.Scheme,
		eventrec.Options{Component: eventrec.Controller, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	c, cch, _ := stubController(t, rec)
	ctx, cancel := context.WithCancel(context.Background())
	defer rec.Stop(context.Background())
	defer cancel()

	// A first burst: n new Services, each with an IPAllocated event due.
	c.lastAdd.Store(time.Now().UnixNano())
	for i := range n {
		s, _ := stubService(t, i)
		cch.svcs[client.ObjectKeyFromObject(s)] = s
		if err := c.reconcile(ctx, Key(s)); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.annQueue.Len(); got != n {
		t.Fatalf("%d Services in the low-priority queue, want %d", got, n)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer c.annQueue.ShutDown()
	for range 2 {
		wg.Go(func() { c.run(ctx, c.annQueue, c.syncSecondary, c.yield) })
	}

	// Quiet: the first event's write arrives and is held. Then a second
	// burst starts and the write is answered.
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("no event written after the first burst")
	}
	// The second burst: a new Service waits for its status work (a
	// worker of the status queue would take it), which holds the
	// low-priority work whatever the clock says.
	c.lastAdd.Store(time.Now().UnixNano())
	c.svcQueue.Add(stubNamespace + "/new")
	close(release)
	time.Sleep(time.Second)
	during := written()
	if during > 2 {
		t.Errorf("%d of %d events written during the second burst, want at most 2 (those the two workers had handed to the recorder)", during, n)
	}
	// What a status worker does when it takes the last queued Service.
	k, _ := c.svcQueue.Get()
	c.svcDrained.broadcast()
	c.svcQueue.Done(k)
	poll.Until(t, 30*time.Second, "every event written after the second burst", func() bool { return written() == n })
}

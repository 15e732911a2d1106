package eventrec

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

// Events sent in each step of TestRetainedStateBounded. The first step
// fills client-go's correlator caches (4,096 entries each); the second
// must then leave the heap where it was.
const (
	fillEvents  = 4500
	checkEvents = 3000
	// retainedBudget is what the second step may add to the live heap
	// (about 350 B per event): well below what keeping every event costs
	// (client-go's events.k8s.io broadcaster: about 900 B per event of
	// this test, 2.6 MiB for checkEvents; 1.9 KiB per Service in
	// bench-alloc), far above a bounded recorder's (a few KiB in all).
	retainedBudget = 1 << 20
)

// serviceRef is the reference to a Service of namespace ns numbered i.
func serviceRef(ns string, i int) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		APIVersion: "v1", Kind: "Service", Namespace: ns, Name: fmt.Sprintf("svc-%05d", i),
		UID: types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i)),
	}
}

// stored returns the names of the objects the core/v1 Events of ns are
// about, one per Event.
func stored(ctx context.Context, env *testenv.Env, ns string) ([]string, error) {
	var evs corev1.EventList
	if err := env.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(evs.Items))
	for _, e := range evs.Items {
		names = append(names, e.InvolvedObject.Name)
	}
	return names, nil
}

// waitStored waits until ns holds want Events.
func waitStored(t *testing.T, env *testenv.Env, ns string, want int) []string {
	t.Helper()
	var names []string
	poll.Until(t, 3*time.Minute, fmt.Sprintf("%d events stored", want), func() error {
		var err error
		if names, err = stored(context.Background(), env, ns); err != nil {
			return err
		}
		if len(names) != want {
			return fmt.Errorf("%d events stored", len(names))
		}
		return nil
	}, poll.Every(200*time.Millisecond))
	return names
}

// dropped returns the recorder's herald_events_dropped_total for reason.
func dropped(r *Recorder, reason string) float64 {
	return testutil.ToFloat64(r.dropped.WithLabelValues(r.component, reason))
}

// noDrops fails t when r counted an event as not written.
func noDrops(t *testing.T, r *Recorder) {
	t.Helper()
	for _, reason := range dropReasons {
		if n := dropped(r, reason); n != 0 {
			t.Errorf("herald_events_dropped_total{reason=%q} = %v, want 0", reason, n)
		}
	}
}

// The controller's recorder keeps bounded state, however many Services it
// reports on, and loses none of their events. In a burst of new Services
// the controller sends one IPAllocated event per Service from its
// low-priority queue with EventfWait; the events.k8s.io recorder it used
// once kept each for 6 to 12 minutes (19 MiB of the controller's 61.7 MiB
// live heap after 10,000 Services, docs/performance.md), and client-go's
// core/v1 recorder dropped what did not fit its queue of 1,000 (this test
// sent its events in chunks of 500 to hide that; without them 1,012 of
// 4,500 were stored). The test sends events about distinct Services back to
// back to a real API server until the correlator's caches are full, and
// then as many again: every one must be stored, and the live heap after the
// second step (after runtime.GC) may not have grown by more than
// retainedBudget. It also checks what kubectl describe reads: source,
// reportingController, type, reason and message.
func TestRetainedStateBounded(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	rec, err := New(env.Config, env.Scheme, Options{Component: Controller, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Stop(ctx) })

	send := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if err := rec.EventfWait(ctx, serviceRef(ns, i), corev1.EventTypeNormal, "IPAllocated", "Assigned IP %q", []string{fmt.Sprintf("198.51.100.%d", i%256)}); err != nil {
				t.Fatalf("event %d: %v", i, err)
			}
		}
		waitStored(t, env, ns, to)
	}
	liveHeap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}

	send(0, fillEvents)
	filled := liveHeap()
	send(fillEvents, fillEvents+checkEvents)
	after := liveHeap()
	grown := int64(after) - int64(filled)
	t.Logf("live heap %.1f MiB after %d events, %.1f MiB after %d more (%+d B per event)",
		float64(filled)/(1<<20), fillEvents, float64(after)/(1<<20), checkEvents, grown/checkEvents)
	if grown > retainedBudget {
		t.Errorf("the live heap grew by %.1f MiB over %d events about new Services, more than %.1f MiB: the recorder keeps what it sent",
			float64(grown)/(1<<20), checkEvents, float64(retainedBudget)/(1<<20))
	}
	noDrops(t, rec)

	// What kubectl describe and kubectl get events show, in both APIs.
	name7 := serviceRef(ns, 7).Name
	var core corev1.EventList
	if err := env.Client.List(ctx, &core, client.InNamespace(ns), client.MatchingFields{"involvedObject.name": name7}); err != nil {
		t.Fatal(err)
	}
	if len(core.Items) != 1 {
		t.Fatalf("core/v1 events about %s: %d, want 1", name7, len(core.Items))
	}
	e := core.Items[0]
	if e.Source.Component != Controller || e.ReportingController != Controller || e.Type != corev1.EventTypeNormal ||
		e.Reason != "IPAllocated" || e.Message != `Assigned IP ["198.51.100.7"]` || e.Count != 1 {
		t.Errorf("core/v1 event: source %q, reportingController %q, type %q, reason %q, message %q, count %d; want %q, %q, Normal, IPAllocated, %q, 1",
			e.Source.Component, e.ReportingController, e.Type, e.Reason, e.Message, e.Count, Controller, Controller, `Assigned IP ["198.51.100.7"]`)
	}
	var ev eventsv1.Event
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: e.Name}, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.ReportingController != Controller || ev.Regarding.Name != name7 || ev.Note != e.Message {
		t.Errorf("events.k8s.io/v1 view: reportingController %q, regarding %q, note %q", ev.ReportingController, ev.Regarding.Name, ev.Note)
	}
}

// gate holds the requests that create or patch Events until opened, in
// front of the real API server: a stalled API server.
type gate struct {
	rt      http.RoundTripper
	arrived chan string // the path of each held request
	open    chan struct{}
	once    sync.Once
}

func newGate(cfg *rest.Config) (*rest.Config, *gate) {
	g := &gate{arrived: make(chan string, 100), open: make(chan struct{})}
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { g.rt = rt; return g }
	return cfg, g
}

func (g *gate) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet && strings.Contains(req.URL.Path, "/events") {
		select {
		case <-g.open:
		default:
			g.arrived <- req.URL.Path
			select {
			case <-g.open:
			case <-req.Context().Done():
				return nil, req.Context().Err()
			}
		}
	}
	return g.rt.RoundTrip(req)
}

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// waitHeld waits until a request is held.
func (g *gate) waitHeld(t *testing.T) {
	t.Helper()
	poll.Until(t, time.Minute, "a held request to write an Event", func() bool {
		select {
		case <-g.arrived:
			return true
		default:
			return false
		}
	})
}

// While the API server does not answer, Eventf past a full queue returns at
// once and counts the event in herald_events_dropped_total (and logs it):
// the controller's fast path and the speaker never wait for the API
// server. EventfWait waits for room until its context ends (then counts
// the event), and its event is written once the API server answers again.
func TestStalledAPIServer(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	cfg, g := newGate(env.Config)
	var logs testenv.SyncBuffer
	const size = 5
	reg := prometheus.NewRegistry()
	rec, err := New(cfg, env.Scheme, Options{Component: Controller, QueueSize: size, Registerer: reg,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g.release()
		rec.Stop(ctx)
	})
	if n, err := testutil.GatherAndCount(reg, "herald_events_dropped_total"); err != nil || n != len(dropReasons) {
		t.Errorf("herald_events_dropped_total: %d series (%v), want %d at 0", n, err, len(dropReasons))
	}

	emit := func(i int) {
		rec.Eventf(serviceRef(ns, i), corev1.EventTypeNormal, "IPAllocated", "Assigned IP %q", []string{fmt.Sprintf("198.51.100.%d", i)})
	}
	// Event 0 is taken by the worker, whose Create is held; 1..size fill
	// the queue.
	emit(0)
	g.waitHeld(t)
	for i := 1; i <= size; i++ {
		emit(i)
	}
	// Three more: dropped, without waiting for the held Create.
	const extra = 3
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		for i := size + 1; i <= size+extra; i++ {
			emit(i)
		}
	}()
	poll.Until(t, time.Minute, "Eventf on a full queue returns while the API server does not answer", func() bool {
		select {
		case <-returned:
			return true
		default:
			return false
		}
	})
	if n := dropped(rec, DropQueueFull); n != extra {
		t.Errorf(`herald_events_dropped_total{reason="queueFull"} = %v, want %d`, n, extra)
	}
	if !strings.Contains(logs.String(), "reason=queueFull") {
		t.Errorf("no log line about the dropped events; log:\n%s", logs.String())
	}

	// EventfWait waits for room until its context ends.
	wctx, cancel := context.WithCancel(ctx)
	waitErr := make(chan error, 1)
	go func() {
		waitErr <- rec.EventfWait(wctx, serviceRef(ns, 20), corev1.EventTypeNormal, "IPAllocated", "canceled")
	}()
	cancel()
	if err := <-waitErr; !errors.Is(err, context.Canceled) {
		t.Errorf("EventfWait on a full queue, context canceled: %v, want %v", err, context.Canceled)
	}
	if n := dropped(rec, DropCanceled); n != 1 {
		t.Errorf(`herald_events_dropped_total{reason="canceled"} = %v, want 1`, n)
	}

	// ... and is written once the API server answers.
	go func() {
		waitErr <- rec.EventfWait(ctx, serviceRef(ns, 30), corev1.EventTypeNormal, "IPAllocated", "waited")
	}()
	g.release()
	if err := <-waitErr; err != nil {
		t.Errorf("EventfWait after the API server answered: %v", err)
	}
	names := waitStored(t, env, ns, size+2)
	want := map[string]bool{serviceRef(ns, 30).Name: true}
	for i := 0; i <= size; i++ {
		want[serviceRef(ns, i).Name] = true
	}
	for _, n := range names {
		if !want[n] {
			t.Errorf("event about %s stored; it was dropped", n)
		}
		delete(want, n)
	}
	if len(want) > 0 {
		t.Errorf("no event about %v", want)
	}
}

// failing fails the first n requests that create Events with a transport
// error, in front of the real API server.
type failing struct {
	rt    http.RoundTripper
	left  atomic.Int32
	tries atomic.Int32
}

func (f *failing) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/events") {
		f.tries.Add(1)
		if f.left.Add(-1) >= 0 {
			return nil, errors.New("connection reset by the test")
		}
	}
	return f.rt.RoundTrip(req)
}

// A write that fails without an answer from the API server is tried
// again; one the API server refuses (here: NotFound, the namespace does
// not exist) is not, and is counted as rejected.
func TestWriteRetries(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	f := &failing{}
	f.left.Store(2)
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { f.rt = rt; return f }
	rec, err := New(cfg, env.Scheme, Options{Component: Speaker, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	rec.retryDelay = 10 * time.Millisecond
	t.Cleanup(func() { rec.Stop(ctx) })

	rec.Eventf(serviceRef(ns, 1), corev1.EventTypeWarning, "AnnounceFailed", "retried")
	waitStored(t, env, ns, 1)
	if n := f.tries.Load(); n != 3 {
		t.Errorf("tries of the event: %d, want 3 (two transport errors, then stored)", n)
	}
	rec.Eventf(serviceRef("herald-test-no-such-namespace", 2), corev1.EventTypeWarning, "AnnounceFailed", "refused")
	rec.Eventf(serviceRef(ns, 3), corev1.EventTypeWarning, "AnnounceFailed", "after the refused one")
	waitStored(t, env, ns, 2)
	if n := f.tries.Load(); n != 5 {
		t.Errorf("tries in all: %d, want 5 (the refused event tried once)", n)
	}
	if n := dropped(rec, DropRejected); n != 1 {
		t.Errorf(`herald_events_dropped_total{reason="rejected"} = %v, want 1`, n)
	}
	if n := dropped(rec, DropUnreachable); n != 0 {
		t.Errorf(`herald_events_dropped_total{reason="unreachable"} = %v, want 0`, n)
	}
}

// Stop writes the queued events before it returns, and the worker ends;
// later events are counted, EventfWait returns ErrStopped. With a stalled
// API server, Stop returns once its context ends and counts what it could
// not write.
func TestStop(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()

	t.Run("flushes", func(t *testing.T) {
		ns := env.Namespace(t)
		rec, err := New(env.Config, env.Scheme, Options{Component: Controller, Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		const n = 200
		for i := range n {
			rec.Eventf(serviceRef(ns, i), corev1.EventTypeNormal, "IPAllocated", "queued")
		}
		rec.Stop(ctx)
		select {
		case <-rec.done:
		default:
			t.Error("Stop returned before the worker ended")
		}
		names, err := stored(ctx, env, ns)
		if err != nil {
			t.Fatal(err)
		}
		if len(names) != n {
			t.Errorf("%d events stored when Stop returned, want %d", len(names), n)
		}
		noDrops(t, rec)
		rec.Eventf(serviceRef(ns, n), corev1.EventTypeNormal, "IPAllocated", "after Stop")
		if err := rec.EventfWait(ctx, serviceRef(ns, n+1), corev1.EventTypeNormal, "IPAllocated", "after Stop"); !errors.Is(err, ErrStopped) {
			t.Errorf("EventfWait after Stop: %v, want %v", err, ErrStopped)
		}
		if d := dropped(rec, DropStopped); d != 2 {
			t.Errorf(`herald_events_dropped_total{reason="stopped"} = %v, want 2`, d)
		}
	})

	t.Run("stalled", func(t *testing.T) {
		ns := env.Namespace(t)
		cfg, g := newGate(env.Config)
		t.Cleanup(g.release)
		rec, err := New(cfg, env.Scheme, Options{Component: Controller, Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		const n = 10
		for i := range n {
			rec.Eventf(serviceRef(ns, i), corev1.EventTypeNormal, "IPAllocated", "held")
		}
		g.waitHeld(t)
		expired, cancel := context.WithCancel(ctx)
		cancel()
		rec.Stop(expired)
		if d := dropped(rec, DropStopped); d != n {
			t.Errorf(`herald_events_dropped_total{reason="stopped"} = %v, want %d`, d, n)
		}
	})
}

// EventfWritten returns once the event is written, not when it is queued;
// when its context ends first it returns the context's error, and the
// event is still written.
func TestEventfWritten(t *testing.T) {
	arrived, release := make(chan struct{}, 2), make(chan struct{})
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/events") {
			http.Error(w, "not here", http.StatusNotFound)
			return
		}
		arrived <- struct{}{}
		<-release
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"kind":"Event","apiVersion":"v1","metadata":{"name":"e","namespace":"ns","resourceVersion":"1"}}`)
	}))
	defer api.Close()
	rec, err := New(&rest.Config{Host: api.URL}, clientgoscheme.Scheme, Options{Component: Controller, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Stop(context.Background())

	done := make(chan error, 1)
	go func() {
		done <- rec.EventfWritten(context.Background(), serviceRef("ns", 1), corev1.EventTypeNormal, "IPAllocated", "Assigned IP %q", []string{"2001:db8::1"})
	}()
	<-arrived
	select {
	case err := <-done:
		t.Fatalf("EventfWritten returned %v while the write was held", err)
	case <-time.After(200 * time.Millisecond):
	}
	release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatalf("EventfWritten = %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		done <- rec.EventfWritten(ctx, serviceRef("ns", 2), corev1.EventTypeNormal, "IPAllocated", "Assigned IP %q", []string{"2001:db8::2"})
	}()
	<-arrived
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("EventfWritten with its context ended = %v, want %v", err, context.Canceled)
	}
	release <- struct{}{}
	rec.Stop(context.Background())
	noDrops(t, rec)
}

// TestCorrelatorCacheSize: an identical event about an object still in the
// correlator's cache adds to the earlier Event's count; with
// CorrelatorCacheSize 2, once events about two other objects have pushed
// the object out, it is a new Event. Both on a real API server.
func TestCorrelatorCacheSize(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	for _, tc := range []struct {
		size       int
		wantEvents int // Events about svc-00000
		wantCount  int32
	}{
		{size: 0, wantEvents: 1, wantCount: 2}, // client-go's 4,096
		{size: 2, wantEvents: 2, wantCount: 1},
	} {
		t.Run(fmt.Sprint(tc.size), func(t *testing.T) {
			ns := env.Namespace(t)
			rec, err := New(env.Config, env.Scheme, Options{Component: Speaker, Registerer: prometheus.NewRegistry(), CorrelatorCacheSize: tc.size})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rec.Stop(ctx) })
			for _, i := range []int{0, 1, 2, 0} {
				if err := rec.EventfWritten(ctx, serviceRef(ns, i), corev1.EventTypeNormal, "nodeAssigned", "announcing from node %q", "n1"); err != nil {
					t.Fatal(err)
				}
			}
			var evs corev1.EventList
			if err := env.Client.List(ctx, &evs, client.InNamespace(ns), client.MatchingFields{"involvedObject.name": serviceRef(ns, 0).Name}); err != nil {
				t.Fatal(err)
			}
			var counts []int32
			for _, e := range evs.Items {
				counts = append(counts, e.Count)
			}
			if len(evs.Items) != tc.wantEvents || !slices.Contains(counts, tc.wantCount) {
				t.Errorf("CorrelatorCacheSize %d: Events about svc-00000 with counts %v, want %d Events, one with count %d", tc.size, counts, tc.wantEvents, tc.wantCount)
			}
			noDrops(t, rec)
		})
	}
	if _, err := New(env.Config, env.Scheme, Options{Component: Speaker, CorrelatorCacheSize: -1}); err == nil {
		t.Error("New accepted a negative CorrelatorCacheSize")
	}
}

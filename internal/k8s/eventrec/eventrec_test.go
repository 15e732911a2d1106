package eventrec

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

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
	// bench-alloc), far above the core/v1 recorder's (a few KiB in all).
	retainedBudget = 1 << 20
	// chunk is how many events are emitted before waiting for the last of
	// them to be stored: below the recorder's queue of 1,000, which drops
	// what does not fit.
	chunk = 500
)

// The controller's recorder keeps bounded state, however many Services it
// reports on: in a burst of new Services it sends one IPAllocated event per
// Service, and the events.k8s.io recorder it used before kept each for 6 to
// 12 minutes (19 MiB of the controller's 61.7 MiB live heap after 10,000
// Services, docs/performance.md). The test sends events about distinct
// Services to a real API server until the correlator's caches are full, and
// then as many again: the live heap after the second step (after
// runtime.GC) may not have grown by more than retainedBudget. It also
// checks what kubectl describe reads: source, reportingController, type,
// reason and message.
func TestRetainedStateBounded(t *testing.T) {
	ctrllog.SetLogger(logr.Discard()) // the manager's event log lines
	env := testenv.Start(t)
	ns := env.Namespace(t)
	mgr, err := manager.New(env.Config, manager.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	rec := For(mgr, Controller)

	name := func(i int) string { return fmt.Sprintf("svc-%05d", i) }
	send := func(from, to int) {
		t.Helper()
		for start := from; start < to; start += chunk {
			end := min(start+chunk, to)
			for i := start; i < end; i++ {
				ref := &corev1.ObjectReference{
					APIVersion: "v1", Kind: "Service", Namespace: ns, Name: name(i),
					UID: types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i)),
				}
				rec.Eventf(ref, corev1.EventTypeNormal, "IPAllocated", "Assigned IP %q", []string{fmt.Sprintf("198.51.100.%d", i%256)})
			}
			last := name(end - 1)
			poll.Until(t, 2*time.Minute, "the event about "+last, func() error {
				var evs corev1.EventList
				if err := env.Client.List(ctx, &evs, client.InNamespace(ns), client.MatchingFields{"involvedObject.name": last}); err != nil {
					return err
				}
				if len(evs.Items) == 0 {
					return fmt.Errorf("no event about %s yet", last)
				}
				return nil
			})
		}
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

	// What kubectl describe and kubectl get events show, in both APIs.
	var core corev1.EventList
	if err := env.Client.List(ctx, &core, client.InNamespace(ns), client.MatchingFields{"involvedObject.name": name(7)}); err != nil {
		t.Fatal(err)
	}
	if len(core.Items) != 1 {
		t.Fatalf("core/v1 events about %s: %d, want 1", name(7), len(core.Items))
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
	if ev.ReportingController != Controller || ev.Regarding.Name != name(7) || ev.Note != e.Message {
		t.Errorf("events.k8s.io/v1 view: reportingController %q, regarding %q, note %q", ev.ReportingController, ev.Regarding.Name, ev.Note)
	}
}

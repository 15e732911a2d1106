package speaker

import (
	"context"
	"errors"
	"sync"

	"k8s.io/client-go/util/workqueue"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/k8s/apiretry"
)

// statusWorkers is how many status objects are written in parallel.
const statusWorkers = 4

// statusWriter converges this node's ServiceL2Status and ServiceBGPStatus
// objects to what the reconcile worker decided, in the background with
// statusWorkers goroutines. The reconcile worker only records the desired
// status (want) and goes on, so announcements never wait for API writes:
// when a node fails and a thousand Services move to this one, all of them
// are announced first and their status objects follow. A failed write is
// retried with apiretry's write rate limiter (per Service, 20 ms doubling
// to 5 s: apiretry.WriteFirstDelay, apiretry.WriteMaxDelay).
//
// It also watches this node's objects (statuswatch.go): one deleted or
// changed by someone else, or a stale one, queues its Service again, so the
// objects converge to the decision whoever touches them.
type statusWriter struct {
	s     *Controller
	queue workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	entries map[string]*statusEntry // "namespace/name" -> desired and known state
	// started: the reconcile loop has begun its first pass over every
	// Service (statusWriter.start); until then the watch's events for
	// Services without an entry are the initial listing, which that pass
	// covers.
	started bool
}

// statusEntry is the desired status of one Service on this node (nil: no
// object) and what is known of its objects.
type statusEntry struct {
	l2Want  *v1beta1.ServiceL2StatusStatus
	bgpWant *v1beta1.ServiceBGPStatusStatus
	l2      statusRecord[v1beta1.ServiceL2StatusStatus]
	bgp     statusRecord[v1beta1.ServiceBGPStatusStatus]
	// undecided: created by the watch for an object of a Service the
	// reconcile loop has not decided since (it was asked to); nothing is
	// written until want.
	undecided bool
	// watch is what the watch told that the writer has not accounted for
	// yet; nil when nothing (almost always).
	watch *statusWatch
}

func newStatusWriter(s *Controller) *statusWriter {
	return &statusWriter{
		s:       s,
		queue:   workqueue.NewTypedRateLimitingQueue(apiretry.NewWriteRateLimiter[string]()),
		entries: map[string]*statusEntry{},
	}
}

// want records the desired status objects of a Service and schedules a
// write. For a Service the writer does not track yet, existing (when
// non-nil) are its objects as listed at start-up, and known without
// existing means it has none (every object of this node was listed, and the
// watch reports any created since); otherwise they are listed before the first
// write. For a tracked Service both are ignored: the writer's own record
// is newer than any listing the caller made.
func (w *statusWriter) want(key string, l2 *v1beta1.ServiceL2StatusStatus, bgp *v1beta1.ServiceBGPStatusStatus, existing *existingStatus, known bool) {
	w.mu.Lock()
	e := w.entries[key]
	if e == nil && l2 == nil && bgp == nil && existing == nil && known {
		w.mu.Unlock()
		return // no object wanted and none exists: nothing to write
	}
	if e == nil {
		e = &statusEntry{}
		e.l2.known, e.bgp.known = known, known
		if existing != nil {
			e.l2 = statusRecord[v1beta1.ServiceL2StatusStatus]{known: true, objs: recordOf(l2StatusKind, existing.l2)}
			e.bgp = statusRecord[v1beta1.ServiceBGPStatusStatus]{known: true, objs: recordOf(bgpStatusKind, existing.bgp)}
		}
		w.entries[key] = e
	}
	e.l2Want, e.bgpWant, e.undecided = l2, bgp, false
	w.mu.Unlock()
	w.queue.Add(key)
}

// run writes until ctx ends, then waits for the workers.
func (w *statusWriter) run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range statusWorkers {
		wg.Go(func() {
			for w.next(ctx) {
			}
		})
	}
	<-ctx.Done()
	w.queue.ShutDown()
	wg.Wait()
	return nil
}

// next processes one queued Service; false once the queue is shut down.
func (w *statusWriter) next(ctx context.Context) bool {
	key, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(key)
	if err := w.write(ctx, key); err != nil {
		if ctx.Err() == nil {
			w.s.log.Error("writing status objects failed, retrying", "service", key, "error", err)
			w.queue.AddRateLimited(key)
		}
		return true
	}
	w.queue.Forget(key)
	return true
}

// write applies one Service's desired status objects. The workqueue never
// hands the same key to two workers at once, and want leaves the records
// of a tracked Service alone, so the records copied here are this worker's
// until it stores them back.
func (w *statusWriter) write(ctx context.Context, key string) error {
	nsName, ok := splitKey(key)
	if !ok {
		return nil
	}
	w.mu.Lock()
	e := w.entries[key]
	if e == nil || e.undecided {
		w.mu.Unlock()
		return nil
	}
	l2Want, bgpWant := e.l2Want, e.bgpWant
	l2, bgp := e.l2, e.bgp
	if e.watch == nil {
		e.watch = &statusWatch{}
	}
	e.watch.busy = true
	checkL2, checkBGP := e.watch.check[kindL2], e.watch.check[kindBGP]
	w.mu.Unlock()

	var echo []statusEvent
	errL2 := applyStatus(ctx, w.s, l2StatusKind, nsName, l2Want, &l2, checkL2, &echo)
	errBGP := applyStatus(ctx, w.s, bgpStatusKind, nsName, bgpWant, &bgp, checkBGP, &echo)

	w.mu.Lock()
	// The entry is e still: only this worker deletes entries of key.
	e.l2, e.bgp = l2, bgp
	requeue := e.watch.settle(e, echo, errL2 == nil, errBGP == nil)
	if e.watch.empty() {
		e.watch = nil
	}
	if errL2 == nil && errBGP == nil && e.l2Want == nil && e.bgpWant == nil &&
		l2Want == nil && bgpWant == nil && (e.watch == nil || e.watch.idle()) && !requeue {
		// Nothing wanted, nothing left. The events of its deletes find
		// no entry and are dropped (observe).
		delete(w.entries, key)
	}
	w.mu.Unlock()
	if requeue {
		w.queue.Add(key)
	}
	return errors.Join(errL2, errBGP)
}

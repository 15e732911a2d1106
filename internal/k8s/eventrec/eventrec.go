// Package eventrec gives the controller and the speaker their Kubernetes
// event recorder, and names the component their events come from.
//
// A Recorder writes core/v1 Events, as MetalLB's components do, with a
// bounded memory and without dropping an event silently:
//
//   - Eventf and EventfWait build the Event and put it in a queue of
//     QueueSize events (1,000 by default). Eventf never blocks: when the
//     queue is full the event is dropped. EventfWait waits for room until
//     its context ends: a caller emitting a burst of events emits them at
//     the pace the API server takes them, and none is lost. EventfWritten
//     also waits until the event has been written (or dropped), for a
//     caller that decides before each event whether it may go now (the
//     controller's low-priority queue, which holds its events while a burst
//     of new Services is being created).
//   - One worker takes the events from the queue one at a time, passes each
//     through client-go's event correlator (k8s.io/client-go/tools/record,
//     with client-go's defaults, as MetalLB's recorder) and writes it: a
//     Create, or a Patch of the Event an earlier identical one created
//     (a Create again when that Event is gone). A transport error is tried
//     again, up to 6 tries with 1, 2, 4, 8 and 16 s between them (the first
//     pause randomised); an error the API server answers with (Forbidden,
//     Invalid, the namespace terminating, ...) is not.
//   - Every event that is not written is counted in
//     herald_events_dropped_total{component,reason} (docs/metrics.md) and
//     logged, at most one line per 10 seconds with the number left out
//     since the previous line.
//
// The memory is bounded: the queue, and the correlator's three LRU caches
// of 4,096 entries each (client-go's maxLruCacheEntries; the speaker's
// 512: SpeakerCorrelatorCacheSize). client-go's
// events.k8s.io/v1 broadcaster (tools/events), which the controller used
// before, keeps a deep copy of every event it sent for 6 to 12 minutes,
// with no bound on their number: about 1.9 KiB per Service in a burst of
// 10,000 new Services (docs/performance.md). client-go's core/v1
// broadcaster (tools/record) has a bounded memory too, but drops what does
// not fit its queue of 1,000 events without a caller knowing: 692 of
// 10,000 IPAllocated events in that burst.
//
// What the correlator does with events, per component (client-go's
// defaults, kept):
//
//   - Identical events (object, type, reason and message) are one Event
//     whose count grows, while the first is still in the LRU cache.
//   - More than 10 events on one object with the same type and reason but
//     different messages within 10 minutes are written as one Event whose
//     message starts with "(combined from similar events): ".
//   - At most 25 events per object and type are written at once; after
//     that one more every 5 minutes, and the others are dropped (counted
//     with reason "spamFilter").
//
// The Events carry the component as source.component and
// reportingController (the "From" column of kubectl describe); their
// reportingInstance and action are empty. Writing them needs create and
// patch on core/v1 events, nothing in events.k8s.io.
package eventrec

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	recordutil "k8s.io/client-go/tools/record/util"
	"k8s.io/client-go/tools/reference"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The component names Herald's events carry: MetalLB's, so that what MetalLB
// users filter on (kubectl get events --field-selector
// source=metallb-controller or reportingComponent=metallb-speaker, the "From"
// column of kubectl describe) keeps working (docs/migrating-from-metallb.md,
// "Events and log reasons"). Herald's own objects are named herald-*.
const (
	// Controller is the controller's component name.
	Controller = "metallb-controller"
	// Speaker is the speakers' component name.
	Speaker = "metallb-speaker"
)

// DefaultQueueSize is how many events wait for the writer unless
// Options.QueueSize says otherwise: client-go's core/v1 broadcaster's.
const DefaultQueueSize = 1000

// The reasons of herald_events_dropped_total: why an event was not
// written.
const (
	// DropQueueFull: Eventf found the queue full.
	DropQueueFull = "queueFull"
	// DropCanceled: the context of EventfWait ended before the queue had
	// room.
	DropCanceled = "canceled"
	// DropStopped: emitted after Stop, or still queued when Stop's
	// context ended.
	DropStopped = "stopped"
	// DropSpamFilter: client-go's per-object spam filter (25 events per
	// object and type, then one per 5 minutes).
	DropSpamFilter = "spamFilter"
	// DropRejected: the API server refused it (a status error), or the
	// request could not be built; not tried again.
	DropRejected = "rejected"
	// DropUnreachable: every try failed without an answer from the API
	// server (a transport error).
	DropUnreachable = "unreachable"
	// DropInvalid: no reference could be made for the object (a kind the
	// scheme does not know), or the type is neither Normal nor Warning.
	DropInvalid = "invalid"
)

var dropReasons = []string{DropQueueFull, DropCanceled, DropStopped, DropSpamFilter, DropRejected, DropUnreachable, DropInvalid}

// ErrStopped is returned by EventfWait after Stop.
var ErrStopped = errors.New("event recorder stopped")

// How the worker writes: up to maxTries tries of requestTimeout each, with
// firstRetryDelay doubling between them (the first pause randomised, so
// that components do not all retry at once after an API server restart).
// The pauses add up to 31 s, enough to ride out a restart of the API
// server.
const (
	maxTries        = 6
	firstRetryDelay = time.Second
	requestTimeout  = 30 * time.Second
	// dropLogInterval: at most one log line per interval about events
	// not written.
	dropLogInterval = 10 * time.Second
)

// Options configure New.
type Options struct {
	// Component names the source of the events: Controller or Speaker.
	// Required.
	Component string
	// QueueSize is how many events may wait for the writer; 0 means
	// DefaultQueueSize.
	QueueSize int
	// Registerer receives herald_events_dropped_total; nil means
	// controller-runtime's metrics.Registry, which the metrics endpoint
	// serves. Recorders on one Registerer share the counter.
	Registerer prometheus.Registerer
	// Log receives the lines about events not written and, at debug
	// level, one line per event written; nil discards them. The caller
	// names the part (no identity key is added).
	Log *slog.Logger
	// CorrelatorCacheSize is the number of entries of each of the
	// correlator's three LRU caches; 0 means client-go's 4,096. An
	// identical event about an object no longer in the cache is a new
	// Event (count 1), not a count added to the earlier one.
	CorrelatorCacheSize int
}

// SpeakerCorrelatorCacheSize is the speaker's CorrelatorCacheSize (For):
// the speaker runs on every node, and at 4,096 entries the caches held
// about 5.6 MB of its 25 MB live heap with 5,000 Services
// (docs/performance.md, "Speaker memory"); 512 still folds repeated events
// about the 512 Services it last reported on. The size also bounds the
// per-object spam filter: an object pushed out of the cache starts again
// with a full allowance (docs/troubleshooting.md).
const SpeakerCorrelatorCacheSize = 512

// Recorder writes core/v1 Events through a bounded queue and one worker
// (see the package doc). Its methods are safe for concurrent use; a nil
// *Recorder records nothing.
type Recorder struct {
	component string
	scheme    *runtime.Scheme
	events    typedcorev1.EventInterface
	log       *slog.Logger
	dropped   *prometheus.CounterVec

	// mu guards stopped and sending on queue: Stop closes queue under the
	// write lock, senders send under the read lock.
	mu      sync.RWMutex
	stopped bool
	queue   chan queued
	// stopping is closed when Stop begins: it wakes EventfWait.
	stopping chan struct{}
	stopOne  sync.Once

	// ctx bounds the worker's requests and pauses; cancel abandons what
	// is still queued when Stop's context ends.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	correlator *record.EventCorrelator
	retryDelay time.Duration

	dropLog dropLog
}

// Cluster is what For needs of a controller-runtime manager.
type Cluster interface {
	GetConfig() *rest.Config
	GetScheme() *runtime.Scheme
}

// For returns a Recorder writing core/v1 Events from component (Controller
// or Speaker) with mgr's REST config and scheme; its drop counter goes to
// controller-runtime's metrics registry. Call Stop after mgr.Start
// returns.
func For(mgr Cluster, component string, log *slog.Logger) (*Recorder, error) {
	o := Options{Component: component, Log: log}
	if component == Speaker {
		o.CorrelatorCacheSize = SpeakerCorrelatorCacheSize
	}
	return New(mgr.GetConfig(), mgr.GetScheme(), o)
}

// New returns a Recorder writing core/v1 Events with cfg, making object
// references with scheme. Its worker runs until Stop. It fails when
// Component is empty, QueueSize or CorrelatorCacheSize is negative, the client cannot be built or
// the counter cannot be registered.
func New(cfg *rest.Config, scheme *runtime.Scheme, o Options) (*Recorder, error) {
	if o.Component == "" {
		return nil, errors.New("eventrec: Options.Component is empty")
	}
	if o.QueueSize < 0 {
		return nil, fmt.Errorf("eventrec: Options.QueueSize %d is negative", o.QueueSize)
	}
	if o.CorrelatorCacheSize < 0 {
		return nil, fmt.Errorf("eventrec: Options.CorrelatorCacheSize %d is negative", o.CorrelatorCacheSize)
	}
	size := o.QueueSize
	if size == 0 {
		size = DefaultQueueSize
	}
	// Protobuf both ways: an Event and the answer (the stored Event, its
	// managed fields included) cost the recorder and the API server less
	// to encode and decode than JSON (BenchmarkWrite).
	evCfg := rest.CopyConfig(cfg)
	evCfg.ContentType = runtime.ContentTypeProtobuf
	evCfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cs, err := typedcorev1.NewForConfig(evCfg)
	if err != nil {
		return nil, fmt.Errorf("eventrec: core/v1 client: %w", err)
	}
	reg := o.Registerer
	if reg == nil {
		reg = crmetrics.Registry
	}
	dropped, err := registerDropped(reg)
	if err != nil {
		return nil, err
	}
	for _, reason := range dropReasons {
		dropped.WithLabelValues(o.Component, reason) // exists at 0
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Recorder{
		component:  o.Component,
		scheme:     scheme,
		events:     cs.Events(""),
		log:        log,
		dropped:    dropped,
		queue:      make(chan queued, size),
		stopping:   make(chan struct{}),
		ctx:        ctx,
		cancel:     cancel,
		done:       make(chan struct{}),
		correlator: record.NewEventCorrelatorWithOptions(record.CorrelatorOptions{LRUCacheSize: o.CorrelatorCacheSize}),
		retryDelay: firstRetryDelay,
	}
	go r.run()
	return r, nil
}

// registerDropped registers herald_events_dropped_total on reg, or returns
// the one registered before.
func registerDropped(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herald_events_dropped_total",
		Help: "Kubernetes events not written, by component and reason (queueFull, canceled, stopped, spamFilter, rejected, unreachable, invalid).",
	}, []string{"component", "reason"})
	if err := reg.Register(c); err != nil {
		if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
			if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				return existing, nil
			}
		}
		return nil, fmt.Errorf("eventrec: register herald_events_dropped_total: %w", err)
	}
	return c, nil
}

// Eventf records an Event about object without blocking: eventtype is
// corev1.EventTypeNormal or corev1.EventTypeWarning, the message is
// messageFmt formatted with args (fmt.Sprintf). object is a Kubernetes
// object whose kind the recorder's scheme knows, or a
// *corev1.ObjectReference. When the queue is full the event is dropped
// (herald_events_dropped_total{reason="queueFull"}, and logged).
func (r *Recorder) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	if r == nil {
		return
	}
	ev := r.makeEvent(object, eventtype, reason, fmt.Sprintf(messageFmt, args...))
	if ev == nil {
		return
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.stopped {
		r.drop(DropStopped, ev, nil)
		return
	}
	select {
	case r.queue <- queued{ev: ev}:
	default:
		r.drop(DropQueueFull, ev, nil)
	}
}

// queued is an event in the queue; written, when not nil, is closed once
// the worker is done with it (written, or dropped).
type queued struct {
	ev      *corev1.Event
	written chan struct{}
}

// EventfWait is Eventf that waits for room in the queue instead of dropping
// the event: back-pressure for a caller emitting many events from a queue
// of its own. It returns once the event is queued (not written), or with
// ctx's error when ctx ends first, ErrStopped after Stop, or an error
// naming the object when no Event can be made for it; the event is then
// counted as dropped.
func (r *Recorder) EventfWait(ctx context.Context, object runtime.Object, eventtype, reason, messageFmt string, args ...any) error {
	if r == nil {
		return nil
	}
	return r.enqueueWait(ctx, queued{}, object, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

// EventfWritten is EventfWait that then also waits until the worker is done
// with the event: it has been written, or dropped and counted (the API
// server refused it, or stayed unreachable through every try). A caller
// that decides before each event whether it may go (the controller's
// low-priority queue, which waits while a burst of Services is being
// created) so has at most one event of its own queued or being written,
// instead of filling the queue and leaving the worker writing for seconds
// after it decided to wait. It returns nil then, or what EventfWait
// returns, or ctx's error when ctx ends before the worker is done (the
// event stays queued: it is written, or dropped by Stop).
func (r *Recorder) EventfWritten(ctx context.Context, object runtime.Object, eventtype, reason, messageFmt string, args ...any) error {
	if r == nil {
		return nil
	}
	q := queued{written: make(chan struct{})}
	if err := r.enqueueWait(ctx, q, object, eventtype, reason, fmt.Sprintf(messageFmt, args...)); err != nil {
		return err
	}
	select {
	case <-q.written:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// enqueueWait builds the event and puts it in the queue as q, waiting for
// room (EventfWait).
func (r *Recorder) enqueueWait(ctx context.Context, q queued, object runtime.Object, eventtype, reason, message string) error {
	q.ev = r.makeEvent(object, eventtype, reason, message)
	if q.ev == nil {
		return fmt.Errorf("eventrec: no event about %T %s: see the log", object, reason)
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.stopped {
		r.drop(DropStopped, q.ev, nil)
		return ErrStopped
	}
	select {
	case r.queue <- q:
		return nil
	case <-ctx.Done():
		r.drop(DropCanceled, q.ev, ctx.Err())
		return ctx.Err()
	case <-r.stopping:
		// Stop waits for the read lock: the queue is still open.
		select {
		case r.queue <- q:
			return nil
		default:
			r.drop(DropStopped, q.ev, nil)
			return ErrStopped
		}
	}
}

// Stop stops taking events and writes those queued until ctx ends; what is
// still queued then is dropped (reason "stopped"). It returns once the
// worker has ended. Events emitted after Stop are dropped and counted.
// Calling it again waits for the same end.
func (r *Recorder) Stop(ctx context.Context) {
	if r == nil {
		return
	}
	r.stopOne.Do(func() {
		close(r.stopping)
		r.mu.Lock()
		r.stopped = true
		close(r.queue)
		r.mu.Unlock()
	})
	select {
	case <-r.done:
	case <-ctx.Done():
		r.cancel()
		<-r.done
	}
	r.cancel()
	r.dropLog.flush(r.log, r.component)
}

// makeEvent builds the Event as client-go's recorder does, or counts it as
// invalid and returns nil.
func (r *Recorder) makeEvent(object runtime.Object, eventtype, reason, message string) *corev1.Event {
	ref, err := reference.GetReference(r.scheme, object)
	if err != nil {
		r.count(DropInvalid)
		r.log.Error("no event: no reference to the object", "eventType", eventtype, "reason", reason, "message", message, "error", err)
		return nil
	}
	if !recordutil.ValidateEventType(eventtype) {
		r.count(DropInvalid)
		r.log.Error("no event: type is neither Normal nor Warning", "object", refString(ref), "eventType", eventtype, "reason", reason)
		return nil
	}
	now := metav1.Now()
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	return &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: recordutil.GenerateEventName(ref.Name, now.UnixNano()), Namespace: ns},
		InvolvedObject:      *ref,
		Reason:              reason,
		Message:             message,
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		Type:                eventtype,
		Source:              corev1.EventSource{Component: r.component},
		ReportingController: r.component,
	}
}

// run writes the queued events until Stop closes the queue.
func (r *Recorder) run() {
	defer close(r.done)
	for q := range r.queue {
		r.write(q.ev)
		if q.written != nil {
			close(q.written)
		}
	}
}

// write correlates ev and writes it, trying a transport error again, as
// client-go's broadcaster does (recordToSink).
func (r *Recorder) write(ev *corev1.Event) {
	if r.ctx.Err() != nil {
		r.drop(DropStopped, ev, nil)
		return
	}
	res, err := r.correlator.EventCorrelate(ev)
	if err != nil {
		// The patch of a repeated event could not be made: written as
		// the correlator returned it, as client-go does.
		r.log.Debug("event correlation", "object", refString(&ev.InvolvedObject), "reason", ev.Reason, "error", err)
	}
	if res.Skip {
		r.drop(DropSpamFilter, ev, nil)
		return
	}
	delay := r.retryDelay
	for try := 1; ; try++ {
		err := r.send(res.Event, res.Patch)
		if err == nil {
			return
		}
		switch {
		case r.ctx.Err() != nil:
			r.drop(DropStopped, ev, err)
			return
		case !retriable(err):
			r.drop(DropRejected, ev, err)
			return
		case try == maxTries:
			r.drop(DropUnreachable, ev, err)
			return
		}
		pause := delay
		if try == 1 {
			pause = time.Duration(rand.Float64() * float64(delay))
		}
		delay *= 2
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-r.ctx.Done():
			t.Stop()
			r.drop(DropStopped, ev, err)
			return
		}
	}
}

// send writes ev once: a Patch when the correlator counted it as a repeat
// (a Create when the Event it patches is gone), else a Create.
func (r *Recorder) send(ev *corev1.Event, patch []byte) error {
	ctx, cancel := context.WithTimeout(r.ctx, requestTimeout)
	defer cancel()
	var (
		got *corev1.Event
		err error
	)
	repeat := ev.Count > 1
	if repeat {
		got, err = r.events.PatchWithEventNamespaceWithContext(ctx, ev, patch)
	}
	if !repeat || apierrors.IsNotFound(err) {
		ev.ResourceVersion = ""
		got, err = r.events.CreateWithEventNamespaceWithContext(ctx, ev)
	}
	if err != nil {
		return err
	}
	// The name and resourceVersion the next repeat patches.
	r.correlator.UpdateState(got)
	if r.log.Enabled(ctx, slog.LevelDebug) {
		r.log.Debug("event", "object", refString(&got.InvolvedObject), "type", got.Type, "reason", got.Reason, "message", got.Message, "count", got.Count)
	}
	return nil
}

// retriable reports whether a write that failed with err may succeed when
// tried again: not when the API server answered (a status error), nor when
// the request could not be built (client-go's recordEvent).
func retriable(err error) bool {
	if _, ok := errors.AsType[*apierrors.StatusError](err); ok {
		return false
	}
	if _, ok := errors.AsType[*rest.RequestConstructionError](err); ok {
		return false
	}
	return true
}

// count counts one event not written.
func (r *Recorder) count(reason string) {
	r.dropped.WithLabelValues(r.component, reason).Inc()
}

// drop counts ev as not written for reason and logs it, rate-limited. An
// event refused because its namespace is terminating or it exists already
// is logged at debug level only (client-go's recorder does the same).
func (r *Recorder) drop(reason string, ev *corev1.Event, err error) {
	r.count(reason)
	if reason == DropRejected && (apierrors.IsAlreadyExists(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause)) {
		r.log.Debug("event not written", "reason", reason, "object", refString(&ev.InvolvedObject), "eventReason", ev.Reason, "error", err)
		return
	}
	r.dropLog.note(r.log, r.component, reason, ev, err)
}

// dropLog rate-limits the log lines about events not written.
type dropLog struct {
	mu      sync.Mutex
	last    time.Time
	skipped int
}

// note logs ev's drop unless a line was logged less than dropLogInterval
// ago; then it only counts it for the next line.
func (l *dropLog) note(log *slog.Logger, component, reason string, ev *corev1.Event, err error) {
	l.mu.Lock()
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < dropLogInterval {
		l.skipped++
		l.mu.Unlock()
		return
	}
	skipped := l.skipped
	l.last, l.skipped = now, 0
	l.mu.Unlock()
	args := []any{"reason", reason, "object", refString(&ev.InvolvedObject), "eventType", ev.Type, "eventReason", ev.Reason,
		"message", ev.Message, "notLoggedSinceLastLine", skipped, "metric", "herald_events_dropped_total{component=\"" + component + "\"}"}
	if err != nil {
		args = append(args, "error", err)
	}
	log.Warn("Kubernetes event not written", args...)
}

// flush logs how many drops the last lines left out.
func (l *dropLog) flush(log *slog.Logger, component string) {
	l.mu.Lock()
	skipped := l.skipped
	l.skipped = 0
	l.mu.Unlock()
	if skipped > 0 {
		log.Warn("more Kubernetes events not written since the last line", "count", skipped,
			"metric", "herald_events_dropped_total{component=\""+component+"\"}")
	}
}

// refString names the object an event is about: Kind namespace/name.
func refString(ref *corev1.ObjectReference) string {
	if ref.Namespace == "" {
		return ref.Kind + " " + ref.Name
	}
	return ref.Kind + " " + ref.Namespace + "/" + ref.Name
}

package speaker

import (
	"context"
	"slices"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/herald-lb/herald/api/v1beta1"
)

// The status writer watches this node's status objects (the manager cache
// holds those labelled with this node, reduced to name, resourceVersion
// and the Service: CacheOptions, transformStatus, statusRef) and
// compares every event with its record of the objects (statusRecord):
//
//   - an event of its own write (the name and resourceVersion it wrote,
//     or the name it deleted: statusWatch.echo), or one that matches the
//     record, changes nothing: the writer's own writes never make it write
//     again;
//   - any other event (an object deleted, its status or labels edited, an
//     object the record does not hold) makes the record unknown and queues
//     the Service: the next write lists its objects from the API server
//     and converges them to the decision (recreate, rewrite, delete an
//     extra one);
//   - an event of an object of a Service the writer has no entry for (a
//     stale object someone created or restored) asks the reconcile loop to
//     decide that Service, whose decision then deletes or adopts it.
//
// An object that leaves this node's selection (the metallb.io/node label
// removed) looks like a deletion to the cache; the writer reads it by name
// and, when its labels name neither another node nor another Service,
// treats it as the Service's object again and restores its labels (the
// same object, no second one next to it). An object relabelled for another
// node or Service is that one's.

// statusKindID tells the two status kinds apart in statusEvent.
type statusKindID uint8

const (
	kindL2 statusKindID = iota
	kindBGP
	numStatusKinds
)

// statusEvent is one watch event of a status object (or one write of the
// writer, in statusWatch.echo).
type statusEvent struct {
	kind     statusKindID
	name, rv string
	// gone: the object is not the Service's any more (deleted, left this
	// node's selection, or relabelled for another Service).
	gone bool
	// left: deleted or left this node's selection; the writer reads it by
	// name before it creates another (applyStatus's check).
	left bool
}

// echoes reports whether w, a write of the writer, is what ev reports.
func (w statusEvent) echoes(ev statusEvent) bool {
	return w.kind == ev.kind && w.name == ev.name && w.gone == ev.gone && (w.gone || w.rv == ev.rv)
}

// maxEcho bounds statusWatch.echo: the events of writes that never come
// (an informer that re-listed skips intermediate versions) are dropped
// after this many newer writes. A write is at most three requests per kind.
const maxEcho = 8

// statusWatch is the transient watch state of one Service's entry.
type statusWatch struct {
	// busy: a worker is writing the Service; events go to pending and are
	// judged once its writes are known.
	busy    bool
	pending []statusEvent
	// echo: the writer's writes whose events have not come yet.
	echo []statusEvent
	// check: names of objects that left, per kind, to read by name at the
	// next listing.
	check [numStatusKinds][]string
}

func (t *statusWatch) idle() bool {
	return !t.busy && len(t.pending) == 0 && len(t.check[kindL2]) == 0 && len(t.check[kindBGP]) == 0
}

func (t *statusWatch) empty() bool { return t.idle() && len(t.echo) == 0 }

// accounts reports whether the writer knows what ev reports (its own write,
// or the state its record holds). The echo it matches is used up, and so
// are the object's older ones (an informer that re-listed never sends
// them) or, when the record matches, all of the object's.
func (e *statusEntry) accounts(ev statusEvent) bool {
	t := e.watch
	upTo := -1
	if t != nil {
		upTo = slices.IndexFunc(t.echo, func(w statusEvent) bool { return w.echoes(ev) })
	}
	ok := upTo >= 0
	if !ok {
		if ev.kind == kindL2 {
			ok = e.l2.accounts(ev)
		} else {
			ok = e.bgp.accounts(ev)
		}
		if ok && t != nil {
			upTo = len(t.echo) - 1
		}
	}
	if upTo >= 0 {
		kept := t.echo[:0]
		for i, w := range t.echo {
			if i > upTo || w.kind != ev.kind || w.name != ev.name {
				kept = append(kept, w)
			}
		}
		clear(t.echo[len(kept):])
		t.echo = kept
	}
	return ok
}

func (r *statusRecord[S]) accounts(ev statusEvent) bool {
	if !r.known {
		return false
	}
	i := slices.IndexFunc(r.objs, func(o statusObject[S]) bool { return o.name == ev.name })
	if ev.gone {
		return i < 0 // an object the record does not hold went away
	}
	return i >= 0 && r.objs[i].resourceVersion == ev.rv
}

// forget makes the record of ev's kind unknown (the next write lists) and
// notes an object that left for reading by name.
func (e *statusEntry) forget(ev statusEvent) {
	if ev.kind == kindL2 {
		e.l2.known = false
	} else {
		e.bgp.known = false
	}
	if ev.left {
		if e.watch == nil {
			e.watch = &statusWatch{}
		}
		if c := &e.watch.check[ev.kind]; !slices.Contains(*c, ev.name) {
			*c = append(*c, ev.name)
		}
	}
}

// settle ends a write of e: echo are its writes, ok says per kind whether
// its records were listed (and the check names read) and applied. It judges
// the events that came during the write and reports whether the Service
// must be written again.
func (t *statusWatch) settle(e *statusEntry, echo []statusEvent, okL2, okBGP bool) bool {
	t.busy = false
	if okL2 {
		t.check[kindL2] = nil
	}
	if okBGP {
		t.check[kindBGP] = nil
	}
	t.echo = append(t.echo, echo...)
	if n := len(t.echo); n > maxEcho {
		t.echo = slices.Clone(t.echo[n-maxEcho:])
	}
	again := false
	for _, ev := range t.pending {
		if !e.accounts(ev) {
			e.forget(ev)
			again = true
		}
	}
	t.pending = nil
	return again
}

// start lets watch events create entries (see started).
func (w *statusWriter) start() {
	w.mu.Lock()
	w.started = true
	w.mu.Unlock()
}

// observe judges one watch event of an object of Service key; true asks
// the reconcile loop to decide the Service (the writer has no entry).
func (w *statusWriter) observe(key string, ev statusEvent) (decide bool) {
	if _, ok := splitKey(key); !ok {
		return false
	}
	w.mu.Lock()
	e := w.entries[key]
	switch {
	case e == nil:
		if !w.started || ev.gone {
			w.mu.Unlock()
			return false // the start-up pass covers it / nothing to restore
		}
		w.entries[key] = &statusEntry{undecided: true}
		w.mu.Unlock()
		w.s.log.Info(logStatusUnknown, "service", key, "kind", kindName(ev.kind), "name", ev.name)
		return true
	case e.watch != nil && e.watch.busy:
		e.watch.pending = append(e.watch.pending, ev)
		w.mu.Unlock()
		return false
	case e.accounts(ev):
		if e.watch != nil && e.watch.empty() {
			e.watch = nil
		}
		w.mu.Unlock()
		return false
	}
	e.forget(ev)
	w.mu.Unlock()
	change := "changed"
	if ev.gone {
		change = "deleted or relabelled"
	}
	w.s.log.Info(logStatusForeign, "service", key, "kind", kindName(ev.kind), "name", ev.name, "change", change)
	w.queue.Add(key)
	return false
}

// The watch's log messages.
const (
	logStatusForeign = "status object changed by someone else, restoring the Service's status objects"
	logStatusUnknown = "status object of a Service this node has no status for, deciding the Service"
)

func kindName(k statusKindID) string {
	if k == kindL2 {
		return l2StatusKind.name
	}
	return bgpStatusKind.name
}

// statusKeyOf is the Service key a status object's
// metallb.io/service-namespace and service-name labels name ("" when they
// name none). The cache holds statusRefs, which keep those labels' values.
func statusKeyOf(o client.Object) string {
	var ns, name string
	if r, ok := o.(*statusRef); ok {
		ns, name = r.serviceNamespace, r.serviceName
	} else {
		l := o.GetLabels()
		ns, name = l[v1beta1.LabelServiceNamespace], l[v1beta1.LabelServiceName]
	}
	if ns == "" || name == "" {
		return ""
	}
	return ns + "/" + name
}

// eventHandler feeds the watch events of one status kind to observe; a
// Service to decide goes to the reconcile loop's queue.
func (w *statusWriter) eventHandler(kind statusKindID) handler.EventHandler {
	type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]
	observe := func(q queue, key string, ev statusEvent) {
		if w.observe(key, ev) {
			if nsName, ok := splitKey(key); ok {
				q.Add(reconcile.Request{NamespacedName: nsName})
			}
		}
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q queue) {
			observe(q, statusKeyOf(e.Object), statusEvent{kind: kind, name: e.Object.GetName(), rv: e.Object.GetResourceVersion()})
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q queue) {
			o, n := e.ObjectOld, e.ObjectNew
			if o.GetResourceVersion() == n.GetResourceVersion() {
				return // a resync
			}
			key, oldKey := statusKeyOf(n), statusKeyOf(o)
			observe(q, key, statusEvent{kind: kind, name: n.GetName(), rv: n.GetResourceVersion()})
			if oldKey != key {
				// Relabelled: gone from the old Service; read by name
				// when its labels now name no Service.
				observe(q, oldKey, statusEvent{kind: kind, name: n.GetName(), rv: n.GetResourceVersion(), gone: true, left: key == ""})
			}
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q queue) {
			observe(q, statusKeyOf(e.Object), statusEvent{kind: kind, name: e.Object.GetName(), rv: e.Object.GetResourceVersion(), gone: true, left: true})
		},
	}
}

package allocation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/internal/annotations"
	"github.com/herald-lb/herald/internal/ipam"
	"github.com/herald-lb/herald/internal/k8s/fieldmanager"
	"github.com/herald-lb/herald/internal/svcstate"
)

func splitKey(key string) client.ObjectKey {
	ns, name, _ := strings.Cut(key, "/")
	return client.ObjectKey{Namespace: ns, Name: name}
}

// reconcile brings one Service's addresses, status and condition in line
// with the allocator. Nothing happens before initialisation (the first
// valid configuration and the import of every existing assignment).
func (c *Controller) reconcile(ctx context.Context, key string) error {
	if !c.initialized.Load() {
		return nil
	}
	var svc corev1.Service
	if err := c.opts.Cache.Get(ctx, splitKey(key), &svc, readOnly); err != nil {
		if apierrors.IsNotFound(err) {
			c.forget(key)
			return nil
		}
		return fmt.Errorf("get Service %s: %w", key, err)
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer && !OwnsClass(&svc, c.opts.LBClass) {
		c.forget(key) // another implementation's Service: never written
		return nil
	}
	if !Handled(&svc, c.opts.LBClass) {
		return c.clear(ctx, &svc)
	}

	var nsLabels map[string]string
	var ns corev1.Namespace
	if err := c.opts.Cache.Get(ctx, client.ObjectKey{Name: svc.Namespace}, &ns, readOnly); err == nil {
		nsLabels = ns.Labels
	}
	req, reqErr := RequestFor(&svc, nsLabels)
	fp := requestFingerprint(req)

	wasSeen, prevFP := c.book.See(key, fp)

	before, hadBefore := c.alloc.Lookup(key)
	statusIPs := IngressIPs(&svc)
	if !wasSeen {
		// What the status shows stays out of other Services' reach until
		// a write of ours changes it.
		c.noteShown(key, statusIPs)
	}

	if reqErr != nil {
		c.alloc.Release(key)
		return c.finish(ctx, &svc, outcome{before: before, err: reqErr, reqChanged: prevFP != fp})
	}

	if !wasSeen && !hadBefore && len(statusIPs) > 0 {
		// First sight of a Service that already has addresses (written by
		// another controller instance): keep them if they are valid.
		asg, err := c.alloc.Import(key, statusIPs, req)
		c.noteImport(key, fp, err)
		before, hadBefore = asg, len(asg.IPs) > 0
	}

	if c.book.CheckConflict(key, fp) {
		asg, err := c.alloc.Import(key, statusIPs, req)
		var ce *ipam.ConflictError
		if errors.As(err, &ce) {
			return c.reportConflict(ctx, &svc, statusIPs, err)
		}
		before = asg
		c.book.ResolveConflict(key)
	}

	asg, err := c.alloc.Allocate(req)
	return c.finish(ctx, &svc, outcome{
		before: before, after: asg, err: err, pending: err != nil,
		reqChanged: hadBefore && prevFP != "" && prevFP != fp,
	})
}

// outcome is the result of one allocation, for finish.
type outcome struct {
	before, after ipam.Assignment
	err           error
	// pending: the Service waits for an address (retried on wake-ups).
	pending bool
	// reqChanged: the sharing-relevant request changed, which may let a
	// pending Service share an address now.
	reqChanged bool
}

// finish writes the status and condition of an allocation outcome, emits
// the events, and wakes pending Services when an address may have been freed.
func (c *Controller) finish(ctx context.Context, svc *corev1.Service, o outcome) error {
	key := Key(svc)
	newIPs := o.after.IPs
	if o.err != nil {
		newIPs = nil
	}
	statusIPs := IngressIPs(svc)
	lost := false
	for _, ip := range o.before.IPs {
		if !slices.Contains(newIPs, ip) {
			lost = true
		}
	}

	var cond metav1.Condition
	if o.err == nil {
		cond = desiredCondition(svc, true, ReasonAllocated, fmt.Sprintf("Assigned IP %q", ipStrings(newIPs)))
	} else {
		cond = desiredCondition(svc, false, ReasonFor(o.err), o.err.Error())
	}
	oldCond := meta.FindStatusCondition(svc.Status.Conditions, ConditionType)
	condChanged := oldCond == nil || oldCond.Status != cond.Status || oldCond.Reason != cond.Reason || oldCond.Message != cond.Message

	wantPool := ""
	if o.err == nil && len(newIPs) > 0 {
		wantPool = o.after.Pool
	}
	// The pool annotation goes with the status when the status is
	// written (its echo then agrees with the allocator and is not
	// reconciled again), else on its own from the low-priority queue.
	poolDue := svc.Annotations[annotations.AllocatedFromPool] != wantPool
	if !statusUpToDate(svc, newIPs, &cond) {
		var pool *string
		if poolDue {
			pool = &wantPool
		}
		if err := c.writeStatus(ctx, svc, newIPs, &cond, pool); err != nil {
			return err
		}
		poolDue = false
	}

	recorded := c.book.TakeClearReason(key)
	started, waited := c.book.Waiting(key, o.err == nil)

	dropped := droppedIPs(statusIPs, newIPs)
	if len(dropped) > 0 {
		clearReason := svcstate.ClearReason(recorded, o.err, o.after.Dropped, o.reqChanged)
		c.later(key, svc, dueEvent{kind: dueCleared, ips: dropped, text: clearReason})
	}
	if o.err == nil {
		if !slices.Equal(statusIPs, newIPs) {
			c.later(key, svc, dueEvent{kind: dueAssigned, ips: newIPs})
			if pool := o.after.Pool; pool != "" && !c.advertised(pool) {
				c.later(key, svc, dueEvent{kind: duePoolNotAdvertised, ips: newIPs, text: pool})
			}
			if dep := annotations.Deprecated(svc); len(dep) > 0 {
				msg := fmt.Sprintf("Service uses deprecated annotations %q: use the metallb.io/ keys instead", dep)
				if cf := annotations.Conflicts(svc); len(cf) > 0 {
					msg += "; the two keys disagree: " + strings.Join(cf, "; ")
				}
				c.later(key, svc, dueEvent{kind: dueDeprecated, text: msg})
			}
			if waited {
				c.metrics.duration.Observe(time.Since(started).Seconds())
			}
		}
	} else if condChanged {
		c.later(key, svc, dueEvent{kind: dueFailed, text: o.err.Error()})
	}
	c.setPending(key, o.pending)

	if poolDue || c.hasLater(key) {
		c.queueSecondary(key)
	}
	if !slices.Equal(o.before.IPs, newIPs) {
		c.statsChanged()
	}
	if lost || o.reqChanged {
		c.wakePending()
	}
	return nil
}

// reportConflict keeps a Service whose existing address is held by another
// one as it is, and says so in its condition and an event.
func (c *Controller) reportConflict(ctx context.Context, svc *corev1.Service, statusIPs []netip.Addr, err error) error {
	key := Key(svc)
	cond := desiredCondition(svc, false, ReasonImportConflict,
		fmt.Sprintf("existing IP kept but not owned: %v", err))
	old := meta.FindStatusCondition(svc.Status.Conditions, ConditionType)
	if !statusUpToDate(svc, statusIPs, &cond) {
		if perr := c.patchStatus(ctx, svc, statusIPs, &cond); perr != nil {
			return perr
		}
	}
	if old == nil || old.Reason != cond.Reason || old.Message != cond.Message {
		c.later(key, svc, dueEvent{kind: dueFailed, text: cond.Message})
	}
	c.setPending(key, true)
	if c.hasLater(key) {
		c.queueSecondary(key)
	}
	return nil
}

// noteImport records the outcome of importing a Service's existing IPs.
func (c *Controller) noteImport(key, fp string, err error) {
	if c.book.NoteImport(key, fp, err) {
		c.log.Warn("existing IP held by another Service; not moved", "service", key, "error", err)
	}
}

// clear removes the controller's state from a Service that is no longer
// handled (no longer a LoadBalancer, or headless): its IPs are released and
// its ingress, condition and pool annotation removed. The released IPs go
// to no other Service before the write removing them from the status has
// succeeded (ipam.Allocator.SetStatus); a failed write is retried.
func (c *Controller) clear(ctx context.Context, svc *corev1.Service) error {
	key := Key(svc)
	before, had := c.alloc.Lookup(key)
	ours := had || svc.Annotations[annotations.AllocatedFromPool] != "" ||
		meta.FindStatusCondition(svc.Status.Conditions, ConditionType) != nil || len(c.alloc.Shown(key)) > 0
	if !ours {
		c.forget(key)
		return nil
	}
	c.alloc.Release(key)
	if had && len(before.IPs) > 0 {
		c.statsChanged()
	}
	poolDue := svc.Annotations[annotations.AllocatedFromPool] != ""
	if len(svc.Status.LoadBalancer.Ingress) > 0 || meta.FindStatusCondition(svc.Status.Conditions, ConditionType) != nil {
		var pool *string
		if poolDue {
			pool = new(string) // removed with the status
		}
		if err := c.writeStatus(ctx, svc, nil, nil, pool); err != nil {
			return err
		}
		poolDue = false
		if ips := IngressIPs(svc); len(ips) > 0 {
			c.later(key, svc, dueEvent{kind: dueCleared, ips: ips, text: "the Service is no longer a LoadBalancer with a ClusterIP"})
		}
	}
	c.forget(key)
	if poolDue || c.hasLater(key) {
		c.queueSecondary(key)
	}
	return nil
}

// forget drops everything the controller holds for key (the Service is
// gone, not ours, or its status no longer shows an address) and wakes
// pending Services if an address was freed.
func (c *Controller) forget(key string) {
	before, had := c.alloc.Lookup(key)
	c.alloc.Release(key)
	freed := c.alloc.SetStatus(key, nil)
	// Events still to emit (c.deferred) stay for the low-priority queue.
	c.metrics.pending.Set(float64(c.book.Forget(key)))
	if freed || (had && len(before.IPs) > 0) {
		c.statsChanged()
		c.wakePending()
	}
}

// noteShown records that key's status shows ips (ipam.Allocator.SetStatus)
// and wakes pending Services when that freed an address.
func (c *Controller) noteShown(key string, ips []netip.Addr) {
	if c.alloc.SetStatus(key, ips) {
		c.statsChanged()
		c.wakePending()
	}
}

// patchStatus writes ips and cond (nil deletes ours) in one status patch,
// on the condition that the Service is still at svc's resourceVersion
// (optimistic concurrency): a replica that read an old copy, or lost its
// leadership without noticing yet, cannot overwrite a newer write. After a
// successful write the allocator learns what the status shows (SetStatus:
// addresses it no longer shows may go to other Services). A refused write
// (Conflict) makes the Service be re-read and decided again (redecide);
// other failures are counted, reported once per distinct error by a
// Warning event on the Service, and retried.
func (c *Controller) patchStatus(ctx context.Context, svc *corev1.Service, ips []netip.Addr, cond *metav1.Condition) error {
	return c.writeStatus(ctx, svc, ips, cond, nil)
}

// writeStatus is patchStatus that also sets the pool annotation to *pool
// ("" removes it) in the same write when pool is not nil.
func (c *Controller) writeStatus(ctx context.Context, svc *corev1.Service, ips []netip.Addr, cond *metav1.Condition, pool *string) error {
	body, err := statusPatch(svc.ResourceVersion, ips, cond, pool)
	if err != nil {
		return err
	}
	key := Key(svc)
	target := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name}}
	if err := c.opts.Client.Status().Patch(ctx, target, client.RawPatch(types.StrategicMergePatchType, body),
		client.FieldOwner(fieldmanager.Controller)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // deleted meanwhile: the delete event releases it
		}
		c.writeFailed(ctx, svc, err)
		return fmt.Errorf("patch Service %s status at resourceVersion %s: %w", key, svc.ResourceVersion, err)
	}
	c.book.WriteSucceeded(key)
	c.noteShown(key, ips)
	return nil
}

// writeFailed accounts for a refused status write of svc.
func (c *Controller) writeFailed(ctx context.Context, svc *corev1.Service, err error) {
	c.metrics.writeErrors.WithLabelValues(statusReason(err)).Inc()
	key := Key(svc)
	if apierrors.IsConflict(err) {
		c.redecide(ctx, key)
		return
	}
	if c.book.WriteFailed(key, err.Error()) {
		c.log.Warn("Service status write failed; retrying", "service", key, "error", err)
		c.event(svc, corev1.EventTypeWarning, EventStatusWriteFailed,
			fmt.Sprintf("Status write failed (retrying; addresses the status shows stay reserved for this Service until it succeeds): %v", err))
	}
}

// statusReason is the API status reason of a failed write (Conflict,
// Forbidden, Invalid, ...), "Unknown" when the error carries none.
func statusReason(err error) string {
	if r := string(apierrors.ReasonForError(err)); r != "" {
		return r
	}
	return "Unknown"
}

// redecide follows a status write refused by its resourceVersion
// precondition: the Service changed after it was read (another writer, or
// the cache was behind). What its status shows now is read from the API
// server and recorded, the controller's decision for it is dropped unless
// the status already shows it, and the next reconcile decides again as on
// first sight: it keeps the addresses the status shows when they are still
// valid (ImportConflict when another Service holds them).
func (c *Controller) redecide(ctx context.Context, key string) {
	var live corev1.Service
	if err := c.reader().Get(ctx, splitKey(key), &live); err != nil {
		if !apierrors.IsNotFound(err) {
			c.log.Debug("re-read after a write conflict", "service", key, "error", err)
		}
		return // NotFound: the delete event forgets it; else retried
	}
	shown := IngressIPs(&live)
	if Handled(&live, c.opts.LBClass) {
		c.noteShown(key, shown)
	}
	if asg, _ := c.alloc.Lookup(key); !slices.Equal(asg.IPs, shown) {
		c.alloc.Release(key) // addresses the status shows stay parked
		c.book.Unsee(key)
		c.statsChanged()
	}
	c.log.Debug("status write conflict; re-deciding", "service", key, "shown", shown)
}

// reader returns the API server reader (Options.APIReader), else the cache.
func (c *Controller) reader() client.Reader {
	if c.opts.APIReader != nil {
		return c.opts.APIReader
	}
	return c.opts.Cache
}

// syncSecondary does a Service's low-priority work after its status write:
// the metallb.io/ip-allocated-from-pool annotation, then the events.
func (c *Controller) syncSecondary(ctx context.Context, key string) error {
	c.mu.Lock()
	delete(c.annSince, key)
	c.mu.Unlock()
	if err := c.syncAnnotation(ctx, key); err != nil {
		return err
	}
	c.flushLater(ctx, key)
	return nil
}

// syncAnnotation writes (or removes) metallb.io/ip-allocated-from-pool to
// match the allocator.
func (c *Controller) syncAnnotation(ctx context.Context, key string) error {
	if !c.initialized.Load() {
		return nil
	}
	var svc corev1.Service
	if err := c.opts.Cache.Get(ctx, splitKey(key), &svc, readOnly); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("get Service %s: %w", key, err)
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer && !OwnsClass(&svc, c.opts.LBClass) {
		return nil
	}
	want := ""
	if Handled(&svc, c.opts.LBClass) {
		if asg, ok := c.alloc.Lookup(key); ok && len(asg.IPs) > 0 {
			want = asg.Pool
		}
	}
	have := svc.Annotations[annotations.AllocatedFromPool]
	if have == want {
		return nil
	}
	var val any
	if want != "" {
		val = want
	}
	// Through the status subresource, as MetalLB does: the API server keeps
	// metadata changes of a services/status write, so the controller needs
	// no write access to Services themselves. Same precondition as the
	// status.
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": svc.ResourceVersion,
		"annotations":     map[string]any{annotations.AllocatedFromPool: val},
	}})
	if err != nil {
		return fmt.Errorf("build annotation patch: %w", err)
	}
	target := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name}}
	if err := c.opts.Client.Status().Patch(ctx, target, client.RawPatch(types.MergePatchType, body), client.FieldOwner(fieldmanager.Controller)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		c.metrics.writeErrors.WithLabelValues(statusReason(err)).Inc()
		return fmt.Errorf("patch Service %s annotation (status subresource) at resourceVersion %s: %w", key, svc.ResourceVersion, err)
	}
	return nil
}

// droppedIPs returns the addresses of old not in cur.
func droppedIPs(old, cur []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, ip := range old {
		if !slices.Contains(cur, ip) {
			out = append(out, ip)
		}
	}
	return out
}

// later queues event e about svc (key) for the low-priority queue: during
// a burst the only write per Service on the fast path is its status patch.
// The event is about svc as it is now (its UID and resourceVersion).
func (c *Controller) later(key string, svc *corev1.Service, e dueEvent) {
	e.uid, e.rv = svc.UID, svc.ResourceVersion
	c.mu.Lock()
	c.deferred[key] = append(c.deferred[key], e)
	c.mu.Unlock()
}

func (c *Controller) hasLater(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.deferred[key]) > 0
}

// flushLater emits key's queued events. It waits until the recorder has
// written each one (EventfWritten): a burst's events go at the pace the API
// server takes them, and none is dropped; only this low-priority queue
// waits, never the fast path. Waiting for the write, not only for room in
// the recorder's queue, keeps the events out of a burst that starts while
// they are being written: the low-priority workers then hold at most one
// event each, and yield makes the next key wait, where the recorder's queue
// would hold up to 1,000 events and write them during the burst (about 2
// ms of API server CPU each on bench-alloc's API server, BenchmarkWrite).
// When ctx ends (shutdown) the rest are counted as dropped by the recorder.
func (c *Controller) flushLater(ctx context.Context, key string) {
	c.mu.Lock()
	evs := c.deferred[key]
	delete(c.deferred, key)
	c.mu.Unlock()
	if c.opts.Recorder == nil {
		return
	}
	for i := range evs {
		typ, reason, msg := evs[i].render()
		// An error is counted and logged by the recorder.
		_ = c.opts.Recorder.EventfWritten(ctx, evs[i].ref(key), typ, reason, "%s", msg)
	}
}

// queueSecondary queues key's low-priority work and notes when.
func (c *Controller) queueSecondary(key string) {
	c.mu.Lock()
	if _, ok := c.annSince[key]; !ok {
		c.annSince[key] = time.Now()
	}
	c.mu.Unlock()
	c.annQueue.Add(key)
}

// event records an event on obj when a recorder is configured, without
// waiting (Eventf drops and counts it when the recorder's queue is full).
func (c *Controller) event(obj client.Object, typ, reason, msg string) {
	if c.opts.Recorder == nil {
		return
	}
	c.opts.Recorder.Eventf(obj, typ, reason, "%s", msg)
}

// advertised reports whether the configuration in force has an
// advertisement for pool (true when unknown, to warn only when sure).
func (c *Controller) advertised(pool string) bool {
	snap := c.tracker.Current()
	if snap == nil {
		return true
	}
	pl, ok := snap.Pool(pool)
	return !ok || pl.Advertised()
}

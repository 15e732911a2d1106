// Package sessiongc keeps the BGPSessionState objects (herald.io/v1alpha1)
// of a node honest when that node's speaker cannot write them: while no
// speaker runs there it marks them not known, and once no speaker Pod has
// existed there for a grace period it deletes them.
//
// The speaker writes its node's objects from its session callbacks and
// deletes those of peers that are no longer configured; a dead speaker
// writes nothing (a clean stop neither: the writer ends with the process),
// so its last states, often Established, would stay. The controller
// therefore looks at the node's speaker Pods (Classify) and:
//
//   - marks every object of the node not known (Mark: bgpStatus Unknown,
//     since and lastErrorTime the time the controller first saw the
//     speaker down, lastError "speaker on node N not running since T: ...")
//     as soon as no speaker container runs there: no Pod, a Pod being
//     deleted, or a Pod that is not Ready and whose speaker container is
//     not running (crashed, in CrashLoopBackOff, killed, not started yet);
//   - does not mark a Pod whose speaker container runs but that is not Ready
//     yet (starting, loading its configuration): that speaker is alive and
//     writes its own states; marking it would overwrite them and the two
//     would take turns. A speaker that runs but hangs is marked once its
//     liveness probe has the kubelet restart it;
//   - deletes the objects once no speaker Pod (or only Pods being
//     deleted) has existed for the grace (DefaultGrace): the speaker is
//     gone for good (DaemonSet deleted, node no longer selected). The
//     grace covers a rollout: the new speaker adopts the objects.
//
// A speaker that starts again reads its node's objects before its first
// write and rewrites each one whose status differs from its own, so the
// mark goes with the first write of the new process.
//
// Times are the controller's: from when it first saw the speaker down or
// absent (a controller restart starts the clocks again, which only delays
// a deletion; objects already marked keep their mark and its time).
//
// The reconciler is keyed by node name, from BGPSessionState events (label
// metallb.io/node) and from speaker Pod events (spec.nodeName).
package sessiongc

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/herald-lb/herald/api/v1alpha1"
)

// conflictRetry is how soon a node is looked at again after marking one of
// its objects lost a resourceVersion conflict (the object's update event
// usually brings it back sooner).
const conflictRetry = time.Second

// DefaultGrace is how long a node may be without a speaker Pod before its
// BGPSessionState objects are deleted: longer than a DaemonSet rollout
// takes to re-create one node's Pod.
const DefaultGrace = time.Minute

// StatusUnknown is the bgpStatus (and, for a peer with BFD, the bfdStatus)
// of an object marked by the controller: its speaker does not run, so the
// session's state is not known (the router has likely closed it; with
// graceful restart it may keep the routes for a while).
const StatusUnknown = "Unknown"

// ContainerName is the speaker's container in its Pod (the chart's); when a
// Pod has no container status of that name, any running container counts.
const ContainerName = "speaker"

// Speaker is what a node has of a speaker Pod, best first.
type Speaker int

const (
	// SpeakerNone: no speaker Pod is scheduled on the node.
	SpeakerNone Speaker = iota
	// SpeakerTerminating: only speaker Pods being deleted
	// (deletionTimestamp set).
	SpeakerTerminating
	// SpeakerNotRunning: a speaker Pod that is not Ready and whose speaker
	// container does not run (waiting, terminated, no status yet).
	SpeakerNotRunning
	// SpeakerStarting: a speaker Pod that is not Ready but whose speaker
	// container runs.
	SpeakerStarting
	// SpeakerReady: a speaker Pod whose Ready condition is True.
	SpeakerReady
)

func (s Speaker) String() string {
	switch s {
	case SpeakerNone:
		return "no speaker Pod"
	case SpeakerTerminating:
		return "speaker Pod being deleted"
	case SpeakerNotRunning:
		return "speaker container not running"
	case SpeakerStarting:
		return "speaker Pod not Ready yet"
	case SpeakerReady:
		return "speaker Pod Ready"
	}
	return fmt.Sprintf("Speaker(%d)", int(s))
}

// Classify says what node has of the speaker Pods pods (any node's: the
// others are skipped): the best of its Pods.
func Classify(pods []corev1.Pod, node string) Speaker {
	best := SpeakerNone
	for i := range pods {
		if p := &pods[i]; p.Spec.NodeName == node {
			best = max(best, classifyPod(p))
		}
	}
	return best
}

func classifyPod(p *corev1.Pod) Speaker {
	if p.DeletionTimestamp != nil {
		return SpeakerTerminating
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return SpeakerReady
		}
	}
	anyRunning := false
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == ContainerName {
			anyRunning = cs.State.Running != nil
			break
		}
		anyRunning = anyRunning || cs.State.Running != nil
	}
	if anyRunning {
		return SpeakerStarting
	}
	return SpeakerNotRunning
}

// Decision is what Decide answers.
type Decision struct {
	// DownSince is when no speaker was first seen running (SpeakerNone,
	// SpeakerTerminating or SpeakerNotRunning); zero while one runs. The
	// caller keeps it for the next call.
	DownSince time.Time
	// AbsentSince is when no speaker Pod (SpeakerNone or
	// SpeakerTerminating) was first seen; zero while a Pod exists. The
	// caller keeps it for the next call.
	AbsentSince time.Time
	// Mark: the node's objects are to be marked not known (Mark), since
	// DownSince.
	Mark bool
	// Delete: the node's objects are to be deleted now.
	Delete bool
	// After is when to look again if nothing changes (the rest of the
	// grace); 0: no need.
	After time.Duration
}

// Decide says what to do with the BGPSessionState objects of a node. s is
// the node's speaker (Classify), downSince and absentSince the clocks of
// the previous Decision (zero: not yet), now the current time and grace
// the period (DefaultGrace when <= 0). It is pure.
func Decide(s Speaker, downSince, absentSince, now time.Time, grace time.Duration) Decision {
	if grace <= 0 {
		grace = DefaultGrace
	}
	start := func(t time.Time) time.Time {
		if t.IsZero() || t.After(now) {
			return now
		}
		return t
	}
	switch s {
	case SpeakerReady, SpeakerStarting:
		return Decision{}
	case SpeakerNotRunning:
		return Decision{DownSince: start(downSince), Mark: true}
	}
	d := Decision{DownSince: start(downSince), AbsentSince: start(absentSince)}
	if d.DownSince.After(d.AbsentSince) {
		d.DownSince = d.AbsentSince
	}
	if gone := now.Sub(d.AbsentSince); gone < grace {
		d.Mark, d.After = true, grace-gone
	} else {
		d.Delete = true
	}
	return d
}

// markPrefix starts the lastError of node's objects marked by the
// controller.
func markPrefix(node string) string { return "speaker on node " + node + " not running since " }

// Mark returns st marked not known: no speaker has run on node since since
// (whole seconds, UTC), for reason (Speaker.String). The speaker's fields
// (node, peer, bgpPeer, vrf, prefix counts) are kept; a bfdStatus other
// than "N/A" becomes Unknown. changed is false when st is already marked
// for node (its mark and time are kept). It is pure.
func Mark(st v1alpha1.BGPSessionStateStatus, node string, since time.Time, reason Speaker) (out v1alpha1.BGPSessionStateStatus, changed bool) {
	if st.BGPStatus == StatusUnknown && strings.HasPrefix(st.LastError, markPrefix(node)) {
		return st, false
	}
	t := metav1.NewTime(since.UTC().Truncate(time.Second))
	st.BGPStatus = StatusUnknown
	if st.BFDStatus != "" && st.BFDStatus != v1alpha1.BFDStatusNotConfigured {
		st.BFDStatus = StatusUnknown
	}
	st.LastTransitionTime = &t
	st.LastError = markPrefix(node) + t.Format(time.RFC3339) + ": " + reason.String()
	st.LastErrorTime = t.DeepCopy()
	return st, true
}

// Options configure Setup.
type Options struct {
	// Namespace is Herald's namespace (speaker Pods and BGPSessionStates).
	Namespace string
	// SpeakerSelector selects the speaker Pods (the speakers'
	// METALLB_ML_LABELS); an empty selector disables the reconciler.
	SpeakerSelector labels.Selector
	// Grace is DefaultGrace when <= 0.
	Grace time.Duration
	// Log receives deletions; nil discards.
	Log *slog.Logger
	// Now is time.Now when nil (tests).
	Now func() time.Time

	// observe, when set (tests), is called with every decision.
	observe func(node string, s Speaker, now time.Time, d Decision)
}

// Setup adds the reconciler to mgr, whose cache must hold Pods and
// BGPSessionStates of Namespace. With an empty SpeakerSelector it adds
// nothing.
func Setup(mgr manager.Manager, o Options) error {
	if o.SpeakerSelector == nil || o.SpeakerSelector.Empty() {
		return nil
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	r := &reconciler{c: mgr.GetClient(), o: o, clocks: map[string]clock{}}
	inNS := func(obj client.Object) bool { return obj.GetNamespace() == o.Namespace }
	return builder.ControllerManagedBy(mgr).
		Named("bgpsessionstate-gc").
		Watches(&v1alpha1.BGPSessionState{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
			node := obj.GetLabels()[v1alpha1.LabelNode]
			if node == "" || !inNS(obj) {
				return nil
			}
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: node}}}
		})).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
			p, ok := obj.(*corev1.Pod)
			if !ok || p.Spec.NodeName == "" || !inNS(obj) || !o.SpeakerSelector.Matches(labels.Set(p.Labels)) {
				return nil
			}
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: p.Spec.NodeName}}}
		})).
		Complete(r)
}

type reconciler struct {
	c client.Client
	o Options

	mu     sync.Mutex
	clocks map[string]clock // node -> when its speaker was first seen down, absent
}

type clock struct{ down, absent time.Time }

func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	node := req.Name
	var states v1alpha1.BGPSessionStateList
	if err := r.c.List(ctx, &states, client.InNamespace(r.o.Namespace), client.MatchingLabels{v1alpha1.LabelNode: node}); err != nil {
		return reconcile.Result{}, err
	}
	if len(states.Items) == 0 {
		r.mu.Lock()
		delete(r.clocks, node)
		r.mu.Unlock()
		return reconcile.Result{}, nil
	}
	var pods corev1.PodList
	if err := r.c.List(ctx, &pods, client.InNamespace(r.o.Namespace), client.MatchingLabelsSelector{Selector: r.o.SpeakerSelector}); err != nil {
		return reconcile.Result{}, err
	}
	s := Classify(pods.Items, node)
	now := r.o.Now()
	r.mu.Lock()
	prev := r.clocks[node]
	d := Decide(s, prev.down, prev.absent, now, r.o.Grace)
	if d.DownSince.IsZero() {
		delete(r.clocks, node)
	} else {
		r.clocks[node] = clock{d.DownSince, d.AbsentSince}
	}
	r.mu.Unlock()
	if r.o.observe != nil {
		r.o.observe(node, s, now, d)
	}
	if d.Mark {
		err := r.mark(ctx, node, states.Items, d.DownSince, s)
		if apierrors.IsConflict(err) {
			// Routine: the speaker (or a cache behind a write) was
			// faster. Looked at again soon, not reported as an error.
			r.o.Log.Debug("marking BGPSessionState lost a conflict, retrying", "node", node, "error", err)
			return reconcile.Result{RequeueAfter: conflictRetry}, nil
		}
		return reconcile.Result{RequeueAfter: d.After}, err
	}
	if !d.Delete {
		return reconcile.Result{RequeueAfter: d.After}, nil
	}
	for i := range states.Items {
		st := &states.Items[i]
		if err := r.c.Delete(ctx, st, client.Preconditions{UID: &st.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return reconcile.Result{}, fmt.Errorf("delete BGPSessionState %s: %w", st.Name, err)
		}
		r.o.Log.Info("deleted BGPSessionState of a node without speaker", "node", node, "bgpsessionstate", st.Name, "absentSince", d.AbsentSince)
	}
	r.mu.Lock()
	delete(r.clocks, node)
	r.mu.Unlock()
	return reconcile.Result{}, nil
}

// mark writes the not-known mark (Mark) into the status of every object in
// states not yet marked. It returns the API server's Conflict error when
// an object changed since it was listed (the speaker, or the cache, was
// faster): Reconcile then looks again after conflictRetry, without
// reporting an error.
func (r *reconciler) mark(ctx context.Context, node string, states []v1alpha1.BGPSessionState, since time.Time, s Speaker) error {
	for i := range states {
		st := &states[i]
		status, changed := Mark(st.Status, node, since, s)
		if !changed {
			continue
		}
		st.Status = status
		if err := r.c.Status().Update(ctx, st); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("mark BGPSessionState %s not known: %w", st.Name, err)
		}
		r.o.Log.Info("marked BGPSessionState not known: no speaker runs on its node", "node", node, "bgpsessionstate", st.Name, "since", since, "speaker", s.String())
	}
	return nil
}

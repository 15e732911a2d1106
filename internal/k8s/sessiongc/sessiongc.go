// Package sessiongc deletes the BGPSessionState objects (herald.io/v1alpha1)
// of a node on which no speaker Pod has existed for a grace period: the
// speaker that wrote them is gone for good (DaemonSet deleted, node no
// longer selected by it), so their last state would be stale forever.
//
// The speaker deletes the objects of peers that are no longer configured;
// this is the case it cannot handle, its own absence. The grace period
// (DefaultGrace) covers a speaker Pod deleted and re-created during a
// rollout or a restart: its objects stay and the new speaker adopts them.
// Absence is timed by the controller from when it first saw the node's
// objects without a speaker Pod (a controller restart starts the clock
// again, which only delays a deletion). A terminating speaker Pod counts
// as absent.
//
// The reconciler is keyed by node name, from BGPSessionState events (label
// metallb.io/node) and from speaker Pod events (spec.nodeName).
package sessiongc

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/herald-lb/herald/api/v1alpha1"
)

// DefaultGrace is how long a node may be without a speaker Pod before its
// BGPSessionState objects are deleted: longer than a DaemonSet rollout
// takes to re-create one node's Pod.
const DefaultGrace = time.Minute

// Speaker is what a node has of a speaker Pod.
type Speaker int

const (
	// SpeakerNone: no speaker Pod is scheduled on the node.
	SpeakerNone Speaker = iota
	// SpeakerTerminating: only speaker Pods being deleted
	// (deletionTimestamp set).
	SpeakerTerminating
	// SpeakerPresent: a speaker Pod that is not being deleted.
	SpeakerPresent
)

// Decision is what Decide answers.
type Decision struct {
	// AbsentSince is when the speaker was first seen absent; zero while a
	// speaker is present. The caller keeps it for the next call.
	AbsentSince time.Time
	// Delete: the node's objects are to be deleted now.
	Delete bool
	// After is when to look again if nothing changes (the rest of the
	// grace); 0: no need.
	After time.Duration
}

// Decide says whether the BGPSessionState objects of a node are to be
// deleted. s is the node's speaker, absentSince when it was first seen
// absent (zero: not yet), now the current time and grace the period
// (DefaultGrace when <= 0). It is pure.
func Decide(s Speaker, absentSince, now time.Time, grace time.Duration) Decision {
	if grace <= 0 {
		grace = DefaultGrace
	}
	if s == SpeakerPresent {
		return Decision{}
	}
	if absentSince.IsZero() || absentSince.After(now) {
		absentSince = now
	}
	gone := now.Sub(absentSince)
	if gone >= grace {
		return Decision{AbsentSince: absentSince, Delete: true}
	}
	return Decision{AbsentSince: absentSince, After: grace - gone}
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
	r := &reconciler{c: mgr.GetClient(), o: o, absent: map[string]time.Time{}}
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
	absent map[string]time.Time // node -> when its speaker was first seen absent
}

func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	node := req.Name
	var states v1alpha1.BGPSessionStateList
	if err := r.c.List(ctx, &states, client.InNamespace(r.o.Namespace), client.MatchingLabels{v1alpha1.LabelNode: node}); err != nil {
		return reconcile.Result{}, err
	}
	if len(states.Items) == 0 {
		r.mu.Lock()
		delete(r.absent, node)
		r.mu.Unlock()
		return reconcile.Result{}, nil
	}
	var pods corev1.PodList
	if err := r.c.List(ctx, &pods, client.InNamespace(r.o.Namespace), client.MatchingLabelsSelector{Selector: r.o.SpeakerSelector}); err != nil {
		return reconcile.Result{}, err
	}
	s := SpeakerNone
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName != node {
			continue
		}
		if p.DeletionTimestamp == nil {
			s = SpeakerPresent
			break
		}
		s = SpeakerTerminating
	}
	now := r.o.Now()
	r.mu.Lock()
	d := Decide(s, r.absent[node], now, r.o.Grace)
	if d.AbsentSince.IsZero() {
		delete(r.absent, node)
	} else {
		r.absent[node] = d.AbsentSince
	}
	r.mu.Unlock()
	if r.o.observe != nil {
		r.o.observe(node, s, now, d)
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
	delete(r.absent, node)
	r.mu.Unlock()
	return reconcile.Result{}, nil
}

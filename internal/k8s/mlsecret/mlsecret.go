// Package mlsecret keeps the Secret whose key the speakers' memberlist
// encrypts its gossip with, in the format MetalLB's controller writes: a
// Secret in Herald's namespace named by --ml-secret-name, data key
// "secretkey" = 16 random bytes, base64 RawStdEncoding (22 characters).
//
// Unlike MetalLB's, the Secret has no owner: it outlives the controller
// Deployment (deleting or re-creating the Deployment does not rotate the
// key) and goes away with Herald's namespace. The controller watches it and
// creates it again, with a new random key, whenever it is missing (deleted
// by hand, or never created). An existing Secret's key is never changed by
// the controller; an owner reference to a Deployment (written by MetalLB or
// an older Herald) is removed, so that the Secret survives that Deployment.
//
// Speakers pick a new key up from their mounted Secret volume and rotate to
// it without splitting the memberlist cluster (internal/members, SetSecret).
//
// The replaced key. When the Secret is re-created (it was deleted) or its
// key is changed in place, the controller writes the key it replaced into
// the data key "previoussecretkey" and keeps it there for PreviousKeyTTL
// (annotation herald.io/previous-secretkey-until, RFC 3339), then removes
// it. The kubelet updates the running speakers' mounted files a minute or
// two after the change; a speaker Pod that starts meanwhile mounts the new
// key, and without the previous one it could not read the others' gossip
// and would elect as if alone. With both, it starts as a speaker that was
// running when the key changed (internal/members, Config.PreviousSecret).
// The previous key is what the controller saw last: a controller that was
// not running when the Secret was deleted knows none, and the speakers
// restarting in that window are as before. MetalLB ignores the extra data
// key.
package mlsecret

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/herald-lb/herald/internal/k8s/eventrec"
	"github.com/herald-lb/herald/internal/k8s/fieldmanager"
)

// Key is the data key holding the memberlist secret.
const Key = "secretkey"

// PreviousKey is the data key holding the replaced memberlist secret for
// PreviousKeyTTL after a re-creation or a change of Key.
const PreviousKey = "previoussecretkey"

// AnnotationPreviousUntil holds when PreviousKey is removed, RFC 3339.
const AnnotationPreviousUntil = "herald.io/previous-secretkey-until"

// DefaultPreviousKeyTTL is how long PreviousKey stays: the kubelet updates
// mounted Secrets within its sync period plus its cache TTL (1 min each by
// default), so ten minutes cover every running speaker's switch with room.
const DefaultPreviousKeyTTL = 10 * time.Minute

// keyBytes is the number of random bytes of a new secret.
const keyBytes = 16

// Event reasons, on the Secret.
const (
	// ReasonCreated: the Secret was missing and was created with a new key.
	ReasonCreated = "MemberlistKeyCreated"
	// ReasonOwnerRemoved: a Deployment owner reference was removed.
	ReasonOwnerRemoved = "MemberlistKeyOwnerRemoved"
	// ReasonRekeyed: the key was changed in place; the replaced key is
	// kept as PreviousKey.
	ReasonRekeyed = "MemberlistKeyChanged"
)

// Options say which Secret to keep.
type Options struct {
	// Client creates and updates the Secret and reads it before writing.
	// Use an uncached client, so that a Secret deleted a moment ago is not
	// still seen in a cache.
	Client client.Client
	// Namespace is Herald's namespace.
	Namespace string
	// Name is --ml-secret-name; "" means do nothing.
	Name string
	// Deployment is --deployment, the controller Deployment. MetalLB makes
	// it the Secret's owner; Herald removes such an owner reference (any
	// apps/v1 Deployment when empty).
	Deployment string
	// Recorder records events on the Secret (eventrec.For); nil records
	// none.
	Recorder *eventrec.Recorder
	// Log receives progress; nil discards it.
	Log *slog.Logger
	// PreviousKeyTTL is how long the replaced key stays in the Secret
	// (see the package doc); 0 means DefaultPreviousKeyTTL.
	PreviousKeyTTL time.Duration
}

func (o Options) previousKeyTTL() time.Duration {
	if o.PreviousKeyTTL <= 0 {
		return DefaultPreviousKeyTTL
	}
	return o.PreviousKeyTTL
}

func (o Options) log() *slog.Logger {
	if o.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Log
}

// NewKey returns a fresh secret value: 16 random bytes, base64
// RawStdEncoding.
func NewKey() ([]byte, error) {
	b := make([]byte, keyBytes)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("random memberlist key: %w", err)
	}
	return []byte(base64.RawStdEncoding.EncodeToString(b)), nil
}

// Result is what Ensure did.
type Result int

const (
	// Unchanged: the Secret exists and needed nothing.
	Unchanged Result = iota
	// Created: the Secret was missing and was created with a new key.
	Created
	// OwnerRemoved: a Deployment owner reference was removed.
	OwnerRemoved
	// Rekeyed: the key had been changed in place; the replaced one was
	// written to PreviousKey.
	Rekeyed
	// PreviousRemoved: PreviousKey had outlived its time and was removed.
	PreviousRemoved
)

// state is what the reconciler carries between calls of ensure.
type state struct {
	// last is the Key value last seen (nil: none yet).
	last []byte
}

// outcome is what ensure did and what comes next.
type outcome struct {
	res Result
	// key is the Secret's Key value now (nil when unknown).
	key []byte
	// requeue is when to look again (PreviousKey's removal); 0: no need.
	requeue time.Duration
}

// Ensure creates the Secret when it is missing (without an owner) and
// removes Deployment owner references from an existing one; it never
// changes an existing key. Errors name the Secret. It knows no previous
// key (see the package doc): the controller's reconcile loop does.
func Ensure(ctx context.Context, o Options) (Result, error) {
	out, err := ensure(ctx, o, state{}, time.Now())
	return out.res, err
}

// ensure is Ensure with the key seen last (st.last): a Secret created
// again, or whose Key differs from it, gets it as PreviousKey until now +
// PreviousKeyTTL; an expired PreviousKey is removed.
func ensure(ctx context.Context, o Options, st state, now time.Time) (outcome, error) {
	if o.Name == "" {
		return outcome{}, nil
	}
	if o.Client == nil || o.Namespace == "" {
		return outcome{}, errors.New("mlsecret: Client and Namespace are required")
	}
	key := client.ObjectKey{Namespace: o.Namespace, Name: o.Name}
	var s corev1.Secret
	err := o.Client.Get(ctx, key, &s)
	switch {
	case err == nil:
		return updateExisting(ctx, o, st, now, &s)
	case !apierrors.IsNotFound(err):
		return outcome{}, fmt.Errorf("get memberlist Secret %s: %w", key, err)
	}
	val, err := NewKey()
	if err != nil {
		return outcome{}, err
	}
	s = corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: o.Namespace, Name: o.Name,
			Labels: map[string]string{"app.kubernetes.io/name": "herald", "app.kubernetes.io/component": "controller"},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{Key: val},
	}
	out := outcome{res: Created, key: val}
	if len(st.last) > 0 {
		out.requeue = keepPrevious(o, &s, st.last, now)
	}
	if err := o.Client.Create(ctx, &s, client.FieldOwner(fieldmanager.Controller)); apierrors.IsAlreadyExists(err) {
		// Another replica was faster: look at what it wrote.
		return outcome{requeue: time.Millisecond}, nil
	} else if err != nil {
		return outcome{}, fmt.Errorf("create memberlist Secret %s: %w", key, err)
	}
	return out, nil
}

// keepPrevious writes prev as s's PreviousKey until now + TTL and returns
// the TTL.
func keepPrevious(o Options, s *corev1.Secret, prev []byte, now time.Time) time.Duration {
	ttl := o.previousKeyTTL()
	s.Data[PreviousKey] = slices.Clone(prev)
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[AnnotationPreviousUntil] = now.Add(ttl).UTC().Format(time.RFC3339)
	return ttl
}

// updateExisting removes Deployment owners, records a key changed in place
// (st.last differs) as PreviousKey, and removes an expired PreviousKey, in
// one Update carrying the resourceVersion just read (a concurrent change
// fails it and the reconcile runs again).
func updateExisting(ctx context.Context, o Options, st state, now time.Time, s *corev1.Secret) (outcome, error) {
	cur := s.Data[Key]
	out := outcome{res: Unchanged, key: slices.Clone(cur)}
	changed := false
	if slices.ContainsFunc(s.OwnerReferences, isDeploymentOwner(o)) {
		s.OwnerReferences = slices.DeleteFunc(s.OwnerReferences, isDeploymentOwner(o))
		out.res, changed = OwnerRemoved, true
	}
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	prev, hasPrev := s.Data[PreviousKey]
	switch {
	case len(st.last) > 0 && len(cur) > 0 && !bytes.Equal(cur, st.last) && !bytes.Equal(prev, st.last):
		out.requeue = keepPrevious(o, s, st.last, now)
		out.res, changed = Rekeyed, true
	case hasPrev:
		until, err := time.Parse(time.RFC3339, s.Annotations[AnnotationPreviousUntil])
		if err != nil { // missing or edited: start the time again
			out.requeue = keepPrevious(o, s, prev, now)
			changed = true
		} else if left := until.Sub(now); left > 0 {
			out.requeue = left
		} else {
			delete(s.Data, PreviousKey)
			delete(s.Annotations, AnnotationPreviousUntil)
			if out.res == Unchanged {
				out.res = PreviousRemoved
			}
			changed = true
		}
	}
	if !changed {
		return out, nil
	}
	if err := o.Client.Update(ctx, s, client.FieldOwner(fieldmanager.Controller)); err != nil {
		return outcome{}, fmt.Errorf("update memberlist Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return out, nil
}

func isDeploymentOwner(o Options) func(metav1.OwnerReference) bool {
	return func(r metav1.OwnerReference) bool {
		return r.APIVersion == "apps/v1" && r.Kind == "Deployment" && (o.Deployment == "" || r.Name == o.Deployment)
	}
}

// Setup adds to mgr a controller that keeps the Secret: it runs Ensure at
// start and whenever the Secret changes or is deleted (from mgr's cache,
// which must include Secrets of Namespace), retrying failures with
// controller-runtime's backoff. It runs on every replica, leader or not:
// creating a missing Secret is atomic on the API server, so two replicas
// never write two keys. Nothing is added when Name is "".
func Setup(mgr manager.Manager, o Options) error {
	if o.Name == "" {
		return nil
	}
	if o.Client == nil || o.Namespace == "" {
		return errors.New("mlsecret: Client and Namespace are required")
	}
	r := &reconciler{opts: o}
	ours := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		return obj.GetNamespace() == o.Namespace && obj.GetName() == o.Name
	})
	start := make(chan event.GenericEvent, 1)
	start <- event.GenericEvent{Object: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name}}}
	return builder.ControllerManagedBy(mgr).
		Named("mlsecret").
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), MaxConcurrentReconciles: 1}).
		For(&corev1.Secret{}, builder.WithPredicates(ours)).
		WatchesRawSource(source.Channel(start, &handler.EnqueueRequestForObject{})).
		Complete(r)
}

type reconciler struct {
	opts Options
	st   state
	// seen: the Secret existed at some reconcile of this process, so a
	// creation is a re-creation.
	seen bool
}

func (r *reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	o := r.opts
	out, err := ensure(ctx, o, r.st, time.Now())
	if err != nil {
		o.log().Warn("memberlist Secret not ensured; retrying", "error", err)
		return reconcile.Result{}, err
	}
	if out.key != nil {
		r.st.last = out.key
	}
	name := o.Namespace + "/" + o.Name
	recreated := r.seen
	r.seen = true
	ttl := o.previousKeyTTL().String()
	switch out.res {
	case Created:
		msg := "created with a new key"
		if recreated {
			msg = "re-created with a new key after it was deleted"
		}
		if out.requeue > 0 {
			msg += "; the replaced key stays in " + PreviousKey + " for " + ttl + ", so that speakers starting meanwhile join the others"
		}
		o.log().Info("memberlist Secret "+msg+"; the speakers rotate to it as the kubelet updates their mounts", "secret", name)
		r.event(ctx, corev1.EventTypeNormal, ReasonCreated,
			"Memberlist Secret "+msg+": every speaker installs it, switches to it once all hold it, then drops the old key (herald_memberlist_keys)")
	case OwnerRemoved:
		o.log().Info("memberlist Secret no longer owned by the controller Deployment: it now outlives it", "secret", name)
		r.event(ctx, corev1.EventTypeNormal, ReasonOwnerRemoved,
			"Removed the Deployment owner reference: the memberlist key survives deleting the controller Deployment")
	case Rekeyed:
		o.log().Info("memberlist Secret key changed; the replaced key is kept as "+PreviousKey, "secret", name, "for", ttl)
		r.event(ctx, corev1.EventTypeNormal, ReasonRekeyed,
			"Memberlist key changed: the replaced key stays in "+PreviousKey+" for "+ttl+", so that speakers starting before the kubelet updated the others join them")
	case PreviousRemoved:
		o.log().Info("memberlist Secret: replaced key removed", "secret", name)
	}
	return reconcile.Result{RequeueAfter: out.requeue}, nil
}

func (r *reconciler) event(ctx context.Context, typ, reason, note string) {
	if r.opts.Recorder == nil {
		return
	}
	var s corev1.Secret
	if err := r.opts.Client.Get(ctx, client.ObjectKey{Namespace: r.opts.Namespace, Name: r.opts.Name}, &s); err != nil {
		return
	}
	r.opts.Recorder.Eventf(&s, typ, reason, "%s", note)
}

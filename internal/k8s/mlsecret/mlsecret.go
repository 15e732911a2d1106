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
package mlsecret

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
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

	"github.com/herald-lb/herald/internal/k8s/fieldmanager"
)

// Key is the data key holding the memberlist secret.
const Key = "secretkey"

// keyBytes is the number of random bytes of a new secret.
const keyBytes = 16

// Event reasons, on the Secret.
const (
	// ReasonCreated: the Secret was missing and was created with a new key.
	ReasonCreated = "MemberlistKeyCreated"
	// ReasonOwnerRemoved: a Deployment owner reference was removed.
	ReasonOwnerRemoved = "MemberlistKeyOwnerRemoved"
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
	// Recorder records events on the Secret; nil records none.
	Recorder events.EventRecorder
	// Log receives progress; nil discards it.
	Log *slog.Logger
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
)

// Ensure creates the Secret when it is missing (without an owner) and
// removes Deployment owner references from an existing one; it never
// changes an existing key. Errors name the Secret.
func Ensure(ctx context.Context, o Options) (Result, error) {
	if o.Name == "" {
		return Unchanged, nil
	}
	if o.Client == nil || o.Namespace == "" {
		return Unchanged, errors.New("mlsecret: Client and Namespace are required")
	}
	key := client.ObjectKey{Namespace: o.Namespace, Name: o.Name}
	var s corev1.Secret
	err := o.Client.Get(ctx, key, &s)
	switch {
	case err == nil:
		return removeDeploymentOwners(ctx, o, &s)
	case !apierrors.IsNotFound(err):
		return Unchanged, fmt.Errorf("get memberlist Secret %s: %w", key, err)
	}
	val, err := NewKey()
	if err != nil {
		return Unchanged, err
	}
	s = corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: o.Namespace, Name: o.Name,
			Labels: map[string]string{"app.kubernetes.io/name": "herald", "app.kubernetes.io/component": "controller"},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{Key: val},
	}
	if err := o.Client.Create(ctx, &s, client.FieldOwner(fieldmanager.Controller)); apierrors.IsAlreadyExists(err) {
		return Unchanged, nil // another replica was faster
	} else if err != nil {
		return Unchanged, fmt.Errorf("create memberlist Secret %s: %w", key, err)
	}
	return Created, nil
}

func isDeploymentOwner(o Options) func(metav1.OwnerReference) bool {
	return func(r metav1.OwnerReference) bool {
		return r.APIVersion == "apps/v1" && r.Kind == "Deployment" && (o.Deployment == "" || r.Name == o.Deployment)
	}
}

func removeDeploymentOwners(ctx context.Context, o Options, s *corev1.Secret) (Result, error) {
	if !slices.ContainsFunc(s.OwnerReferences, isDeploymentOwner(o)) {
		return Unchanged, nil
	}
	s.OwnerReferences = slices.DeleteFunc(s.OwnerReferences, isDeploymentOwner(o))
	// Update carries the resourceVersion just read: a concurrent change
	// fails it and the reconcile runs again.
	if err := o.Client.Update(ctx, s, client.FieldOwner(fieldmanager.Controller)); err != nil {
		return Unchanged, fmt.Errorf("remove the Deployment owner of memberlist Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return OwnerRemoved, nil
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
	// seen: the Secret existed at some reconcile of this process, so a
	// creation is a re-creation.
	seen bool
}

func (r *reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	o := r.opts
	res, err := Ensure(ctx, o)
	if err != nil {
		o.log().Warn("memberlist Secret not ensured; retrying", "error", err)
		return reconcile.Result{}, err
	}
	name := o.Namespace + "/" + o.Name
	recreated := r.seen
	r.seen = true
	switch res {
	case Created:
		msg := "created with a new key"
		if recreated {
			msg = "re-created with a new key after it was deleted"
		}
		o.log().Info("memberlist Secret "+msg+"; the speakers rotate to it as the kubelet updates their mounts", "secret", name)
		r.event(ctx, corev1.EventTypeNormal, ReasonCreated, "Create",
			"Memberlist Secret "+msg+": every speaker installs it, switches to it once all hold it, then drops the old key (herald_memberlist_keys)")
	case OwnerRemoved:
		o.log().Info("memberlist Secret no longer owned by the controller Deployment: it now outlives it", "secret", name)
		r.event(ctx, corev1.EventTypeNormal, ReasonOwnerRemoved, "Update",
			"Removed the Deployment owner reference: the memberlist key survives deleting the controller Deployment")
	}
	return reconcile.Result{}, nil
}

func (r *reconciler) event(ctx context.Context, typ, reason, action, note string) {
	if r.opts.Recorder == nil {
		return
	}
	var s corev1.Secret
	if err := r.opts.Client.Get(ctx, client.ObjectKey{Namespace: r.opts.Namespace, Name: r.opts.Name}, &s); err != nil {
		return
	}
	r.opts.Recorder.Eventf(&s, nil, typ, reason, action, "%s", note)
}

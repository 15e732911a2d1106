// Package mlsecret creates the Secret whose key the speakers' memberlist
// encrypts its gossip with, as MetalLB's controller does: when
// --ml-secret-name is set and the Secret does not exist, it is created in
// Herald's namespace with key "secretkey" = 16 random bytes, base64
// RawStdEncoding (22 characters), owned by the controller Deployment named
// by --deployment when that Deployment exists (so it goes away with it).
// An existing Secret is never changed: rotating the key under running
// speakers would split the memberlist cluster.
package mlsecret

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Key is the data key holding the memberlist secret.
const Key = "secretkey"

// keyBytes is the number of random bytes of a new secret.
const keyBytes = 16

// Options say which Secret to ensure.
type Options struct {
	// Client creates the Secret and reads the Secret and the Deployment.
	// Use an uncached client (the manager's API reader is not enough:
	// Client must write).
	Client client.Client
	// Namespace is Herald's namespace.
	Namespace string
	// Name is --ml-secret-name; "" means do nothing.
	Name string
	// Deployment is --deployment, the owner; "" or a missing Deployment
	// means no owner.
	Deployment string
	// Log receives progress; nil discards it.
	Log *slog.Logger
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

// Ensure creates the Secret when it is missing. It returns nil when the
// Secret exists (whatever its content) or was created.
func Ensure(ctx context.Context, o Options) error {
	if o.Name == "" {
		return nil
	}
	if o.Client == nil || o.Namespace == "" {
		return errors.New("mlsecret: Client and Namespace are required")
	}
	key := client.ObjectKey{Namespace: o.Namespace, Name: o.Name}
	var existing corev1.Secret
	err := o.Client.Get(ctx, key, &existing)
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("get memberlist Secret %s: %w", key, err)
	}
	val, err := NewKey()
	if err != nil {
		return err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: o.Namespace, Name: o.Name,
			Labels: map[string]string{"app.kubernetes.io/name": "herald", "app.kubernetes.io/component": "controller"},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{Key: val},
	}
	if o.Deployment != "" {
		var d appsv1.Deployment
		switch err := o.Client.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.Deployment}, &d); {
		case err == nil:
			s.OwnerReferences = []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID,
			}}
		case apierrors.IsNotFound(err):
		default:
			return fmt.Errorf("get Deployment %s/%s (owner of the memberlist Secret): %w", o.Namespace, o.Deployment, err)
		}
	}
	if err := o.Client.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create memberlist Secret %s: %w", key, err)
	}
	if o.Log != nil {
		o.Log.Info("created memberlist Secret", "secret", key.String(), "owner", o.Deployment)
	}
	return nil
}

// Runnable ensures the Secret once, retrying with backoff (1 s doubling up
// to 1 min) until it succeeds or its context ends. It is a
// controller-runtime manager.Runnable that also runs on non-leaders.
type Runnable struct{ Options }

// Start implements manager.Runnable.
func (r Runnable) Start(ctx context.Context) error {
	delay := time.Second
	for {
		err := Ensure(ctx, r.Options)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		if r.Log != nil {
			r.Log.Warn("ensure memberlist Secret; retrying", "error", err, "in", delay)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Minute)
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: creating
// a missing Secret is idempotent, so every replica may do it.
func (r Runnable) NeedLeaderElection() bool { return false }

package mlsecret

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/herald-lb/herald/internal/k8s/eventrec"
	"github.com/herald-lb/herald/internal/k8s/fieldmanager"
	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

func TestNewKey(t *testing.T) {
	a, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewKey()
	if len(a) != 22 || string(a) == string(b) {
		t.Errorf("keys %q %q: want 22 characters, distinct", a, b)
	}
	raw, err := base64.RawStdEncoding.DecodeString(string(a))
	if err != nil || len(raw) != 16 {
		t.Errorf("decode %q: %d bytes, %v", a, len(raw), err)
	}
}

func controllerDeployment(ns string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "herald-controller"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "c"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "c"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "c"}}},
			},
		},
	}
}

// TestAPIServer runs the tests that need a real API server on one.
func TestAPIServer(t *testing.T) {
	env := testenv.Start(t)
	t.Run("lifecycle", func(t *testing.T) { secretLifecycle(t, env) })
	t.Run("existing Secret", func(t *testing.T) { ensureExisting(t, env) })
}

// secretLifecycle: the controller creates the Secret without an
// owner, creates it again with a new key when it is deleted, and leaves it
// when the controller Deployment is deleted. envtest runs no garbage
// collector, so what keeps the Secret alive in a cluster is checked
// directly: it has no owner reference to the Deployment.
func secretLifecycle(t *testing.T, env *testenv.Env) {
	ns := env.Namespace(t)
	ctx := context.Background()
	c := env.Client
	dep := controllerDeployment(ns)
	if err := c.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}

	mgr, err := manager.New(env.Config, manager.Options{
		Scheme:                 env.Scheme,
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := eventrec.New(env.Config, env.Scheme, eventrec.Options{Component: eventrec.Controller, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Stop(context.Background()) })
	o := Options{
		Client: c, Namespace: ns, Name: "herald-memberlist", Deployment: dep.Name,
		Recorder:       rec,
		PreviousKeyTTL: 2 * time.Second,
	}
	if err := Setup(mgr, o); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	key := client.ObjectKey{Namespace: ns, Name: o.Name}
	// current returns the Secret once it exists with a well-formed key
	// and no owner.
	current := func() (*corev1.Secret, error) {
		var s corev1.Secret
		if err := c.Get(ctx, key, &s); err != nil {
			return nil, err
		}
		if v := s.Data[Key]; len(v) != 22 {
			return nil, fmt.Errorf("secretkey %q: want 22 characters", v)
		}
		if len(s.OwnerReferences) != 0 {
			return nil, fmt.Errorf("owner references %+v: the Secret would be deleted with its owner", s.OwnerReferences)
		}
		return &s, nil
	}
	var first *corev1.Secret
	poll.Until(t, 30*time.Second, "Secret created without an owner", func() (err error) { first, err = current(); return err })

	// Deleted: created again, with a new key, and an event says so.
	if err := c.Delete(ctx, first); err != nil {
		t.Fatal(err)
	}
	var second *corev1.Secret
	poll.Until(t, 30*time.Second, "Secret re-created", func() error {
		s, err := current()
		if err != nil {
			return err
		}
		if s.UID == first.UID {
			return errors.New("still the first Secret")
		}
		second = s
		return nil
	})
	if string(second.Data[Key]) == string(first.Data[Key]) {
		t.Error("re-created Secret has the deleted Secret's key")
	}
	for _, m := range second.ManagedFields {
		if m.Manager != fieldmanager.Controller {
			t.Errorf("Secret: %s by field manager %q, want %q", m.Operation, m.Manager, fieldmanager.Controller)
		}
	}
	poll.Until(t, 30*time.Second, "re-creation event on the Secret", func() error {
		var evs eventsv1.EventList
		if err := c.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Regarding.UID == second.UID && e.Reason == ReasonCreated && strings.Contains(e.Note, "re-created") {
				return nil
			}
		}
		return fmt.Errorf("no %s event for Secret %s among %d events", ReasonCreated, second.UID, len(evs.Items))
	})

	// The replaced key stays as PreviousKey for PreviousKeyTTL (a speaker
	// starting before the kubelet updated the others joins them with it),
	// then goes.
	if got := string(second.Data[PreviousKey]); got != string(first.Data[Key]) {
		t.Errorf("re-created Secret's %s = %q, want the deleted Secret's key %q", PreviousKey, got, first.Data[Key])
	}
	if _, err := time.Parse(time.RFC3339, second.Annotations[AnnotationPreviousUntil]); err != nil {
		t.Errorf("annotation %s: %v", AnnotationPreviousUntil, err)
	}
	previousGone := func() error {
		s, err := current()
		if err != nil {
			return err
		}
		if v, ok := s.Data[PreviousKey]; ok {
			return fmt.Errorf("%s still %q", PreviousKey, v)
		}
		if v, ok := s.Annotations[AnnotationPreviousUntil]; ok {
			return fmt.Errorf("annotation %s still %q", AnnotationPreviousUntil, v)
		}
		return nil
	}
	poll.Until(t, 30*time.Second, "replaced key removed after PreviousKeyTTL", previousGone)

	// The key changed in place (an operator's rotation): the replaced key
	// is kept the same way.
	rekeyed, err := current()
	if err != nil {
		t.Fatal(err)
	}
	rekeyed.Data[Key] = []byte("p0Xk2c1b5Dw9hQeT6aLmRA")
	if err := c.Update(ctx, rekeyed); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "replaced key kept after a change in place", func() error {
		s, err := current()
		if err != nil {
			return err
		}
		if got := string(s.Data[PreviousKey]); got != string(second.Data[Key]) {
			return fmt.Errorf("%s = %q, want %q", PreviousKey, got, second.Data[Key])
		}
		if got := string(s.Data[Key]); got != "p0Xk2c1b5Dw9hQeT6aLmRA" {
			return fmt.Errorf("%s = %q: the controller changed the operator's key", Key, got)
		}
		return nil
	})
	poll.Until(t, 30*time.Second, "replaced key removed after PreviousKeyTTL", previousGone)
	if second, err = current(); err != nil {
		t.Fatal(err)
	}

	// The Deployment goes; the Secret and its key stay.
	if err := c.Delete(ctx, dep); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "Deployment deleted", func() error {
		err := c.Get(ctx, client.ObjectKeyFromObject(dep), &appsv1.Deployment{})
		if err == nil {
			return errors.New("get Deployment: still there")
		}
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("get Deployment: %w", err)
		}
		return nil
	})
	s, err := current()
	if err != nil {
		t.Fatalf("after deleting the Deployment: %v", err)
	}
	if s.UID != second.UID || string(s.Data[Key]) != string(second.Data[Key]) {
		t.Error("deleting the Deployment changed the Secret")
	}
}

// ensureExisting: an existing Secret keeps its key; a Deployment owner reference (MetalLB's,
// or an older Herald's) is removed, other owners stay.
func ensureExisting(t *testing.T, env *testenv.Env) {
	ns := env.Namespace(t)
	ctx := context.Background()
	c := env.Client
	dep := controllerDeployment(ns)
	if err := c.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	other := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "keep-me", UID: "1234"}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "memberlist", OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "apps/v1", Kind: "Deployment", Name: dep.Name, UID: dep.UID}, other,
		}},
		Data: map[string][]byte{Key: []byte("NvKGPsR2n7TlqVlGrA6ekw")},
	}
	if err := c.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	o := Options{Client: c, Namespace: ns, Name: s.Name, Deployment: dep.Name}
	for i, want := range []Result{OwnerRemoved, Unchanged} {
		res, err := Ensure(ctx, o)
		if err != nil || res != want {
			t.Fatalf("Ensure #%d = %v, %v; want %v", i+1, res, err, want)
		}
	}
	var got corev1.Secret
	if err := c.Get(ctx, client.ObjectKeyFromObject(s), &got); err != nil {
		t.Fatal(err)
	}
	if string(got.Data[Key]) != "NvKGPsR2n7TlqVlGrA6ekw" {
		t.Errorf("key changed to %q", got.Data[Key])
	}
	if len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != other.UID {
		t.Errorf("owners %+v, want only %+v", got.OwnerReferences, other)
	}
	if res, err := Ensure(ctx, Options{Name: ""}); err != nil || res != Unchanged {
		t.Errorf("empty name: %v, %v", res, err)
	}
}

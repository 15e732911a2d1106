package mlsecret

import (
	"context"
	"encoding/base64"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/internal/k8s/serviceip/serviceiptest"
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

// Against a real API server: created when missing with the Deployment as
// owner, never changed afterwards, no owner when the Deployment is missing.
func TestEnsure(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real API server")
	}
	srv, err := serviceiptest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	ctx := context.Background()
	c := srv.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "herald-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "herald-controller"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "c"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "c"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "c"}}},
			},
		},
	}
	if err := c.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	o := Options{Client: c, Namespace: ns.Name, Name: "herald-memberlist", Deployment: "herald-controller"}
	if err := Ensure(ctx, o); err != nil {
		t.Fatal(err)
	}
	var s corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: o.Name}, &s); err != nil {
		t.Fatal(err)
	}
	first := string(s.Data[Key])
	if len(first) != 22 {
		t.Errorf("secretkey = %q, want 22 characters", first)
	}
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != dep.UID || s.OwnerReferences[0].Kind != "Deployment" {
		t.Errorf("owners = %+v", s.OwnerReferences)
	}
	if err := Ensure(ctx, o); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: o.Name}, &s); err != nil {
		t.Fatal(err)
	}
	if string(s.Data[Key]) != first {
		t.Errorf("existing secret changed")
	}
	o2 := Options{Client: c, Namespace: ns.Name, Name: "other", Deployment: "missing"}
	if err := Ensure(ctx, o2); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "other"}, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.OwnerReferences) != 0 {
		t.Errorf("owners = %+v, want none", s.OwnerReferences)
	}
	if err := Ensure(ctx, Options{Name: ""}); err != nil {
		t.Errorf("empty name: %v", err)
	}
}

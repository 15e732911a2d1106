package configload

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/internal/testenv"
)

func TestPodOwner(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "controller-0"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}},
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	got, err := PodOwner(ctx, env.Client, ns, "controller-0")
	if err != nil {
		t.Fatalf("PodOwner: %v", err)
	}
	want := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "controller-0", UID: pod.UID}
	if *got != want || got.UID == "" {
		t.Errorf("PodOwner = %+v, want %+v", *got, want)
	}

	_, err = PodOwner(ctx, env.Client, ns, "missing")
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "Pod "+ns+"/missing") {
		t.Errorf("PodOwner of a missing Pod: %v; want a NotFound naming the Pod", err)
	}
}

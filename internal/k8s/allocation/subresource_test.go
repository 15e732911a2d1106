package allocation

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/internal/annotations"
)

// The controller writes metallb.io/ip-allocated-from-pool through the
// status subresource, as MetalLB does, so it needs no `patch` on services
// (issue 11 item 6). This pins the API server behaviour that makes it
// work: a patch or an update of services/status keeps changes to
// metadata.annotations (the Service status strategy resets only the spec),
// and drops changes to the spec.
func TestStatusSubresourceWritesAnnotations(t *testing.T) {
	f := newFixture(t)
	f.svc("a")
	target := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "a"}}
	body := []byte(`{"metadata":{"annotations":{"` + annotations.AllocatedFromPool + `":"pool-a"}},"spec":{"externalTrafficPolicy":"Local"}}`)
	if err := f.c.Status().Patch(f.ctx(), target, client.RawPatch(types.MergePatchType, body)); err != nil {
		t.Fatalf("status patch: %v", err)
	}
	got := f.get("a")
	if v := got.Annotations[annotations.AllocatedFromPool]; v != "pool-a" {
		t.Errorf("after a status patch the annotation is %q, want pool-a", v)
	}
	if got.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		t.Errorf("a status patch changed the spec")
	}

	// Update: removal through the status subresource.
	delete(got.Annotations, annotations.AllocatedFromPool)
	if err := f.c.Status().Update(f.ctx(), got); err != nil {
		t.Fatalf("status update: %v", err)
	}
	if v, ok := f.get("a").Annotations[annotations.AllocatedFromPool]; ok {
		t.Errorf("after a status update removing it the annotation is %q", v)
	}
}

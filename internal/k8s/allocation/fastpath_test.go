package allocation

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/herald-lb/herald/internal/annotations"
)

// A new Service is written once: its ingress IP, condition and pool
// annotation in one status patch. Its echo then agrees with the allocator
// and is not reconciled again, and the low-priority queue writes only its
// event (issue #16: a second write per Service for the annotation, and a
// reconcile of the status echo that did not show it yet, during a burst).
func TestOneWritePerNewService(t *testing.T) {
	f := newFixture(t)
	f.pool("pool-a", []string{"198.51.100.20-198.51.100.21"})
	r := f.start()
	cs, err := kubernetes.NewForConfig(srv.Config)
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoreV1().Services(f.ns).Watch(f.ctx(), metav1.ListOptions{FieldSelector: "metadata.name=web"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	f.svc("web")
	f.waitEvent("web", EventIPAllocated, `Assigned IP ["198.51.100.20"]`)
	waitQuiet(t, r.ctrl.idle)

	var modified []*corev1.Service
	timeout := time.After(30 * time.Second)
	for done := false; !done; {
		select {
		case ev := <-w.ResultChan():
			if s, ok := ev.Object.(*corev1.Service); ok && ev.Type == watch.Modified {
				modified = append(modified, s)
			}
		case <-timeout:
			t.Fatal("the watch did not show the Service's address")
		default:
			// Everything the watch had by the time the event was
			// written and the controller idle, once the address is seen.
			done = len(modified) > 0
			if !done {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	first := modified[0]
	if got := ingressStrings(first); len(got) != 1 || got[0] != "198.51.100.20" {
		t.Fatalf("first update shows ingress %v", got)
	}
	if got := first.Annotations[annotations.AllocatedFromPool]; got != "pool-a" {
		t.Errorf("the update writing the ingress IP has pool annotation %q, want pool-a (same write)", got)
	}
	if len(modified) != 1 {
		t.Errorf("%d updates of the Service, want 1 (status, condition and annotation in one write)", len(modified))
	}
}

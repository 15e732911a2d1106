package configload

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/config"
	"github.com/herald-lb/herald/internal/testenv"
)

// TestNamespaceLabelsLeaveSnapshotAlone: a speaker reads the configuration
// (Read, then Tracker.Update for its node) from a real API server where a
// pool is reserved by namespaceSelectors. Relabelling a Namespace so that it
// starts matching leaves the snapshot unchanged (same fingerprint, Outcome
// Unchanged): the namespaces a selector matches are the allocator's
// business, and a label change must not make every speaker re-decide every
// Service. Editing the selector itself still changes the snapshot.
func TestNamespaceLabelsLeaveSnapshotAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real API server")
	}
	env := testenv.Start(t)
	ctx := context.Background()
	c := env.Client
	home := env.Namespace(t)
	tenant := env.Namespace(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}))
	pool := &v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "team-blue", Namespace: home},
		Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"198.51.100.0/28"},
			ServiceAllocation: &v1beta1.ServiceAllocation{NamespaceSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"team": "blue"}}}}}}
	must(c.Create(ctx, pool))
	must(c.Create(ctx, &v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "l2", Namespace: home}}))

	tr := NewTracker(config.Options{Namespace: home, NodeName: "n1", DropTransient: true}, true)
	update := func() (*config.Snapshot, Outcome) {
		t.Helper()
		r, err := Read(ctx, c, home)
		must(err)
		snap, o, err := tr.Update(r)
		must(err)
		return snap, o
	}
	first, o := update()
	if o != Changed {
		t.Fatalf("first load: outcome %v, want changed", o)
	}

	var ns corev1.Namespace
	must(c.Get(ctx, client.ObjectKey{Name: tenant}, &ns))
	ns.Labels["team"] = "blue"
	must(c.Update(ctx, &ns))
	if snap, o := update(); o != Unchanged || snap.Fingerprint() != first.Fingerprint() {
		t.Errorf("after Namespace %s got the selected label: outcome %v, fingerprint %x (was %x); want unchanged",
			tenant, o, snap.Fingerprint(), first.Fingerprint())
	}

	must(c.Get(ctx, client.ObjectKey{Name: pool.Name, Namespace: home}, pool))
	pool.Spec.ServiceAllocation.NamespaceSelectors[0].MatchLabels["team"] = "red"
	must(c.Update(ctx, pool))
	if _, o := update(); o != Changed {
		t.Errorf("after the pool's namespaceSelectors changed: outcome %v, want changed", o)
	}
}

package configload

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/config"
)

const testNS = "herald-system"

func resources(secrets ...string) config.Resources {
	m := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: testNS} }
	r := config.Resources{
		Pools:            []v1beta1.IPAddressPool{{ObjectMeta: m("pool"), Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"198.51.100.0/24"}}}},
		L2Advertisements: []v1beta1.L2Advertisement{{ObjectMeta: m("l2")}},
		Peers: []v1beta2.BGPPeer{
			{ObjectMeta: m("p1"), Spec: v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64513, PeerAddress: "203.0.113.1"}},
			{ObjectMeta: m("p2"), Spec: v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64513, PeerAddress: "203.0.113.2",
				PasswordSecret: &corev1.SecretReference{Name: "pw"}}},
		},
		Nodes: []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}},
	}
	for _, s := range secrets {
		r.Secrets = append(r.Secrets, corev1.Secret{ObjectMeta: m(s), Type: corev1.SecretTypeBasicAuth,
			Data: map[string][]byte{"password": []byte("x")}})
	}
	return r
}

func peerNames(s *config.Snapshot) []string {
	var out []string
	for _, p := range s.Peers() {
		out = append(out, p.Name)
	}
	return out
}

// TestTrackerDropTransient walks a speaker through the cases: it
// boots while a peer's password Secret is missing (the rest is in force at
// once, the error is reported), the Secret appears (the peer joins), the
// Secret is deleted again (the peer in force stays, with its password: the
// last good configuration), and a new peer's Secret is missing while
// another change arrives (the change applies, the new peer waits).
func TestTrackerDropTransient(t *testing.T) {
	t.Parallel()
	tr := NewTracker(config.Options{Namespace: testNS, NodeName: "n1", DropTransient: true}, true)
	step := func(name string, r config.Resources, wantOutcome Outcome, wantPeers []string, wantErr string) {
		t.Helper()
		snap, o, err := tr.Update(r)
		if o != wantOutcome {
			t.Errorf("%s: outcome %v, want %v", name, o, wantOutcome)
		}
		if got := peerNames(snap); !slices.Equal(got, wantPeers) {
			t.Errorf("%s: peers in force %v, want %v", name, got, wantPeers)
		}
		if (err == nil) != (wantErr == "") || (err != nil && !strings.Contains(Summary(err), wantErr)) {
			t.Errorf("%s: error %v, want %q", name, err, wantErr)
		}
	}
	step("boot without p2's Secret", resources(), Changed, []string{"p1"}, `BGPPeer herald-system/p2: spec.passwordSecret "herald-system/pw": Secret not found (waiting for it)`)
	step("same again", resources(), Unchanged, []string{"p1"}, "Secret not found")
	step("Secret created", resources("pw"), Changed, []string{"p1", "p2"}, "")
	step("Secret deleted: p2 stays in force", resources(), Rejected, []string{"p1", "p2"}, "Secret not found")
	r := resources("pw")
	r.Peers = append(r.Peers, v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "p3", Namespace: testNS},
		Spec: v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64513, PeerAddress: "203.0.113.3", PasswordSecret: &corev1.SecretReference{Name: "pw3"}}})
	r.Pools[0].Spec.Addresses = append(r.Pools[0].Spec.Addresses, "203.0.113.0/24")
	step("new p3 without Secret, pool grows", r, Changed, []string{"p1", "p2"}, "herald-system/p3")
	if p, _ := tr.Current().Pool("pool"); p == nil || len(p.Blocks) != 2 {
		t.Errorf("the pool change is not in force: %+v", p)
	}

	// Without DropTransient (the controller) nothing changes: a missing
	// Secret rejects the whole configuration.
	plain := NewTracker(config.Options{Namespace: testNS}, false)
	if snap, o, err := plain.Update(resources()); snap != nil || o != Rejected || !config.IsTransient(err) {
		t.Errorf("without DropTransient: snapshot %v, outcome %v, error %v", snap, o, err)
	}
}

// TestMetricsLeftOutObjects: a configuration in force without a peer whose
// password Secret is missing is stale and counts as a failed update, like a
// rejected one, so MetalLB's MetalLBStaleConfig alert fires for it. Before,
// such an update reported config_stale_bool 0 and no update error, and no
// shipped alert fired while the peer stayed left out.
func TestMetricsLeftOutObjects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		steps       []config.Resources
		wantStale   float64
		wantErrors  float64
		wantUpdates float64
	}{
		{name: "complete", steps: []config.Resources{resources("pw")}, wantStale: 0, wantErrors: 0, wantUpdates: 1},
		{name: "peer left out at start", steps: []config.Resources{resources()}, wantStale: 1, wantErrors: 1, wantUpdates: 1},
		{name: "Secret appears", steps: []config.Resources{resources(), resources("pw")}, wantStale: 0, wantErrors: 1, wantUpdates: 2},
		{name: "in-force peer's Secret deleted (rejected)", steps: []config.Resources{resources("pw"), resources()}, wantStale: 1, wantErrors: 1, wantUpdates: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(config.Options{Namespace: testNS, NodeName: "n1", DropTransient: true}, true)
			m := NewUnregisteredMetrics()
			for _, r := range tc.steps {
				snap, o, _ := tr.Update(r)
				m.Observe(snap, o)
			}
			got := []float64{testutil.ToFloat64(m.Stale), testutil.ToFloat64(m.UpdateErrors), testutil.ToFloat64(m.Updates), testutil.ToFloat64(m.Loaded)}
			want := []float64{tc.wantStale, tc.wantErrors, tc.wantUpdates, 1}
			if !slices.Equal(got, want) {
				t.Errorf("stale, update errors, updates, loaded = %v, want %v", got, want)
			}
		})
	}
}

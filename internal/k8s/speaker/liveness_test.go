package speaker

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/internal/announce"
	"github.com/herald-lb/herald/internal/poll"
)

// TestLivenessFromNodeConditions: without memberlist, liveness comes from
// the Node objects (announce.LiveFromNodeConditions), and a change of the
// out-of-service taint or of the Ready condition re-decides the Services
// (nodeChanged). n2 wins web's IP; n1 answers for it exactly while n2 is
// tainted out-of-service or not Ready.
func TestLivenessFromNodeConditions(t *testing.T) {
	f := newL2Fixture(t, "n1", "n2")
	ip := ipWonBy(t, "n2", "n1", "n2")
	key := f.service("web", ip, "n2")
	s := startSpeakerWith(t, f.env, f.ns, "n1", nil, 0)

	n1Announces := func(want bool) func() error {
		return func() error {
			if got := slices.Contains(s.l2.announced(key), ip.String()); got != want {
				return fmt.Errorf("n1 announces %s: %v, want %v", ip, got, want)
			}
			return nil
		}
	}
	updateNode := func(status bool, mutate func(n *corev1.Node)) {
		t.Helper()
		must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var n corev1.Node
			if err := f.c.Get(context.Background(), client.ObjectKey{Name: "n2"}, &n); err != nil {
				return err
			}
			mutate(&n)
			if status {
				return f.c.Status().Update(context.Background(), &n)
			}
			return f.c.Update(context.Background(), &n)
		}))
	}

	updateNode(false, func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: announce.OutOfServiceTaint, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	})
	poll.Until(t, 30*time.Second, "n1 takes over while n2 is out of service", n1Announces(true))
	updateNode(false, func(n *corev1.Node) { n.Spec.Taints = nil })
	poll.Until(t, 30*time.Second, "n1 gives the IP back once n2's taint is gone", n1Announces(false))
	updateNode(true, func(n *corev1.Node) {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}
	})
	poll.Until(t, 30*time.Second, "n1 takes over while n2's Ready is Unknown", n1Announces(true))
	updateNode(true, func(n *corev1.Node) {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	})
	poll.Until(t, 30*time.Second, "n1 gives the IP back once n2 is Ready", n1Announces(false))
}

package speaker

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/annotations"
	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

// TestSharedIPFollowsOtherServiceEndpoints checks that the Services holding
// one IP are re-decided together: a and b (externalTrafficPolicy Local)
// share an IP; the node serving both wins. When b's endpoint moves, a's
// announcement must move with it although nothing of a changed.
func TestSharedIPFollowsOtherServiceEndpoints(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	c := env.Client
	ns := env.Namespace(t)
	svcNS := env.Namespace(t)
	for _, name := range []string{"n1", "n2"} {
		createReadyNode(t, c, name, "")
	}
	must(t, c.Create(ctx, &v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns},
		Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"203.0.113.0/28"}}}))
	must(t, c.Create(ctx, &v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "l2", Namespace: ns}}))

	live := &liveness{live: map[string]bool{"n1": true, "n2": true}}
	speakers := map[string]*testSpeaker{}
	for _, name := range []string{"n1", "n2"} {
		speakers[name] = startSpeaker(t, env, ns, name, live)
	}
	ip := "203.0.113.5"
	eps := map[string]*discoveryv1.EndpointSlice{}
	for _, name := range []string{"a", "b"} {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: svcNS,
				Annotations: map[string]string{annotations.AllowSharedIP: "k"}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}},
				ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal},
		}
		must(t, c.Create(ctx, svc))
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
		must(t, c.Status().Update(ctx, svc))
		eps[name] = &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Namespace: svcNS, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
		}
	}
	endpoint := func(node string) discoveryv1.Endpoint {
		n := node
		return discoveryv1.Endpoint{Addresses: []string{"203.0.113.50"}, NodeName: &n}
	}
	// a runs on both nodes, b only on n2: n2 serves both and wins.
	eps["a"].Endpoints = []discoveryv1.Endpoint{endpoint("n1"), endpoint("n2")}
	eps["b"].Endpoints = []discoveryv1.Endpoint{endpoint("n2")}
	must(t, c.Create(ctx, eps["a"]))
	must(t, c.Create(ctx, eps["b"]))

	expect := func(owner string) {
		t.Helper()
		poll.Until(t, 30*time.Second, "shared IP owner "+owner, func() error {
			for name, s := range speakers {
				for _, svc := range []string{"a", "b"} {
					got := s.l2.announced(svcNS + "/" + svc)
					if (name == owner) != (len(got) == 1) {
						return fmt.Errorf("%s announces %s: %v", name, svc, got)
					}
				}
			}
			return nil
		})
	}
	expect("n2")
	// b moves to n1: now n1 serves both; a must follow.
	b := eps["b"]
	must(t, c.Get(ctx, client.ObjectKeyFromObject(b), b))
	b.Endpoints = []discoveryv1.Endpoint{endpoint("n1")}
	must(t, c.Update(ctx, b))
	expect("n1")
}

package speaker

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/annotations"
	"github.com/herald-lb/herald/internal/announce"
	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

// sharedIPEnv starts an API server with Ready nodes named nodes, a pool of
// 203.0.113.0/28 and an L2Advertisement in a Herald namespace, and returns
// it, that namespace and another one for the Services.
func sharedIPEnv(t *testing.T, nodes ...string) (env *testenv.Env, ns, svcNS string) {
	t.Helper()
	env = testenv.Start(t)
	c := env.Client
	ns = env.Namespace(t)
	svcNS = env.Namespace(t)
	for _, name := range nodes {
		createReadyNode(t, c, name, "")
	}
	must(t, c.Create(context.Background(), &v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns},
		Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"203.0.113.0/28"}}}))
	must(t, c.Create(context.Background(), &v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "l2", Namespace: ns}}))
	return env, ns, svcNS
}

// TestSharedIPFollowsOtherServiceEndpoints checks that the Services holding
// one IP are re-decided together: a and b (externalTrafficPolicy Local)
// share an IP; the node serving both wins. When b's endpoint moves, a's
// announcement must move with it although nothing of a changed.
func TestSharedIPFollowsOtherServiceEndpoints(t *testing.T) {
	env, ns, svcNS := sharedIPEnv(t, "n1", "n2")
	ctx := context.Background()
	c := env.Client

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

// sharedService creates a LoadBalancer Service name holding ip under
// allow-shared-ip key "k" (externalTrafficPolicy Local when local), with
// one EndpointSlice name-1 of one endpoint on each of nodes, and returns
// the slice.
func sharedService(t testing.TB, c client.Client, ns, name, ip string, local bool, nodes ...string) *discoveryv1.EndpointSlice {
	t.Helper()
	ctx := context.Background()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Annotations: map[string]string{annotations.AllowSharedIP: "k"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}},
	}
	if local {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	must(t, c.Create(ctx, svc))
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	slice.Endpoints = sliceEndpoints(nodes...)
	must(t, c.Create(ctx, slice))
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
	must(t, c.Status().Update(ctx, svc))
	return slice
}

// sliceEndpoints returns one endpoint on each of nodes.
func sliceEndpoints(nodes ...string) []discoveryv1.Endpoint {
	var out []discoveryv1.Endpoint
	for i, n := range nodes {
		out = append(out, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.244.0.%d", 10+i)}, NodeName: ptr.To(n)})
	}
	return out
}

// TestSharedIPEndpointReadsLinear: adding a Service to an address k others
// share re-decides the k+1 holders, which must read EndpointSlices O(k)
// times in all (each its own, and every holder's once for the address's
// view), not every holder's for each decision ((k+1)², issue #16).
func TestSharedIPEndpointReadsLinear(t *testing.T) {
	const k = 20
	env, ns, svcNS := sharedIPEnv(t, "n1")
	c := env.Client
	s := startSpeaker(t, env, ns, "n1", &liveness{live: map[string]bool{"n1": true}})
	const ip = "203.0.113.5"
	announced := func(n int) {
		t.Helper()
		poll.Until(t, time.Minute, fmt.Sprintf("%d Services announced", n), func() error {
			for i := range n {
				if key := fmt.Sprintf("%s/s%02d", svcNS, i); len(s.l2.announced(key)) != 1 {
					return fmt.Errorf("%s not announced", key)
				}
			}
			return nil
		})
		waitSpeakerIdle(t, s)
	}
	for i := range k {
		sharedService(t, c, svcNS, fmt.Sprintf("s%02d", i), ip, false, "n1")
	}
	announced(k)
	before := s.spk.endpointReads.Load()
	sharedService(t, c, svcNS, fmt.Sprintf("s%02d", k), ip, false, "n1")
	announced(k + 1)
	// 2(k+1) on the status update that gives the new Service the address
	// (the view's rebuild and each holder's own), one for each of the
	// Service's and the slice's creation, slack for a holder decided
	// twice.
	reads, limit := s.spk.endpointReads.Load()-before, uint64(3*(k+1))
	if reads > limit {
		t.Errorf("adding a Service to an address %d others share read EndpointSlices %d times, want at most %d", k, reads, limit)
	}
	t.Logf("adding a Service to an address %d others share: %d EndpointSlice reads", k, reads)
	if n := s.spk.shared.count(); n != 1 {
		t.Errorf("%d addresses with a view, want 1", n)
	}
}

// TestSharedIPViewTransitions: every change of one of the Services holding
// an address must reach the decisions of all of them (the address's view
// of its holders must follow). a and b hold the address everywhere on n1
// and n2, c (all externalTrafficPolicy Local) tips the election: the node
// of c's endpoint serves three Services, the other two. Without c the
// address goes to n2 (chosen for that), so a holder deciding on a view
// that still counts c on n1 stays on n1.
func TestSharedIPViewTransitions(t *testing.T) {
	env, ns, svcNS := sharedIPEnv(t, "n1", "n2")
	ctx := context.Background()
	c := env.Client
	// ip: the address that n2 wins when n1 and n2 serve as many Services;
	// other: another one.
	var ip, other string
	for i := 1; i < 15 && ip == ""; i++ {
		a := netip.AddrFrom4([4]byte{203, 0, 113, byte(i)})
		if announce.Elect(a, []announce.Candidate{{Node: "n1", Serves: 2}, {Node: "n2", Serves: 2}})[0] == "n2" {
			ip, other = a.String(), netip.AddrFrom4([4]byte{203, 0, 113, byte(i + 1)}).String()
		}
	}
	if ip == "" {
		t.Fatal("no address of the pool that n2 wins on a tie")
	}

	live := &liveness{live: map[string]bool{"n1": true, "n2": true}}
	speakers := map[string]*testSpeaker{}
	for _, name := range []string{"n1", "n2"} {
		speakers[name] = startSpeaker(t, env, ns, name, live)
	}
	sharedService(t, c, svcNS, "a", ip, true, "n1", "n2")
	sharedService(t, c, svcNS, "b", ip, true, "n1", "n2")
	slice := sharedService(t, c, svcNS, "c", ip, true, "n2")

	// expect: which node announces each Service ("" none).
	expect := func(t *testing.T, owners map[string]string) {
		t.Helper()
		poll.Until(t, 30*time.Second, fmt.Sprintf("owners %v", owners), func() error {
			for name, s := range speakers {
				for svc, owner := range owners {
					if got := s.l2.announced(svcNS + "/" + svc); (name == owner) != (len(got) == 1) {
						return fmt.Errorf("%s announces %s: %v", name, svc, got)
					}
				}
			}
			return nil
		})
	}
	setIP := func(t *testing.T, name, addr string) {
		t.Helper()
		var svc corev1.Service
		must(t, c.Get(ctx, client.ObjectKey{Namespace: svcNS, Name: name}, &svc))
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: addr}}
		must(t, c.Status().Update(ctx, &svc))
	}
	updateSlice := func(t *testing.T, mutate func(*discoveryv1.EndpointSlice)) {
		t.Helper()
		must(t, c.Get(ctx, client.ObjectKeyFromObject(slice), slice))
		mutate(slice)
		must(t, c.Update(ctx, slice))
	}
	all := func(node string) map[string]string { return map[string]string{"a": node, "b": node, "c": node} }
	expect(t, all("n2"))

	t.Run("endpoint moved on one holder moves every holder", func(t *testing.T) {
		updateSlice(t, func(s *discoveryv1.EndpointSlice) { s.Endpoints = sliceEndpoints("n1") })
		expect(t, all("n1"))
	})
	t.Run("holder whose IP changes leaves the old address's view", func(t *testing.T) {
		setIP(t, "c", other)
		expect(t, map[string]string{"a": "n2", "b": "n2", "c": "n1"})
	})
	t.Run("holder whose IP changes joins the new address's view", func(t *testing.T) {
		setIP(t, "c", ip)
		expect(t, all("n1"))
	})
	t.Run("EndpointSlice deleted", func(t *testing.T) {
		must(t, c.Delete(ctx, slice))
		expect(t, map[string]string{"a": "n2", "b": "n2", "c": ""})
		slice = &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "c-1", Namespace: svcNS, Labels: map[string]string{discoveryv1.LabelServiceName: "c"}},
			AddressType: discoveryv1.AddressTypeIPv4, Endpoints: sliceEndpoints("n1"),
		}
		must(t, c.Create(ctx, slice))
		expect(t, all("n1"))
	})
	t.Run("EndpointSlice moved to another holder", func(t *testing.T) {
		// b gains an endpoint on n1, where it already has one; c has
		// none: n1 and n2 each serve a and b.
		updateSlice(t, func(s *discoveryv1.EndpointSlice) { s.Labels[discoveryv1.LabelServiceName] = "b" })
		expect(t, map[string]string{"a": "n2", "b": "n2", "c": ""})
		updateSlice(t, func(s *discoveryv1.EndpointSlice) { s.Labels[discoveryv1.LabelServiceName] = "c" })
		expect(t, all("n1"))
	})
	t.Run("holder deleted", func(t *testing.T) {
		must(t, c.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: svcNS}}))
		expect(t, map[string]string{"a": "n2", "b": "n2", "c": ""})
	})
}

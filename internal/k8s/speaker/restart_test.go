package speaker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

// A speaker (re)starting on a node adopts the status objects an earlier
// speaker left for Services it still announces, and deletes duplicates,
// objects of Services that are gone and objects of a mode it no longer
// announces in. The first decision of a Service created afterwards writes
// its object without listing (the start-up listing said it has none).
func TestStartAdoptsAndCleansStatusObjects(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	c := env.Client
	ns := env.Namespace(t)
	svcNS := env.Namespace(t)

	createReadyNode(t, c, "n1", "198.51.100.11")
	must(t, c.Create(ctx, &v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns},
		Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"198.51.100.0/28"}}}))
	must(t, c.Create(ctx, &v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "l2", Namespace: ns},
		Spec: v1beta1.L2AdvertisementSpec{IPAddressPools: []string{"pool"}}}))

	service := func(name, ip string) {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: svcNS},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
		must(t, c.Create(ctx, svc))
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
		must(t, c.Status().Update(ctx, svc))
		node, ready := "n1", true
		must(t, c.Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Namespace: svcNS, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"203.0.113.50"}, NodeName: &node,
				Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		}))
	}
	service("web", "198.51.100.10")

	// What an earlier speaker on n1 left behind.
	labelsFor := func(svc string) map[string]string {
		return map[string]string{v1beta1.LabelNode: "n1", v1beta1.LabelServiceName: svc, v1beta1.LabelServiceNamespace: svcNS}
	}
	leftL2 := func(name, svc string) {
		o := &v1beta1.ServiceL2Status{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labelsFor(svc)}}
		must(t, c.Create(ctx, o))
		o.Status = v1beta1.ServiceL2StatusStatus{
			ServiceStatusCommon: v1beta1.ServiceStatusCommon{Node: "n1", ServiceName: svc, ServiceNamespace: svcNS},
			Interfaces:          []v1beta1.InterfaceInfo{{Name: "eth0"}},
		}
		must(t, c.Status().Update(ctx, o))
	}
	leftL2("l2-first", "web") // of two equal objects, the first by name is kept
	leftL2("l2-second", "web")
	leftL2("l2-gone", "gone")
	must(t, c.Create(ctx, &v1beta1.ServiceBGPStatus{ObjectMeta: metav1.ObjectMeta{Name: "bgp-no-bgp", Namespace: ns, Labels: labelsFor("web")}}))

	live := &liveness{live: map[string]bool{"n1": true}}
	s := startSpeaker(t, env, ns, "n1", live)

	names := func() ([]string, error) {
		var l2 v1beta1.ServiceL2StatusList
		var bgps v1beta1.ServiceBGPStatusList
		if err := c.List(ctx, &l2, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		if err := c.List(ctx, &bgps, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		var out []string
		for _, o := range l2.Items {
			out = append(out, o.Labels[v1beta1.LabelServiceName]+" "+o.Name)
		}
		for _, o := range bgps.Items {
			out = append(out, o.Labels[v1beta1.LabelServiceName]+" "+o.Name)
		}
		slices.Sort(out)
		return out, nil
	}
	poll.Until(t, 30*time.Second, "left-over status objects adopted or deleted", func() error {
		got, err := names()
		if err != nil {
			return err
		}
		if want := []string{"web l2-first"}; !slices.Equal(got, want) {
			return fmt.Errorf("status objects %v, want %v", got, want)
		}
		if a := s.l2.announced(svcNS + "/web"); !slices.Equal(a, []string{"198.51.100.10"}) {
			return fmt.Errorf("announces %v", a)
		}
		return nil
	})

	// A Service created after start gets its object.
	service("api", "198.51.100.11")
	poll.Until(t, 30*time.Second, "status object of a new Service", func() error {
		got, err := names()
		if err != nil {
			return err
		}
		if len(got) != 2 || !strings.HasPrefix(got[0], "api l2-") || got[1] != "web l2-first" {
			return fmt.Errorf("status objects %v, want l2-first for web and one for api", got)
		}
		return nil
	})
}

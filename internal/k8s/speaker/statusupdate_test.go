package speaker

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

// TestStatusUpdateKeepsObject checks that a changed status is written to
// the existing ServiceBGPStatus (the status writer keeps only its name,
// resourceVersion and status, and updates the status subresource with
// those): the object keeps its name, labels and owner reference, and its
// status gets the new peer.
func TestStatusUpdateKeepsObject(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	c := env.Client
	ns := env.Namespace(t)
	svcNS := env.Namespace(t)
	createReadyNode(t, c, "n1", "198.51.100.11")
	createSpeakerPod(t, c, ns, "n1", "198.51.100.11")
	must(t, c.Create(ctx, &v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns},
		Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"198.51.100.0/28"}}}))
	must(t, c.Create(ctx, &v1beta1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "bgp", Namespace: ns},
		Spec: v1beta1.BGPAdvertisementSpec{IPAddressPools: []string{"pool"}}}))
	must(t, c.Create(ctx, &v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: ns},
		Spec: v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64513, PeerAddress: "203.0.113.1"}}))
	startSpeaker(t, env, ns, "n1", &liveness{live: map[string]bool{"n1": true}})

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: svcNS},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
	must(t, c.Create(ctx, svc))
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.10"}}
	must(t, c.Status().Update(ctx, svc))
	n1 := "n1"
	must(t, c.Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Namespace: svcNS, Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"203.0.113.50"}, NodeName: &n1}},
	}))

	status := func(peers ...string) v1beta1.ServiceBGPStatus {
		t.Helper()
		var got v1beta1.ServiceBGPStatus
		poll.Until(t, 30*time.Second, fmt.Sprintf("one ServiceBGPStatus with peers %v", peers), func() error {
			var list v1beta1.ServiceBGPStatusList
			if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
				return err
			}
			if len(list.Items) != 1 || !slices.Equal(list.Items[0].Status.Peers, peers) {
				return fmt.Errorf("%d objects: %+v", len(list.Items), list.Items)
			}
			got = list.Items[0]
			return nil
		})
		return got
	}
	first := status("p1")
	must(t, c.Create(ctx, &v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "p2", Namespace: ns},
		Spec: v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64514, PeerAddress: "203.0.113.2"}}))
	second := status("p1", "p2")
	if second.Name != first.Name || second.UID != first.UID {
		t.Errorf("status written to %s (%s), want the existing %s (%s)", second.Name, second.UID, first.Name, first.UID)
	}
	if !reflect.DeepEqual(second.Labels, first.Labels) || !reflect.DeepEqual(second.OwnerReferences, first.OwnerReferences) ||
		len(second.OwnerReferences) != 1 || second.Labels[v1beta1.LabelNode] != "n1" {
		t.Errorf("after the update: labels %v, owners %v; before: labels %v, owners %v",
			second.Labels, second.OwnerReferences, first.Labels, first.OwnerReferences)
	}
	want := first.Status.ServiceStatusCommon
	if second.Status.ServiceStatusCommon != want {
		t.Errorf("status %+v, want %+v", second.Status.ServiceStatusCommon, want)
	}
}

package speaker

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/announce"
	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

// TestL2ElectedNodeWithoutInterface: the L2Advertisement names eth5, which
// no node has. The elected node must not claim an announcement nobody
// answers: a Warning announceFailed naming the advertisement, the interface
// it wants and the node's interfaces; no nodeAssigned, no
// metallb_speaker_announced series, no ServiceL2Status, nothing handed to
// the announcer, herald_speaker_not_announced{reason="noMatchingInterface"}
// 1; the other node does not take over (notOwner). When eth5 appears on the
// winner, it announces there and says so.
func TestL2ElectedNodeWithoutInterface(t *testing.T) {
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
	must(t, c.Create(ctx, &v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "l2-eth5", Namespace: ns},
		Spec: v1beta1.L2AdvertisementSpec{Interfaces: []string{"eth5"}}}))

	live := &liveness{live: map[string]bool{"n1": true, "n2": true}}
	speakers := map[string]*testSpeaker{}
	for _, name := range []string{"n1", "n2"} {
		speakers[name] = startSpeaker(t, env, ns, name, live)
	}
	ip := netip.MustParseAddr("203.0.113.5")
	ranked := announce.Elect(ip, []announce.Candidate{{Node: "n1", Serves: 1}, {Node: "n2", Serves: 1}})
	win, lose := speakers[ranked[0]], speakers[ranked[1]]

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: svcNS},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
	must(t, c.Create(ctx, svc))
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip.String()}}
	must(t, c.Status().Update(ctx, svc))
	n1, ready := "n1", true
	must(t, c.Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Namespace: svcNS, Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"198.51.100.50"}, NodeName: &n1,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}))
	key := svcNS + "/web"
	notAnnounced := func(s *testSpeaker, reason string) float64 {
		v, _ := gauge(s.reg, "herald_speaker_not_announced", map[string]string{"node": s.name, "protocol": "layer2", "reason": reason})
		return v
	}

	failed := fmt.Sprintf(`Service/web Warning announceFailed: failed to announce 203.0.113.5 from node %q with protocol "layer2": `+
		"node %s won the election for 203.0.113.5 but has none of the interfaces of L2Advertisement l2-eth5 (interfaces eth5) (its interfaces answering ARP: eth0)",
		win.name, win.name)
	poll.Until(t, 30*time.Second, "announceFailed on the elected node and notOwner on the other", func() error {
		if !win.rec.has(failed) {
			return fmt.Errorf("no %q in %q", failed, win.rec.all())
		}
		if got := notAnnounced(win, "noMatchingInterface"); got != 1 {
			return fmt.Errorf("%s: herald_speaker_not_announced{noMatchingInterface} = %v", win.name, got)
		}
		if got := notAnnounced(lose, "notOwner"); got != 1 {
			return fmt.Errorf("%s: herald_speaker_not_announced{notOwner} = %v", lose.name, got)
		}
		return nil
	})
	for _, s := range speakers {
		if got := s.l2.announced(key); len(got) != 0 {
			t.Errorf("%s hands %v to the announcer", s.name, got)
		}
		if s.rec.has("nodeAssigned") {
			t.Errorf("%s claims an announcement: %q", s.name, s.rec.all())
		}
		if v, ok := gauge(s.reg, "metallb_speaker_announced", map[string]string{"service": key, "protocol": "layer2"}); ok {
			t.Errorf("%s: metallb_speaker_announced = %v, want no series", s.name, v)
		}
	}
	if n := win.rec.count("announceFailed"); n != 1 {
		t.Errorf("%d announceFailed events, want 1: %q", n, win.rec.all())
	}
	statuses := func() ([]v1beta1.ServiceL2Status, error) {
		var list v1beta1.ServiceL2StatusList
		err := c.List(ctx, &list, client.InNamespace(ns))
		return list.Items, err
	}
	if l, err := statuses(); err != nil || len(l) != 0 {
		t.Errorf("ServiceL2Status objects %+v (%v), want none", l, err)
	}

	// eth5 appears on the winner (the announcer's scan reports it).
	win.l2.setInterfaces(&announce.NodeInterfaces{ARP: []string{"eth0", "eth5"}, NDP: []string{"eth0", "eth5"}})
	win.spk.L2InterfacesChanged()
	poll.Until(t, 30*time.Second, "announced on eth5 by the elected node", func() error {
		if got := win.l2.announced(key); !slices.Equal(got, []string{ip.String()}) {
			return fmt.Errorf("announcer has %v", got)
		}
		if !win.rec.has(fmt.Sprintf(`Service/web Normal nodeAssigned: announcing from node %q with protocol "layer2": 203.0.113.5`, win.name)) {
			return errors.New("no nodeAssigned")
		}
		if v, _ := gauge(win.reg, "metallb_speaker_announced", map[string]string{"service": key, "protocol": "layer2", "ip": ip.String()}); v != 1 {
			return fmt.Errorf("metallb_speaker_announced = %v", v)
		}
		if got := notAnnounced(win, "noMatchingInterface"); got != 0 {
			return fmt.Errorf("herald_speaker_not_announced{noMatchingInterface} = %v", got)
		}
		l, err := statuses()
		if err != nil {
			return err
		}
		if len(l) != 1 || l[0].Status.Node != win.name || !slices.Equal(l[0].Status.Interfaces, []v1beta1.InterfaceInfo{{Name: "eth5"}}) {
			return fmt.Errorf("ServiceL2Status %+v", l)
		}
		return nil
	})
	if lose.rec.has("nodeAssigned") || len(lose.l2.announced(key)) != 0 {
		t.Errorf("%s announces too: %q", lose.name, lose.rec.all())
	}
}

// TestL2StatusNamesInterfacesAtOnce: the layer 2 announcer applies SetOwner
// on its own goroutine, so right after it its Interfaces lists nothing. The
// ServiceL2Status must still name the interface the address is answered on
// (before, it was written without any and fixed only by a requeue 10 s
// later, if the announcer had caught up by then).
func TestL2StatusNamesInterfacesAtOnce(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	c := env.Client
	ns := env.Namespace(t)
	svcNS := env.Namespace(t)
	createReadyNode(t, c, "n1", "")
	must(t, c.Create(ctx, &v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns},
		Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"203.0.113.0/28"}}}))
	must(t, c.Create(ctx, &v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "l2", Namespace: ns}}))
	live := &liveness{live: map[string]bool{"n1": true}}
	s := startSpeaker(t, env, ns, "n1", live)
	s.l2.mu.Lock()
	s.l2.lag = true
	s.l2.mu.Unlock()

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: svcNS},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
	must(t, c.Create(ctx, svc))
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.5"}, {IP: "2001:db8::5"}}
	must(t, c.Status().Update(ctx, svc))
	n1, ready := "n1", true
	must(t, c.Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Namespace: svcNS, Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"198.51.100.50"}, NodeName: &n1,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}))
	poll.Until(t, 30*time.Second, "ServiceL2Status written", func() error {
		var list v1beta1.ServiceL2StatusList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(list.Items) != 1 {
			return fmt.Errorf("%d ServiceL2Status objects", len(list.Items))
		}
		if got := list.Items[0].Status.Interfaces; !slices.Equal(got, []v1beta1.InterfaceInfo{{Name: "eth0"}}) {
			return fmt.Errorf("interfaces %v, want eth0", got)
		}
		return nil
	})
}

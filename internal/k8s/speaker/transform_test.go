package speaker

import (
	"context"
	"fmt"
	"k8s.io/apimachinery/pkg/labels"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/reference"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/announce"
	"github.com/herald-lb/herald/internal/config"
)

// fullMeta is metadata with every field the transforms drop set.
func fullMeta(ns, name string, labels, annotations map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: name, Namespace: ns, UID: types.UID("uid-" + name), ResourceVersion: "42", Generation: 3,
		Labels: labels, Annotations: annotations,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: name, UID: "owner"}},
		Finalizers:      []string{"example.com/keep"},
		ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}},
	}
}

func mustTransform[T any](t *testing.T, f func(any) (any, error), obj *T) *T {
	t.Helper()
	return transformTo[T](t, f, obj)
}

// transformTo returns f(obj), failing t unless it is a *T (the object
// transformed, or the record it becomes).
func transformTo[T any](t *testing.T, f func(any) (any, error), obj any) *T {
	t.Helper()
	out, err := f(obj)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := out.(*T)
	if !ok {
		t.Fatalf("transform returned %T", out)
	}
	return o
}

// TestTransformServiceKeepsDecisionInputs: on Services that set every field
// announce.ServiceFromK8s reads (and many it does not), the transform gives
// a *serviceRecord whose announce.Service is that of the full Service, so
// every decision, the ingress-IP index (serviceIPs) and serviceChanged see
// the same input; the record keeps the Service's identity (cache key,
// events) and labels, DeepCopyObject copies it, and the rest is gone.
func TestTransformServiceKeepsDecisionInputs(t *testing.T) {
	base := func(name string) *corev1.Service {
		return &corev1.Service{
			TypeMeta: metav1.TypeMeta{Kind: "Service", APIVersion: "v1"},
			ObjectMeta: fullMeta("ns", name, map[string]string{"app": name, "tier": "web"}, map[string]string{
				"kubectl.kubernetes.io/last-applied-configuration": `{"big":"object"}`,
				"metallb.io/address-pool":                          "pool-a",
			}),
			Spec: corev1.ServiceSpec{
				Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.0.0.1", ClusterIPs: []string{"10.0.0.1"},
				Selector: map[string]string{"app": name},
				Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: 30080}},
			},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{
				{IP: "192.0.2.10", IPMode: ptr.To(corev1.LoadBalancerIPModeVIP), Ports: []corev1.PortStatus{{Port: 80}}},
			}}},
		}
	}
	var cases []*corev1.Service
	add := func(name string, mod func(*corev1.Service)) {
		s := base(name)
		mod(s)
		cases = append(cases, s)
	}
	add("plain", func(*corev1.Service) {})
	add("shared", func(s *corev1.Service) { s.Annotations["metallb.io/allow-shared-ip"] = " key-1 " })
	add("shared-deprecated", func(s *corev1.Service) { s.Annotations["metallb.universe.tf/allow-shared-ip"] = "key-2" })
	add("shared-both", func(s *corev1.Service) {
		s.Annotations["metallb.io/allow-shared-ip"] = "new"
		s.Annotations["metallb.universe.tf/allow-shared-ip"] = "old"
	})
	add("local", func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal })
	add("cluster", func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster })
	add("class", func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr.To("example.com/lb") })
	add("nodeport", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort })
	add("dual", func(s *corev1.Service) {
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress,
			corev1.LoadBalancerIngress{IP: "2001:db8::10"}, corev1.LoadBalancerIngress{IP: "::ffff:192.0.2.11"})
	})
	add("invalid", func(s *corev1.Service) {
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "not-an-ip"}, {IP: "fe80::1%eth0"}, {Hostname: "lb.example.com"}}
	})
	add("no-ingress", func(s *corev1.Service) { s.Status.LoadBalancer.Ingress = nil })
	add("no-labels", func(s *corev1.Service) { s.Labels = nil })

	for _, full := range cases {
		t.Run(full.Name, func(t *testing.T) {
			rec := transformTo[serviceRecord](t, transformService, full.DeepCopy())
			want := announce.ServiceFromK8s(full)
			if got := withMapLabels(rec.svc); !reflect.DeepEqual(got, want) {
				t.Errorf("record's Service = %+v, want ServiceFromK8s = %+v", got, want)
			}
			var wantIPs []string
			for _, ip := range want.IPs {
				wantIPs = append(wantIPs, ip.String())
			}
			if got, _ := serviceIPs(rec); !slices.Equal(got, wantIPs) {
				t.Errorf("indexServiceIP values %q, want %q", got, wantIPs)
			}
			for _, other := range cases {
				wantChanged := !reflect.DeepEqual(want, announce.ServiceFromK8s(other))
				if got := serviceChanged(updateEvent(rec, transformTo[serviceRecord](t, transformService, other.DeepCopy()))); got != wantChanged {
					t.Errorf("serviceChanged(%s -> %s) = %v, want %v (the full Services' inputs differ: %v)", full.Name, other.Name, got, wantChanged, wantChanged)
				}
			}
			// Identity (cache key, events, object references) stays.
			if rec.GetName() != full.Name || rec.GetNamespace() != full.Namespace || rec.GetUID() != full.UID || rec.GetResourceVersion() != full.ResourceVersion ||
				!maps.Equal(rec.GetLabels(), full.Labels) {
				t.Errorf("identity changed: %+v", rec.recordMeta)
			}
			if k, _ := toolscache.MetaNamespaceKeyFunc(rec); k != want.Key {
				t.Errorf("cache key %q, want %q", k, want.Key)
			}
			ev := rec.eventObject()
			if ev.Kind != "Service" || ev.APIVersion != "v1" || ev.Name != full.Name || ev.Namespace != full.Namespace ||
				ev.UID != full.UID || ev.ResourceVersion != full.ResourceVersion {
				t.Errorf("event object %+v", ev)
			}
			// The reference an event recorder makes (eventrec): what kubectl
			// describe service matches the Service's events by.
			ref, err := reference.GetReference(clientgoscheme.Scheme, ev)
			if err != nil || ref.Kind != "Service" || ref.APIVersion != "v1" || ref.Name != full.Name || ref.Namespace != full.Namespace ||
				ref.UID != full.UID || ref.ResourceVersion != full.ResourceVersion {
				t.Errorf("event reference %+v, %v", ref, err)
			}
			// What no decision reads is gone.
			if rec.GetAnnotations() != nil || rec.GetManagedFields() != nil || rec.GetOwnerReferences() != nil || rec.GetFinalizers() != nil {
				t.Errorf("record keeps metadata nothing reads: %+v", rec.recordMeta)
			}
			// DeepCopyObject: equal, and sharing nothing that can be written.
			cp, ok := rec.DeepCopyObject().(*serviceRecord)
			if !ok || !reflect.DeepEqual(cp, rec) {
				t.Fatalf("DeepCopyObject = %+v, want %+v", cp, rec)
			}
			if len(cp.svc.IPs) > 0 {
				cp.svc.IPs[0] = netip.IPv6Loopback()
			}
			if !reflect.DeepEqual(withMapLabels(rec.svc), want) {
				t.Errorf("writing the copy changed the record: %+v", rec.svc)
			}
		})
	}
	if out, err := transformService("tombstone"); err != nil || out != "tombstone" {
		t.Errorf("transformService(non-Service) = %v, %v; want it unchanged", out, err)
	}
}

// TestTransformEndpointSliceKeepsDecisionInputs: the record of a slice
// holds announce.EndpointsFromSlices of it (ready nil/true/false, serving
// nil/true/false, nodeName nil or set, targetRefs), its Service's name and
// its identity, and sliceChanged reports exactly the changes of those;
// labels, annotations, addresses, zones, hints and ports are gone.
func TestTransformEndpointSliceKeepsDecisionInputs(t *testing.T) {
	bools := []*bool{nil, ptr.To(true), ptr.To(false)}
	var eps []discoveryv1.Endpoint
	for i, r := range bools {
		for j, s := range bools {
			ep := discoveryv1.Endpoint{
				Addresses:  []string{"10.244.0.1"},
				Conditions: discoveryv1.EndpointConditions{Ready: r, Serving: s, Terminating: ptr.To(true)},
				Hostname:   ptr.To("pod"),
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: "pod"},
				Zone:       ptr.To("zone-a"),
				Hints:      &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}}},
			}
			if (i+j)%2 == 0 {
				ep.NodeName = ptr.To([]string{"n1", "n2", "n3"}[(i+j)%3])
			}
			eps = append(eps, ep)
		}
	}
	mk := func(name string, labels map[string]string, eps []discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  fullMeta("ns", name, labels, map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": "now"}),
			AddressType: discoveryv1.AddressTypeIPv4, Endpoints: eps,
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](80)}},
		}
	}
	svcLabels := map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io", "app": "web"}
	cases := []*discoveryv1.EndpointSlice{
		mk("all", svcLabels, eps),
		mk("first", svcLabels, eps[:1]),
		mk("last", svcLabels, eps[len(eps)-1:]),
		mk("empty", svcLabels, nil),
		mk("orphan", map[string]string{"app": "web"}, eps),
	}
	record := func(t *testing.T, s *discoveryv1.EndpointSlice) *sliceRecord {
		t.Helper()
		out, err := transformEndpointSlice(s)
		if err != nil {
			t.Fatal(err)
		}
		r, ok := out.(*sliceRecord)
		if !ok {
			t.Fatalf("transform returned %T, want *sliceRecord", out)
		}
		return r
	}
	for _, full := range cases {
		t.Run(full.Name, func(t *testing.T) {
			slim := record(t, full.DeepCopy())
			got := slim.endpoints
			want := announce.EndpointsFromSlices([]discoveryv1.EndpointSlice{*full})
			if !reflect.DeepEqual(got, want) {
				t.Errorf("record's endpoints = %+v, want EndpointsFromSlices %+v", got, want)
			}
			if g, w := slim.service, full.Labels[discoveryv1.LabelServiceName]; g != w {
				t.Errorf("service %q, want the service-name label %q (Service index, mapSlice)", g, w)
			}
			if slim.GetName() != full.Name || slim.GetNamespace() != full.Namespace || slim.GetUID() != full.UID || slim.GetResourceVersion() != full.ResourceVersion {
				t.Errorf("record's identity %s/%s %s %s, want %s/%s %s %s", slim.GetNamespace(), slim.GetName(), slim.GetUID(), slim.GetResourceVersion(),
					full.Namespace, full.Name, full.UID, full.ResourceVersion)
			}
			for _, other := range cases {
				if g, w := sliceChanged(updateEvent(slim, record(t, other.DeepCopy()))),
					!reflect.DeepEqual(announce.EndpointsFromSlices([]discoveryv1.EndpointSlice{*full}), announce.EndpointsFromSlices([]discoveryv1.EndpointSlice{*other})) ||
						full.Labels[discoveryv1.LabelServiceName] != other.Labels[discoveryv1.LabelServiceName]; g != w {
					t.Errorf("sliceChanged(%s -> %s) = %v, want %v (endpoints or Service changed)", full.Name, other.Name, g, w)
				}
			}
			if slim.GetLabels() != nil || slim.GetAnnotations() != nil || slim.GetManagedFields() != nil || slim.GetOwnerReferences() != nil {
				t.Errorf("record keeps metadata nothing reads: %+v", slim.recordMeta)
			}
			if c := slim.DeepCopyObject().(*sliceRecord); !reflect.DeepEqual(c, slim) {
				t.Errorf("DeepCopyObject = %+v, want %+v", c, slim)
			}
		})
	}
	// A tombstone (or anything not an EndpointSlice) passes unchanged.
	if out, err := transformEndpointSlice("tombstone"); err != nil || out != "tombstone" {
		t.Errorf("transformEndpointSlice(non-slice) = %v, %v; want it unchanged", out, err)
	}
}

// TestTransformNodeKeepsDecisionInputs: announce.NodeFromK8s (labels,
// Ready/NetworkUnavailable, the out-of-service taint), announce.NodeIPv4
// (router ID) and nodeChanged give the same results on transformed Nodes;
// images, capacity, other conditions' details and annotations are gone.
func TestTransformNodeKeepsDecisionInputs(t *testing.T) {
	mk := func(name string, mod func(*corev1.Node)) *corev1.Node {
		n := &corev1.Node{
			ObjectMeta: fullMeta("", name, map[string]string{"kubernetes.io/hostname": name, "zone": "a"},
				map[string]string{"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"}),
			Spec: corev1.NodeSpec{PodCIDR: "10.244.1.0/24", Taints: []corev1.Taint{{Key: "example.com/gpu", Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{
				Conditions: []corev1.NodeCondition{
					{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", Message: "ok"},
					{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status",
						LastHeartbeatTime: metav1.Now()},
				},
				Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}, {Type: corev1.NodeInternalIP, Address: "192.0.2.1"}},
				Images:    []corev1.ContainerImage{{Names: []string{"registry.example.com/big/image:v1"}, SizeBytes: 1 << 30}},
				NodeInfo:  corev1.NodeSystemInfo{KubeletVersion: "v1.34.0"},
			},
		}
		mod(n)
		return n
	}
	cases := []*corev1.Node{
		mk("ready", func(*corev1.Node) {}),
		mk("not-ready", func(n *corev1.Node) { n.Status.Conditions[1].Status = corev1.ConditionFalse }),
		mk("unknown", func(n *corev1.Node) { n.Status.Conditions[1].Status = corev1.ConditionUnknown }),
		mk("no-network", func(n *corev1.Node) {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue})
		}),
		mk("network-ok", func(n *corev1.Node) {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse})
		}),
		mk("out-of-service", func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: announce.OutOfServiceTaint, Value: "shutdown", Effect: corev1.TaintEffectNoExecute})
		}),
		mk("external-ip", func(n *corev1.Node) {
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeExternalIP, Address: "198.51.100.7"}, {Type: corev1.NodeInternalIP, Address: "2001:db8::7"}}
		}),
		mk("excluded", func(n *corev1.Node) { n.Labels["node.kubernetes.io/exclude-from-external-load-balancers"] = "" }),
	}
	for _, full := range cases {
		t.Run(full.Name, func(t *testing.T) {
			slim := mustTransform(t, transformNode, full.DeepCopy())
			if g, w := announce.NodeFromK8s(slim), announce.NodeFromK8s(full); !reflect.DeepEqual(g, w) {
				t.Errorf("NodeFromK8s(transformed) = %+v, want %+v", g, w)
			}
			if g, w := announce.NodeIPv4(slim), announce.NodeIPv4(full); g != w {
				t.Errorf("NodeIPv4(transformed) = %v, want %v", g, w)
			}
			for _, other := range cases {
				if g, w := nodeChanged(updateEvent(slim, mustTransform(t, transformNode, other.DeepCopy()))), nodeChanged(updateEvent(full, other)); g != w {
					t.Errorf("nodeChanged(%s -> %s) = %v transformed, %v full", full.Name, other.Name, g, w)
				}
			}
			if slim.Status.Images != nil || slim.Annotations != nil || slim.Spec.PodCIDR != "" || slim.Status.NodeInfo.KubeletVersion != "" {
				t.Errorf("transformed Node keeps fields nothing reads: %+v", slim)
			}
			for _, c := range slim.Status.Conditions {
				if c.Message != "" || !c.LastHeartbeatTime.IsZero() || c.Type == corev1.NodeMemoryPressure {
					t.Errorf("transformed condition keeps what nothing reads: %+v", c)
				}
			}
		})
	}
}

// TestTransformPodKeepsDiscoveryInputs: speakerAddrs (memberlist peers)
// is the same on transformed speaker Pods.
func TestTransformPodKeepsDiscoveryInputs(t *testing.T) {
	mk := func(name, ip string, phase corev1.PodPhase, deleting bool) corev1.Pod {
		p := corev1.Pod{
			ObjectMeta: fullMeta("herald", name, map[string]string{"app": "speaker"}, map[string]string{"a": "b"}),
			Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "speaker", Image: "speaker:v1"}}},
			Status:     corev1.PodStatus{Phase: phase, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, HostIP: "192.0.2.1"},
		}
		if deleting {
			p.DeletionTimestamp = ptr.To(metav1.Now())
		}
		return p
	}
	full := []corev1.Pod{
		mk("a", "192.0.2.1", corev1.PodRunning, false),
		mk("b", "192.0.2.2", corev1.PodPending, false),
		mk("c", "192.0.2.3", corev1.PodRunning, true),
		mk("d", "", corev1.PodRunning, false),
		mk("e", "2001:db8::5", corev1.PodRunning, false),
		mk("f", "::ffff:192.0.2.6", corev1.PodRunning, false),
	}
	var slim []corev1.Pod
	for i := range full {
		slim = append(slim, *mustTransform(t, transformPod, full[i].DeepCopy()))
	}
	if g, w := speakerAddrs(slim, 7946), speakerAddrs(full, 7946); !reflect.DeepEqual(g, w) {
		t.Errorf("speakerAddrs(transformed) = %v, want %v", g, w)
	}
	for i := range full {
		g, w := podChanged(updateEvent(&slim[0], &slim[i])), podChanged(updateEvent(&full[0], &full[i]))
		if g != w {
			t.Errorf("podChanged(a -> %s) = %v transformed, %v full", full[i].Name, g, w)
		}
	}
	if slim[0].Spec.Containers != nil || slim[0].Annotations != nil {
		t.Errorf("transformed Pod keeps fields nothing reads: %+v", slim[0])
	}
}

func updateEvent(o, n client.Object) event.UpdateEvent {
	return event.UpdateEvent{ObjectOld: o, ObjectNew: n}
}

// TestTransformSecretKeepsPeerPasswords: config.Build gives the same
// snapshot and errors from transformed Secrets (a basic-auth password, a
// Secret of another type, one without the key), and the transform drops
// the data of Secrets that are not basic-auth.
func TestTransformSecretKeepsPeerPasswords(t *testing.T) {
	const ns = "herald"
	secret := func(name string, typ corev1.SecretType, data map[string][]byte) corev1.Secret {
		return corev1.Secret{ObjectMeta: fullMeta(ns, name, map[string]string{"a": "b"}, map[string]string{"c": "d"}), Type: typ, Data: data}
	}
	full := []corev1.Secret{
		secret("good", corev1.SecretTypeBasicAuth, map[string][]byte{"username": []byte("u"), "password": []byte("secret")}),
		secret("opaque", corev1.SecretTypeOpaque, map[string][]byte{"password": []byte("secret")}),
		secret("nokey", corev1.SecretTypeBasicAuth, map[string][]byte{"username": []byte("u")}),
		secret("sh.helm.release.v1.herald.v1", "helm.sh/release.v1", map[string][]byte{"release": make([]byte, 1<<16)}),
	}
	var slim []corev1.Secret
	for i := range full {
		slim = append(slim, *mustTransform(t, transformSecret, full[i].DeepCopy()))
	}
	if slim[3].Data != nil || slim[1].Data != nil || slim[0].Annotations != nil {
		t.Errorf("transformed Secrets keep data nothing reads: %+v", slim)
	}
	for _, name := range []string{"good", "opaque", "nokey", "missing"} {
		t.Run(name, func(t *testing.T) {
			peer := v1beta2.BGPPeer{
				ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns},
				Spec: v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64500, PeerAddress: "192.0.2.1",
					PasswordSecret: &corev1.SecretReference{Name: name}},
			}
			build := func(secrets []corev1.Secret) (*config.Snapshot, string) {
				snap, err := config.Build(config.Resources{Peers: []v1beta2.BGPPeer{peer}, Secrets: secrets}, config.Options{Namespace: ns})
				if err != nil {
					return snap, err.Error()
				}
				return snap, ""
			}
			gs, ge := build(slim)
			ws, we := build(full)
			if ge != we || !reflect.DeepEqual(gs, ws) {
				t.Errorf("config.Build on transformed Secrets = %+v, %q; want %+v, %q", gs, ge, ws, we)
			}
		})
	}
}

// TestTransformStatusKeepsWatchInputs: a status object becomes a
// *statusRef from which the status writer's watch reads the same name,
// namespace, resourceVersion and Service (statusKeyOf) as from the full
// object, whether its labels are the status's, edited, partly removed or
// the status is empty; the status, the other labels and the rest of the
// metadata are gone.
func TestTransformStatusKeepsWatchInputs(t *testing.T) {
	common := v1beta1.ServiceStatusCommon{Node: "n1", ServiceName: "web", ServiceNamespace: "shop"}
	lbl := func(node, name, ns string) map[string]string {
		l := map[string]string{"app": "x"}
		for k, v := range map[string]string{v1beta1.LabelNode: node, v1beta1.LabelServiceName: name, v1beta1.LabelServiceNamespace: ns} {
			if v != "" {
				l[k] = v
			}
		}
		return l
	}
	tests := []struct {
		name    string
		labels  map[string]string
		status  v1beta1.ServiceStatusCommon
		wantKey string
	}{
		{"labels of the status", lbl("n1", "web", "shop"), common, "shop/web"},
		{"empty status", lbl("n1", "web", "shop"), v1beta1.ServiceStatusCommon{}, "shop/web"},
		{"relabelled for another Service", lbl("n1", "api", "shop"), common, "shop/api"},
		{"service labels removed", lbl("n1", "", ""), common, ""},
		{"service name label removed", lbl("n1", "", "shop"), common, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l2 := &v1beta1.ServiceL2Status{ObjectMeta: fullMeta("herald", "l2-a", tc.labels, map[string]string{"a": "b"})}
			l2.Status.ServiceStatusCommon, l2.Status.Interfaces = tc.status, []v1beta1.InterfaceInfo{{Name: "eth0"}}
			bgp := &v1beta1.ServiceBGPStatus{ObjectMeta: fullMeta("herald", "bgp-a", tc.labels, nil)}
			bgp.Status.ServiceStatusCommon, bgp.Status.Peers = tc.status, []string{"p1"}
			for _, full := range []client.Object{l2, bgp} {
				out, err := transformStatus(full.DeepCopyObject())
				if err != nil {
					t.Fatal(err)
				}
				slim, ok := out.(*statusRef)
				if !ok {
					t.Fatalf("%s: transform returned %T, want *statusRef", full.GetName(), out)
				}
				if g, w := statusKeyOf(slim), statusKeyOf(full); g != w || g != tc.wantKey {
					t.Errorf("%s: statusKeyOf(transformed) = %q, of the full object %q, want %q", full.GetName(), g, w, tc.wantKey)
				}
				if slim.GetName() != full.GetName() || slim.GetNamespace() != full.GetNamespace() || slim.GetResourceVersion() != full.GetResourceVersion() {
					t.Errorf("%s: transformed identity %s/%s@%s", full.GetName(), slim.GetNamespace(), slim.GetName(), slim.GetResourceVersion())
				}
				if k, err := toolscache.MetaNamespaceKeyFunc(slim); err != nil || k != "herald/"+full.GetName() {
					t.Errorf("%s: store key %q, %v", full.GetName(), k, err)
				}
				if slim.GetLabels() != nil || slim.GetAnnotations() != nil || slim.GetUID() != "" || slim.GetGeneration() != 0 {
					t.Errorf("%s: transformed labels %v, annotations %v, UID %q", full.GetName(), slim.GetLabels(), slim.GetAnnotations(), slim.GetUID())
				}
				if c := slim.DeepCopyObject().(*statusRef); *c != *slim || c == slim {
					t.Errorf("%s: DeepCopyObject = %+v, want a copy of %+v", full.GetName(), c, slim)
				}
			}
		})
	}
}

// TestEndpointsOfSeveralSlices: endpoints() gives the endpoints of every
// EndpointSlice of the Service (records indexed by sliceService), none of
// another Service's, and a Service with one slice its record's own.
func TestEndpointsOfSeveralSlices(t *testing.T) {
	slice := func(name, svc, node string, ready bool) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, NodeName: ptr.To(node),
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}},
		}
	}
	full := []*discoveryv1.EndpointSlice{
		slice("web-a", "web", "n1", true), slice("web-b", "web", "n2", false),
		slice("api-a", "api", "n3", true), slice("orphan", "", "n4", true),
	}
	idx := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{indexSliceService: sliceService})
	for _, f := range full {
		r, err := transformEndpointSlice(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := idx.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	s := &Controller{slices: idx}
	byNode := func(eps []announce.Endpoint) []announce.Endpoint {
		out := slices.Clone(eps)
		slices.SortFunc(out, func(a, b announce.Endpoint) int { return strings.Compare(a.NodeName, b.NodeName) })
		return out
	}
	for _, tc := range []struct {
		svc  string
		want []announce.Endpoint
	}{
		{"web", announce.EndpointsFromSlices([]discoveryv1.EndpointSlice{*full[0], *full[1]})},
		{"api", announce.EndpointsFromSlices([]discoveryv1.EndpointSlice{*full[2]})},
		{"none", nil},
	} {
		got, err := s.endpoints(context.Background(), "ns", tc.svc)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(byNode(got), byNode(tc.want)) {
			t.Errorf("endpoints of %s = %+v, want %+v", tc.svc, got, tc.want)
		}
	}
}

// TestServiceRecordsDecideAsFullServices: the decisions of Services read
// from the cache's records (Controller.service, the ingress-IP index and
// the shared-address views of Controller.sharing, Controller.endpoints)
// are those of the full Services: announced or not, the layer 2 winner,
// shared addresses (one sharing key, another key, none) and
// externalTrafficPolicy Local.
func TestServiceRecordsDecideAsFullServices(t *testing.T) {
	f := newPureFixture(t)
	shared, alone := netip.MustParseAddr("198.51.100.3"), netip.MustParseAddr("198.51.100.4")
	svc := func(name string, ip netip.Addr, key string, local bool) *corev1.Service {
		s := &corev1.Service{
			ObjectMeta: fullMeta("ns", name, map[string]string{"app": name}, map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}"}),
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{
				{IP: ip.String(), IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}}},
		}
		if key != "" {
			s.Annotations["metallb.io/allow-shared-ip"] = key
		}
		if local {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}
		return s
	}
	full := []*corev1.Service{
		svc("a", shared, "k", false), svc("b", shared, "k", true), svc("c", shared, "other", false),
		svc("d", alone, "", true), svc("e", alone, "", false),
	}
	nodeport := svc("np", alone, "", false)
	nodeport.Spec.Type = corev1.ServiceTypeNodePort
	full = append(full, nodeport)
	endpointsOn := map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n1", "n2"}, "d": {"n2"}, "e": {"n1"}, "np": {"n1"}}
	slicesOf := map[string][]discoveryv1.EndpointSlice{}
	svcIdx := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{indexServiceIP: serviceIPs})
	sliceIdx := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{indexSliceService: sliceService})
	for _, s := range full {
		r, err := transformService(s.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		must(t, svcIdx.Add(r))
		sl := discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: s.Name + "-1", Namespace: "ns", Labels: map[string]string{discoveryv1.LabelServiceName: s.Name}},
			AddressType: discoveryv1.AddressTypeIPv4,
		}
		for i, n := range endpointsOn[s.Name] {
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.0.0.%d", i+1)}, NodeName: ptr.To(n),
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: fmt.Sprintf("%s-%d", s.Name, i)}})
		}
		slicesOf[s.Name] = []discoveryv1.EndpointSlice{sl}
		r, err = transformEndpointSlice(sl.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		must(t, sliceIdx.Add(r))
	}
	byKey := func(ss []announce.SharedService) []announce.SharedService {
		out := slices.Clone(ss)
		slices.SortFunc(out, func(a, b announce.SharedService) int { return strings.Compare(a.Service.Key, b.Service.Key) })
		return out
	}
	ctx := context.Background()
	for _, node := range []string{"n1", "n2"} {
		s := &Controller{svcs: svcIdx, slices: sliceIdx}
		for _, o := range full {
			// From the full objects, as the speaker decided before records.
			want := f.input(node, map[string]bool{"n1": true, "n2": true})
			want.Service = announce.ServiceFromK8s(o)
			want.Endpoints = announce.EndpointsFromSlices(slicesOf[o.Name])
			want.Sharing = nil
			for _, other := range full {
				sv := announce.ServiceFromK8s(other)
				if other != o && slices.ContainsFunc(sv.IPs, func(ip netip.Addr) bool { return slices.Contains(want.Service.IPs, ip) }) {
					want.Sharing = append(want.Sharing, announce.SharedService{Service: sv,
						Endpoints: announce.SharingEndpoints(announce.EndpointsFromSlices(slicesOf[other.Name]))})
				}
			}
			// From the records, as reconcileService reads them.
			rec, err := s.service("ns/" + o.Name)
			if err != nil || rec == nil {
				t.Fatalf("service(ns/%s) = %v, %v", o.Name, rec, err)
			}
			got := f.input(node, map[string]bool{"n1": true, "n2": true})
			got.Service = rec.svc
			if got.Endpoints, err = s.endpoints(ctx, rec.GetNamespace(), rec.GetName()); err != nil {
				t.Fatal(err)
			}
			if got.Sharing, err = s.sharing(ctx, &got.Service); err != nil {
				t.Fatal(err)
			}
			got.Sharing, want.Sharing = byKey(got.Sharing), byKey(want.Sharing)
			for i := range got.Sharing {
				// The record's labels are a labelSet (same labels).
				got.Sharing[i].Service = withMapLabels(got.Sharing[i].Service)
			}
			if !reflect.DeepEqual(got.Sharing, want.Sharing) {
				t.Errorf("%s on %s: sharing %+v from records, %+v from the Services", o.Name, node, got.Sharing, want.Sharing)
			}
			if g, w := announce.Decide(got), announce.Decide(want); !reflect.DeepEqual(g, w) {
				t.Errorf("%s on %s: decision %+v from the record, %+v from the Service", o.Name, node, g, w)
			}
		}
	}
	if r, err := (&Controller{svcs: svcIdx}).service("ns/gone"); r != nil || err != nil {
		t.Errorf("service(ns/gone) = %v, %v; want none", r, err)
	}
}

// withMapLabels returns svc with its labels as a labels.Set, as
// announce.ServiceFromK8s gives them, for comparing a record's Service
// with it.
func withMapLabels(svc announce.Service) announce.Service {
	if ls, ok := svc.Labels.(labelSet); ok {
		svc.Labels = labels.Set(ls.Map())
	}
	return svc
}

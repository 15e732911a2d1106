package allocation

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"reflect"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/randfill"

	"github.com/herald-lb/herald/internal/annotations"
)

// serviceView is everything the allocation loop reads from a cached
// Service (reconcile, finish, clear, agrees, the event handlers, later,
// syncAnnotation): a projection must give the same view as the full object.
func serviceView(s *corev1.Service) map[string]any {
	v := map[string]any{
		"key": Key(s), "namespace": s.Namespace, "name": s.Name, "uid": s.UID,
		"resourceVersion": s.ResourceVersion, "generation": s.Generation,
		"labels": s.Labels, "type": s.Spec.Type,
		"ingressIPs": IngressIPs(s), "ingressLen": len(s.Status.LoadBalancer.Ingress),
		"allocatedFrom": s.Annotations[annotations.AllocatedFromPool],
		"pool":          annotations.PoolName(s), "sharing": annotations.SharingKey(s),
		"deprecated": annotations.Deprecated(s),
		"condition":  meta.FindStatusCondition(s.Status.Conditions, ConditionType),
	}
	for _, class := range []string{"", "bench.herald.io/x", "other"} {
		v["handled "+class] = Handled(s, class)
		v["owns "+class] = OwnsClass(s, class)
	}
	ips, err := annotations.RequestedIPs(s)
	v["requestedIPs"], v["requestedIPsErr"] = ips, fmt.Sprint(err)
	req, err := RequestFor(s, map[string]string{"team": "a"})
	v["request"], v["requestErr"], v["fingerprint"] = req, fmt.Sprint(err), requestFingerprint(req)
	return v
}

// randomService is a randfill'd Service whose read fields are, more often
// than chance would make them, values the controller acts on.
func randomService(f *randfill.Filler, r *rand.Rand) *corev1.Service {
	s := &corev1.Service{}
	f.Fill(s)
	pick := func(xs ...string) string { return xs[r.Intn(len(xs))] }
	s.Spec.Type = corev1.ServiceType(pick("LoadBalancer", "LoadBalancer", "ClusterIP", "NodePort"))
	if r.Intn(2) == 0 {
		s.Spec.LoadBalancerClass = nil
	}
	s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicy(pick("Local", "Cluster", ""))
	s.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicy(pick("SingleStack", "PreferDualStack", "RequireDualStack")))
	fams := [][]corev1.IPFamily{nil, {corev1.IPv4Protocol}, {corev1.IPv6Protocol}, {corev1.IPv6Protocol, corev1.IPv4Protocol}}
	s.Spec.IPFamilies = fams[r.Intn(len(fams))]
	cips := [][]string{nil, {"10.0.0.1"}, {"fd00::1", "10.0.0.2"}, {"None"}}
	s.Spec.ClusterIPs = cips[r.Intn(len(cips))]
	s.Spec.ClusterIP = pick("", "10.0.0.3", "None")
	s.Spec.LoadBalancerIP = pick("", "192.0.2.7", "bad")
	for i := range s.Spec.Ports {
		s.Spec.Ports[i].Protocol = corev1.Protocol(pick("TCP", "UDP", ""))
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	for _, k := range []string{annotations.AddressPool, annotations.AddressPoolDeprecated, annotations.LoadBalancerIPs,
		annotations.LoadBalancerIPsDeprecated, annotations.AllowSharedIP, annotations.AllowSharedIPDeprecated, annotations.AllocatedFromPool} {
		if r.Intn(3) == 0 {
			s.Annotations[k] = pick("gold", "198.51.100.1", "198.51.100.2,2001:db8::2", "k1")
		}
	}
	s.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = `{"big":"object"}`
	for i := range s.Status.LoadBalancer.Ingress {
		s.Status.LoadBalancer.Ingress[i].IP = pick("198.51.100.9", "2001:db8::9", "", "x")
	}
	if r.Intn(2) == 0 {
		s.Status.Conditions = append(s.Status.Conditions, metav1.Condition{Type: ConditionType, Status: "True", Reason: ReasonAllocated, Message: "m", ObservedGeneration: 3})
	}
	if r.Intn(4) == 0 {
		s.Status.Conditions = append([]metav1.Condition{{Type: ConditionType, Status: "False", Reason: ReasonPoolExhausted}}, s.Status.Conditions...)
	}
	return s
}

// TestProjectServiceKeepsWhatIsRead: for random Services (every field
// filled, the read ones with meaningful values), the projection gives the
// controller the same view, is idempotent, and drops the unread bulk.
func TestProjectServiceKeepsWhatIsRead(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	f := randfill.NewWithSeed(1).NilChance(0.2).NumElements(0, 3)
	for i := range 2000 {
		s := randomService(f, r)
		want := serviceView(s)
		p := projectService(s.DeepCopy())
		if got := serviceView(p); !reflect.DeepEqual(got, want) {
			for k := range want {
				if !reflect.DeepEqual(got[k], want[k]) {
					t.Errorf("service %d: %s = %#v after projection, want %#v", i, k, got[k], want[k])
				}
			}
			t.Fatalf("projection changed what the controller reads")
		}
		if again := projectService(p.DeepCopy()); !reflect.DeepEqual(again, p) {
			t.Fatalf("service %d: projection not idempotent:\n%#v\n%#v", i, again, p)
		}
		if p.ManagedFields != nil || p.OwnerReferences != nil || p.Finalizers != nil || p.Spec.SessionAffinityConfig != nil {
			t.Fatalf("service %d: unread fields kept: %+v", i, p)
		}
		if _, ok := p.Annotations["kubectl.kubernetes.io/last-applied-configuration"]; ok {
			t.Fatalf("service %d: last-applied annotation kept", i)
		}
	}
}

// TestProjectServiceFields names each field the controller reads, set
// alone on an otherwise empty Service: it must survive the projection.
func TestProjectServiceFields(t *testing.T) {
	local := corev1.ServiceExternalTrafficPolicyLocal
	for _, tc := range []struct {
		name string
		set  func(*corev1.Service)
	}{
		{"name", func(s *corev1.Service) { s.Name = "a" }},
		{"namespace", func(s *corev1.Service) { s.Namespace = "b" }},
		{"uid", func(s *corev1.Service) { s.UID = "u" }},
		{"resourceVersion", func(s *corev1.Service) { s.ResourceVersion = "7" }},
		{"generation", func(s *corev1.Service) { s.Generation = 4 }},
		{"labels", func(s *corev1.Service) { s.Labels = map[string]string{"app": "x"} }},
		{"pool annotation", func(s *corev1.Service) { s.Annotations = map[string]string{annotations.AddressPool: "p"} }},
		{"deprecated pool annotation", func(s *corev1.Service) { s.Annotations = map[string]string{annotations.AddressPoolDeprecated: "p"} }},
		{"sharing annotation", func(s *corev1.Service) { s.Annotations = map[string]string{annotations.AllowSharedIP: "k"} }},
		{"loadBalancerIPs annotation", func(s *corev1.Service) {
			s.Annotations = map[string]string{annotations.LoadBalancerIPs: "198.51.100.1"}
		}},
		{"allocated-from-pool annotation", func(s *corev1.Service) {
			s.Annotations = map[string]string{annotations.AllocatedFromPool: "p"}
		}},
		{"type", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeLoadBalancer }},
		{"loadBalancerClass", func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr.To("c") }},
		{"clusterIP", func(s *corev1.Service) { s.Spec.ClusterIP = "10.0.0.1" }},
		{"clusterIPs", func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"10.0.0.1"} }},
		{"ipFamilies", func(s *corev1.Service) { s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol} }},
		{"ipFamilyPolicy", func(s *corev1.Service) { s.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyPreferDualStack) }},
		{"loadBalancerIP", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "198.51.100.2" }},
		{"externalTrafficPolicy", func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = local }},
		{"selector with policy Local", func(s *corev1.Service) {
			s.Spec.ExternalTrafficPolicy, s.Spec.Selector = local, map[string]string{"app": "x"}
		}},
		{"port protocol and number", func(s *corev1.Service) {
			s.Spec.Ports = []corev1.ServicePort{{Protocol: corev1.ProtocolUDP, Port: 53}}
		}},
		{"ingress", func(s *corev1.Service) {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.3", IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}
		}},
		{"our condition", func(s *corev1.Service) {
			s.Status.Conditions = []metav1.Condition{{Type: ConditionType, Status: "True", Reason: ReasonAllocated, ObservedGeneration: 2}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &corev1.Service{}
			tc.set(s)
			if got := projectService(s.DeepCopy()); !reflect.DeepEqual(got, s) {
				t.Errorf("projection dropped it:\n got %#v\nwant %#v", got, s)
			}
		})
	}
}

// TestProjectNamespaceAndNode: the projections keep what is read (name and
// labels: namespaceSelectors, BGPPeer node selectors in config.Build, the
// label-change handlers; a Namespace's deletion timestamp) and drop the
// rest.
func TestProjectNamespaceAndNode(t *testing.T) {
	f := randfill.NewWithSeed(2).NilChance(0.2).NumElements(0, 3)
	for range 500 {
		var ns corev1.Namespace
		f.Fill(&ns)
		p := projectNamespace(ns.DeepCopy())
		if p.Name != ns.Name || p.UID != ns.UID || p.ResourceVersion != ns.ResourceVersion ||
			!reflect.DeepEqual(p.Labels, ns.Labels) || !reflect.DeepEqual(p.DeletionTimestamp, ns.DeletionTimestamp) {
			t.Fatalf("namespace projection dropped a read field:\n got %#v\nfrom %#v", p.ObjectMeta, ns.ObjectMeta)
		}
		if p.Annotations != nil || p.ManagedFields != nil || p.Spec.Finalizers != nil || p.Status.Phase != "" {
			t.Fatalf("namespace projection kept unread fields: %#v", p)
		}
		if !reflect.DeepEqual(projectNamespace(p.DeepCopy()), p) {
			t.Fatal("namespace projection not idempotent")
		}
		var n corev1.Node
		f.Fill(&n)
		pn := projectNode(n.DeepCopy())
		if pn.Name != n.Name || pn.UID != n.UID || pn.ResourceVersion != n.ResourceVersion || !reflect.DeepEqual(pn.Labels, n.Labels) {
			t.Fatalf("node projection dropped a read field:\n got %#v\nfrom %#v", pn.ObjectMeta, n.ObjectMeta)
		}
		if pn.Annotations != nil || pn.Status.Images != nil || pn.Status.Conditions != nil || pn.Spec.PodCIDRs != nil {
			t.Fatalf("node projection kept unread fields: %#v", pn)
		}
		if !reflect.DeepEqual(projectNode(pn.DeepCopy()), pn) {
			t.Fatal("node projection not idempotent")
		}
	}
}

// TestProjectLeavesOtherObjects: tombstones and other types pass through.
func TestProjectLeavesOtherObjects(t *testing.T) {
	tr := project(projectService)
	tomb := toolscache.DeletedFinalStateUnknown{Key: "a/b", Obj: &corev1.Service{}}
	if got, err := tr(tomb); err != nil || !reflect.DeepEqual(got, tomb) {
		t.Errorf("tombstone = %#v, %v", got, err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{"a": "b"}}}
	if got, err := tr(pod); err != nil || got != any(pod) {
		t.Errorf("pod = %#v, %v", got, err)
	}
	if got, _ := tr((*corev1.Service)(nil)); got != any((*corev1.Service)(nil)) {
		t.Errorf("nil Service = %#v", got)
	}
}

// BenchmarkCachedServiceMemory reports the heap one cached Service takes
// ("B/service", 10,000 of them decoded from JSON as the informer does) for
// bench-alloc's Services with the managed fields the API server gives them:
// as decoded, with managed fields stripped (the cache before the
// projection), and projected. Run with -short (no API server needed).
func BenchmarkCachedServiceMemory(b *testing.B) {
	const n = 10_000
	now := metav1.Now()
	fields := func(s string) *metav1.FieldsV1 { return metav1.NewFieldsV1(s) }
	raw := make([][]byte, n)
	for i := range n {
		name := fmt.Sprintf("svc-%05d", i)
		ip := fmt.Sprintf("2001:db8:1::%x", i+1)
		s := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "herald-10000", Name: name, Labels: map[string]string{"bench.herald.io/run": "herald-10000"},
				UID: "0b5c7c8e-1f7e-4a7e-9d0e-5d1f8e1a2b3c", ResourceVersion: "123456", CreationTimestamp: now,
				Annotations: map[string]string{annotations.AllocatedFromPool: "bench"},
				ManagedFields: []metav1.ManagedFieldsEntry{
					{Manager: "bench-alloc", Operation: "Update", APIVersion: "v1", Time: &now, FieldsType: "FieldsV1", FieldsV1: fields(`{"f:metadata":{"f:labels":{".":{},"f:bench.herald.io/run":{}}},"f:spec":{"f:allocateLoadBalancerNodePorts":{},"f:externalTrafficPolicy":{},"f:internalTrafficPolicy":{},"f:ipFamilies":{},"f:ipFamilyPolicy":{},"f:ports":{".":{},"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:name":{},"f:port":{},"f:protocol":{},"f:targetPort":{}}},"f:selector":{},"f:sessionAffinity":{},"f:type":{}}}`)},
					{Manager: "herald-controller", Operation: "Update", APIVersion: "v1", Time: &now, FieldsType: "FieldsV1", Subresource: "status", FieldsV1: fields(`{"f:status":{"f:conditions":{".":{},"k:{\"type\":\"herald.io/IPAllocated\"}":{".":{},"f:lastTransitionTime":{},"f:message":{},"f:observedGeneration":{},"f:reason":{},"f:status":{},"f:type":{}}},"f:loadBalancer":{"f:ingress":{}}}}`)},
					{Manager: "herald-controller", Operation: "Update", APIVersion: "v1", Time: &now, FieldsType: "FieldsV1", Subresource: "status", FieldsV1: fields(`{"f:metadata":{"f:annotations":{".":{},"f:metallb.io/ip-allocated-from-pool":{}}}}`)},
				}},
			Spec: corev1.ServiceSpec{
				Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr.To(false),
				IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicySingleStack), IPFamilies: []corev1.IPFamily{corev1.IPv6Protocol},
				ClusterIP: "fd00:10:96::1234", ClusterIPs: []string{"fd00:10:96::1234"}, Selector: map[string]string{"app": name},
				Ports:           []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
				SessionAffinity: corev1.ServiceAffinityNone, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster,
				InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyCluster),
			},
			Status: corev1.ServiceStatus{
				LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: ip, IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}},
				Conditions: []metav1.Condition{{Type: ConditionType, Status: metav1.ConditionTrue, Reason: ReasonAllocated,
					Message: fmt.Sprintf("Assigned IP [%q]", ip), LastTransitionTime: now}},
			},
		}
		var err error
		if raw[i], err = json.Marshal(s); err != nil {
			b.Fatal(err)
		}
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	for _, tc := range []struct {
		name string
		tr   func(*corev1.Service) *corev1.Service
	}{
		{"decoded", func(s *corev1.Service) *corev1.Service { return s }},
		{"stripped", func(s *corev1.Service) *corev1.Service { s.ManagedFields = nil; return s }},
		{"projected", projectService},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var per float64
			for range b.N {
				before := heap()
				kept := make([]*corev1.Service, n)
				for i := range n {
					var s corev1.Service
					if err := json.Unmarshal(raw[i], &s); err != nil {
						b.Fatal(err)
					}
					kept[i] = tc.tr(&s)
				}
				per = float64(heap()-before) / n
				runtime.KeepAlive(kept)
			}
			b.ReportMetric(per, "B/service")
		})
	}
}

// Services whose only metallb annotation is the pool annotation share
// their pool's annotation map in the cache (issue #16: one map of ~340
// bytes per addressed Service); others keep their own.
func TestProjectServiceSharesPoolAnnotation(t *testing.T) {
	withAnn := func(ann map[string]string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", Annotations: ann}}
	}
	same := func(a, b map[string]string) bool {
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	a := projectService(withAnn(map[string]string{annotations.AllocatedFromPool: "shared-pool-a", "other.io/x": "y"}))
	b := projectService(withAnn(map[string]string{annotations.AllocatedFromPool: "shared-pool-a"}))
	c := projectService(withAnn(map[string]string{annotations.AllocatedFromPool: "shared-pool-b"}))
	d := projectService(withAnn(map[string]string{annotations.AllocatedFromPool: "shared-pool-a", annotations.AllowSharedIP: "k"}))
	if !same(a.Annotations, b.Annotations) {
		t.Error("two Services of pool shared-pool-a hold one annotation map each")
	}
	if same(a.Annotations, c.Annotations) || c.Annotations[annotations.AllocatedFromPool] != "shared-pool-b" {
		t.Errorf("pool shared-pool-b's Service has annotations %v", c.Annotations)
	}
	if same(a.Annotations, d.Annotations) || len(d.Annotations) != 2 {
		t.Errorf("a Service with another metallb annotation has annotations %v", d.Annotations)
	}
	if len(a.Annotations) != 1 || a.Annotations[annotations.AllocatedFromPool] != "shared-pool-a" {
		t.Errorf("shared map %v", a.Annotations)
	}
}

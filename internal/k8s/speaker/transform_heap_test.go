package speaker

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// benchObjects returns the JSON of n Services and their EndpointSlices as
// the API server sends them (the shape of e2e/cmd/bench-speaker-mem: kubectl
// apply's last-applied-configuration, two ports, three endpoints with Pod
// targetRefs and zones, managed fields).
func benchObjects(tb testing.TB, n int) (svcs, slices [][]byte) {
	tb.Helper()
	for i := range n {
		name := fmt.Sprintf("svc-%05d", i)
		labels := map[string]string{"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "shop", "app.kubernetes.io/version": "1.4.2"}
		mf := []metav1.ManagedFieldsEntry{{Manager: "kubectl-client-side-apply", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
			FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:annotations":{".":{},"f:kubectl.kubernetes.io/last-applied-configuration":{}},"f:labels":{".":{},"f:app.kubernetes.io/name":{}}},"f:spec":{"f:ports":{".":{},"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:name":{},"f:port":{}}},"f:selector":{},"f:type":{}}}`)}}
		svc := &corev1.Service{
			TypeMeta: metav1.TypeMeta{Kind: "Service", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench", UID: types.UID(fmt.Sprintf("6f1c3a52-9d7e-4b1a-8c2f-%012d", i)),
				ResourceVersion: "123456", Labels: labels, Annotations: map[string]string{"metallb.io/loadBalancerIPs": "2001:db8::1"},
				CreationTimestamp: metav1.Now(), ManagedFields: mf},
			Spec: corev1.ServiceSpec{
				Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "fd00:10:96::1234", ClusterIPs: []string{"fd00:10:96::1234"},
				IPFamilies: []corev1.IPFamily{corev1.IPv6Protocol}, IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicySingleStack),
				Selector: map[string]string{"app.kubernetes.io/name": name}, SessionAffinity: corev1.ServiceAffinityNone,
				ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster, InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyCluster),
				AllocateLoadBalancerNodePorts: ptr.To(false),
				Ports: []corev1.ServicePort{
					{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP},
					{Name: "https", Port: 443, TargetPort: intstr.FromString("https"), Protocol: corev1.ProtocolTCP},
				},
			},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "2001:db8::1", IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}}},
		}
		applied, _ := json.Marshal(svc.Spec)
		svc.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = string(applied)
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-x7k2p", Namespace: "bench", UID: svc.UID, ResourceVersion: "123457",
				Labels:          map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io", "app.kubernetes.io/name": name},
				Annotations:     map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": "2026-12-01T19:00:00Z"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: name, UID: svc.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
				ManagedFields:   mf[:1],
			},
			AddressType: discoveryv1.AddressTypeIPv6,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
		}
		for k := 1; k <= 3; k++ {
			slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{fmt.Sprintf("fd00:10:244:%x::%x", k, i+1)},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "bench", Name: fmt.Sprintf("%s-7d9f8b6c5-%05d", name, k), UID: svc.UID},
				NodeName:   ptr.To(fmt.Sprintf("n%d", k)), Zone: ptr.To(fmt.Sprintf("zone-%d", k)),
			})
		}
		a, _ := json.Marshal(svc)
		b, _ := json.Marshal(slice)
		svcs, slices = append(svcs, a), append(slices, b)
	}
	return svcs, slices
}

// heldBytes decodes every object (as an informer does), passes it through
// the transforms (nil: none) and returns the live heap the kept objects take.
func heldBytes(tb testing.TB, svcs, slices [][]byte, svcT, sliceT func(any) (any, error)) uint64 {
	tb.Helper()
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	kept := make([]any, 0, len(svcs)+len(slices))
	for i := range svcs {
		var s corev1.Service
		var e discoveryv1.EndpointSlice
		if json.Unmarshal(svcs[i], &s) != nil || json.Unmarshal(slices[i], &e) != nil {
			tb.Fatal("decode")
		}
		var so, eo any = &s, &e
		if svcT != nil {
			so, _ = svcT(so)
			eo, _ = sliceT(eo)
		}
		kept = append(kept, so, eo)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	runtime.KeepAlive(kept)
	return ms.HeapAlloc - before
}

// BenchmarkCacheHeap reports the heap that 10,000 Services and their
// EndpointSlices take in the speaker's informers as decoded, with managed
// fields stripped (the cache before transform.go) and with the transforms (B/object pair and MiB per 10,000); no API server involved.
func BenchmarkCacheHeap(b *testing.B) {
	const n = 10000
	svcs, slices := benchObjects(b, n)
	strip := cache.TransformStripManagedFields()
	for _, tc := range []struct {
		name         string
		svcT, sliceT func(any) (any, error)
	}{
		{"decoded", nil, nil},
		{"stripped", strip, strip}, // the speaker's cache before transform.go
		{"transformed", transformService, transformEndpointSlice},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var held uint64
			for b.Loop() {
				held = heldBytes(b, svcs, slices, tc.svcT, tc.sliceT)
			}
			b.ReportMetric(float64(held)/n, "B/service")
			b.ReportMetric(float64(held)/(1<<20), "MiB/10k")
		})
	}
}

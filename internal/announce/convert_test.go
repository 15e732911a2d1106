package announce

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/herald-lb/herald/internal/annotations"
)

func TestServiceFromK8s(t *testing.T) {
	lb := func(mut func(s *corev1.Service)) *corev1.Service {
		s := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "front", Labels: map[string]string{"app": "front"}},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
		}
		mut(s)
		return s
	}
	tests := []struct {
		name string
		in   *corev1.Service
		want Service
	}{
		{name: "defaults", in: lb(func(*corev1.Service) {}), want: Service{Key: "web/front", LoadBalancer: true,
			Labels: labels.Set{"app": "front"}, ExternalTrafficPolicy: TrafficPolicyCluster}},
		{name: "ClusterIP", in: lb(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP }),
			want: Service{Key: "web/front", Labels: labels.Set{"app": "front"}, ExternalTrafficPolicy: TrafficPolicyCluster}},
		{name: "ingress IPs, hostname skipped, invalid kept apart, mapped unmapped", in: lb(func(s *corev1.Service) {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{
				{IP: "198.51.100.4"}, {Hostname: "lb.example"}, {IP: "2001:db8::4"}, {IP: "nope"}, {IP: "::ffff:203.0.113.1"}, {IP: "fe80::1%eth0"},
			}
		}), want: Service{Key: "web/front", LoadBalancer: true, Labels: labels.Set{"app": "front"}, ExternalTrafficPolicy: TrafficPolicyLocal,
			IPs:        []netip.Addr{ip("198.51.100.4"), ip("2001:db8::4"), ip("203.0.113.1")},
			InvalidIPs: []string{"nope", "fe80::1%eth0"}}},
		{name: "sharing key and class", in: lb(func(s *corev1.Service) {
			s.Annotations = map[string]string{annotations.AllowSharedIP: "k1", annotations.AllowSharedIPDeprecated: "old"}
			s.Spec.LoadBalancerClass = ptr.To("herald.io/lb")
		}), want: Service{Key: "web/front", LoadBalancer: true, Labels: labels.Set{"app": "front"}, ExternalTrafficPolicy: TrafficPolicyCluster,
			SharingKey: "k1", LoadBalancerClass: "herald.io/lb"}},
		{name: "deprecated sharing key", in: lb(func(s *corev1.Service) {
			s.Annotations = map[string]string{annotations.AllowSharedIPDeprecated: "old"}
		}), want: Service{Key: "web/front", LoadBalancer: true, Labels: labels.Set{"app": "front"}, ExternalTrafficPolicy: TrafficPolicyCluster,
			SharingKey: "old"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ServiceFromK8s(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestEndpointsFromSlices(t *testing.T) {
	slices := []discoveryv1.EndpointSlice{
		{AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{
			{NodeName: ptr.To("n1"), TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "web-1"}}, // conditions unset: ready
			{NodeName: ptr.To("n2"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
			{NodeName: ptr.To("n3"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}},
		}},
		{AddressType: discoveryv1.AddressTypeIPv6, Endpoints: []discoveryv1.Endpoint{
			{Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}, // no node
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "web-2", UID: "u2"}},
		}},
		{AddressType: discoveryv1.AddressTypeFQDN, Endpoints: []discoveryv1.Endpoint{{NodeName: ptr.To("n1")}}},
	}
	want := []Endpoint{
		{NodeName: "n1", Ready: true, Family: 4, Target: hashTarget("Pod/ns/web-1")},
		{NodeName: "n2", Family: 4},
		{NodeName: "n3", Serving: true, Family: 4},
		{Ready: true, Family: 6, Target: hashTarget("uid:u2")},
		{NodeName: "n1", Ready: true},
	}
	got := EndpointsFromSlices(slices)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	canServe := []bool{true, false, true, true, true}
	for i, e := range got {
		if e.CanServe() != canServe[i] {
			t.Errorf("%+v: CanServe %v", e, e.CanServe())
		}
	}
}

func TestNodeFromK8s(t *testing.T) {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{ExcludeFromLBLabel: ""}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
			{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue},
		}},
	}
	got := NodeFromK8s(n)
	if got.Name != "n1" || !got.NetworkUnavailable || !got.ExcludedFromLB() {
		t.Fatalf("%+v", got)
	}
	n.Status.Conditions[1].Status = corev1.ConditionFalse
	n.Labels = nil
	if got := NodeFromK8s(n); got.NetworkUnavailable || got.ExcludedFromLB() {
		t.Fatalf("%+v", got)
	}
}

// TestNodeFromK8sLiveness: the fields LiveFromNodeConditions reads.
func TestNodeFromK8sLiveness(t *testing.T) {
	t.Parallel()
	cond := func(typ corev1.NodeConditionType, s corev1.ConditionStatus) corev1.NodeCondition {
		return corev1.NodeCondition{Type: typ, Status: s}
	}
	type liveness struct{ Ready, NetworkUnavailable, OutOfService bool }
	for _, tc := range []struct {
		name string
		node corev1.Node
		want liveness
	}{
		{"no conditions", corev1.Node{}, liveness{}},
		{"ready", corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse), cond(corev1.NodeReady, corev1.ConditionTrue)}}},
			liveness{Ready: true}},
		{"ready unknown", corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			cond(corev1.NodeReady, corev1.ConditionUnknown)}}}, liveness{}},
		{"network unavailable", corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			cond(corev1.NodeReady, corev1.ConditionTrue), cond(corev1.NodeNetworkUnavailable, corev1.ConditionTrue)}}},
			liveness{Ready: true, NetworkUnavailable: true}},
		{"network available", corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			cond(corev1.NodeNetworkUnavailable, corev1.ConditionFalse)}}}, liveness{}},
		{"out of service", corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: "node.kubernetes.io/unschedulable", Effect: corev1.TaintEffectNoSchedule},
			{Key: OutOfServiceTaint, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}}},
			liveness{OutOfService: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.node.ObjectMeta = metav1.ObjectMeta{Name: "n1"}
			n := NodeFromK8s(&tc.node)
			if got := (liveness{n.Ready, n.NetworkUnavailable, n.OutOfService}); n.Name != "n1" || got != tc.want {
				t.Errorf("got %s %+v, want n1 %+v", n.Name, got, tc.want)
			}
		})
	}
}

func TestReasonNames(t *testing.T) {
	seen := map[string]Reason{}
	for r := range reasonCount {
		s := r.String()
		if (s == "") != (r == ReasonNone) {
			t.Errorf("reason %d: name %q", r, s)
		}
		if prev, dup := seen[s]; dup {
			t.Errorf("reasons %d and %d share the name %q", prev, r, s)
		}
		seen[s] = r
	}
	if ReasonNotOwner.String() != "notOwner" || ReasonSharedIPWithServiceSelector.String() != "sharedIPWithServiceSelector" {
		t.Error("MetalLB names changed")
	}
	if reasonCount.String() != "unknown" {
		t.Error("out of range reason")
	}
}

// uidTarget is the Target of a targetRef with UID uid.
func uidTarget(uid string) Target { return TargetOf(&corev1.ObjectReference{UID: types.UID(uid)}) }

// TestTargetOf: targetRefs naming the same target give the same Target,
// others different ones; a canonical UUID gives its own bytes; only nil
// gives the zero Target.
func TestTargetOf(t *testing.T) {
	const u = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	want := Target{0x0f, 0x1e, 0x2d, 0x3c, 0x4b, 0x5a, 0x69, 0x78, 0x87, 0x96, 0xa5, 0xb4, 0xc3, 0xd2, 0xe1, 0xf0}
	if got := uidTarget(u); got != want {
		t.Errorf("TargetOf(UID %s) = %x, want %x", u, got, want)
	}
	if got := TargetOf(&corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "web", UID: u}); got != want {
		t.Errorf("TargetOf(Pod with UID %s) = %x, want its UID's", u, got)
	}
	if got := TargetOf(nil); got != (Target{}) {
		t.Errorf("TargetOf(nil) = %x, want the zero Target", got)
	}
	pod := func(kind, ns, name string) *corev1.ObjectReference {
		return &corev1.ObjectReference{Kind: kind, Namespace: ns, Name: name}
	}
	// Every one names a different target (as the "uid:<uid>" and
	// "<kind>/<namespace>/<name>" strings did).
	refs := []*corev1.ObjectReference{
		{UID: u},
		{UID: types.UID(strings.ToUpper(u))},            // not canonical: hashed, not merged with u
		{UID: "0f1e2d3c4b5a69788796a5b4c3d2e1f0"},       // no hyphens
		{UID: "00000000-0000-0000-0000-000000000000"},   // the zero UUID: not "no target"
		{UID: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1fg"},   // not hex
		{UID: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0-x"}, // too long
		{UID: "1"}, {UID: "2"},
		pod("Pod", "ns", "web"), pod("Pod", "ns", "api"), pod("Pod", "other", "web"), pod("Node", "ns", "web"),
		pod("", "", ""),
	}
	seen := map[Target]int{}
	for i, r := range refs {
		got := TargetOf(r)
		if got != TargetOf(r.DeepCopy()) {
			t.Errorf("%+v: TargetOf not deterministic", r)
		}
		if got == (Target{}) {
			t.Errorf("%+v: zero Target", r)
		}
		if j, ok := seen[got]; ok {
			t.Errorf("%+v and %+v: same Target %x", refs[j], r, got)
		}
		seen[got] = i
	}
}

// BenchmarkEndpointsFromSlices reports the conversion's allocations for a
// slice of three endpoints with Pod targetRefs with UIDs, as the
// EndpointSlice controller writes: what a speaker keeps per slice. With a
// string Target (48-byte Endpoint, one 48-byte "uid:<uid>" string each)
// and a slice grown by append, that was 480 B in 6 allocations, 336 B of
// them kept (the last slice, capacity 4, and the strings); with Target
// [16]byte (40-byte Endpoint) and the slice made to size, 128 B in 1.
func BenchmarkEndpointsFromSlices(b *testing.B) {
	s := []discoveryv1.EndpointSlice{{AddressType: discoveryv1.AddressTypeIPv4}}
	for i := range 3 {
		s[0].Endpoints = append(s[0].Endpoints, discoveryv1.Endpoint{
			Addresses: []string{fmt.Sprintf("10.0.0.%d", i)}, NodeName: ptr.To("n1"),
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: fmt.Sprintf("web-%d", i),
				UID: types.UID(fmt.Sprintf("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f%d", i))},
		})
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = EndpointsFromSlices(s)
	}
}

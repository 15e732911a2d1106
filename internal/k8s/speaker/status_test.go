package speaker

import (
	"net/netip"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/api/v1beta1"
)

func l2obj(name, node, svc string, ifaces ...string) v1beta1.ServiceL2Status {
	o := v1beta1.ServiceL2Status{ObjectMeta: metav1.ObjectMeta{Name: name}}
	o.Status.Node, o.Status.ServiceName, o.Status.ServiceNamespace = node, svc, "ns"
	for _, i := range ifaces {
		o.Status.Interfaces = append(o.Status.Interfaces, v1beta1.InterfaceInfo{Name: i})
	}
	return o
}

func TestPlanL2Status(t *testing.T) {
	want := l2obj("", "n1", "web", "eth0").Status
	wantNoIfaces := l2obj("", "n1", "web").Status
	tests := []struct {
		name     string
		desired  *v1beta1.ServiceL2StatusStatus
		existing []v1beta1.ServiceL2Status
		plan     statusPlan
	}{
		{name: "nothing wanted, nothing there", plan: statusPlan{Keep: -1}},
		{name: "create", desired: &want, plan: statusPlan{Create: true, Keep: -1}},
		{name: "up to date", desired: &want, existing: []v1beta1.ServiceL2Status{l2obj("a", "n1", "web", "eth0")},
			plan: statusPlan{Keep: 0}},
		{name: "nil and empty interfaces are equal", desired: &wantNoIfaces,
			existing: []v1beta1.ServiceL2Status{func() v1beta1.ServiceL2Status {
				o := l2obj("a", "n1", "web")
				o.Status.Interfaces = []v1beta1.InterfaceInfo{}
				return o
			}()},
			plan: statusPlan{Keep: 0}},
		{name: "interfaces changed: update", desired: &want, existing: []v1beta1.ServiceL2Status{l2obj("a", "n1", "web", "eth1")},
			plan: statusPlan{Keep: 0, Update: true}},
		{name: "empty status (created, status write failed): update", desired: &want,
			existing: []v1beta1.ServiceL2Status{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}},
			plan:     statusPlan{Keep: 0, Update: true}},
		{name: "immutable field differs: replace", desired: &want, existing: []v1beta1.ServiceL2Status{l2obj("a", "n2", "web", "eth0")},
			plan: statusPlan{Create: true, Keep: -1, Delete: []int{0}}},
		{name: "duplicates: keep the up-to-date one, delete the rest", desired: &want,
			existing: []v1beta1.ServiceL2Status{l2obj("a", "n1", "web", "eth1"), l2obj("b", "n1", "web", "eth0"), l2obj("c", "n1", "web")},
			plan:     statusPlan{Keep: 1, Delete: []int{0, 2}}},
		{name: "duplicates, none up to date: update the first compatible", desired: &want,
			existing: []v1beta1.ServiceL2Status{l2obj("a", "n1", "other"), l2obj("b", "n1", "web", "eth1"), l2obj("c", "n1", "web")},
			plan:     statusPlan{Keep: 1, Update: true, Delete: []int{0, 2}}},
		{name: "withdrawn: delete all", existing: []v1beta1.ServiceL2Status{l2obj("a", "n1", "web", "eth0"), l2obj("b", "n1", "web")},
			plan: statusPlan{Keep: -1, Delete: []int{0, 1}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := planL2Status(tc.desired, tc.existing); !reflect.DeepEqual(got, tc.plan) {
				t.Fatalf("plan = %+v, want %+v", got, tc.plan)
			}
		})
	}
}

func TestPlanBGPStatus(t *testing.T) {
	obj := func(name string, peers ...string) v1beta1.ServiceBGPStatus {
		o := v1beta1.ServiceBGPStatus{ObjectMeta: metav1.ObjectMeta{Name: name}}
		o.Status.Node, o.Status.ServiceName, o.Status.ServiceNamespace, o.Status.Peers = "n1", "web", "ns", peers
		return o
	}
	want := obj("", "p1", "p2").Status
	tests := []struct {
		name     string
		desired  *v1beta1.ServiceBGPStatusStatus
		existing []v1beta1.ServiceBGPStatus
		plan     statusPlan
	}{
		{name: "create", desired: &want, plan: statusPlan{Create: true, Keep: -1}},
		{name: "same peers", desired: &want, existing: []v1beta1.ServiceBGPStatus{obj("a", "p1", "p2")}, plan: statusPlan{Keep: 0}},
		{name: "peer added", desired: &want, existing: []v1beta1.ServiceBGPStatus{obj("a", "p1")}, plan: statusPlan{Keep: 0, Update: true}},
		{name: "withdrawn", existing: []v1beta1.ServiceBGPStatus{obj("a", "p1")}, plan: statusPlan{Keep: -1, Delete: []int{0}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := planBGPStatus(tc.desired, tc.existing); !reflect.DeepEqual(got, tc.plan) {
				t.Fatalf("plan = %+v, want %+v", got, tc.plan)
			}
		})
	}
}

func TestSpeakerAddrs(t *testing.T) {
	pod := func(ip string, phase corev1.PodPhase, deleting bool) corev1.Pod {
		p := corev1.Pod{Status: corev1.PodStatus{PodIP: ip, Phase: phase}}
		if deleting {
			now := metav1.Now()
			p.DeletionTimestamp = &now
		}
		return p
	}
	got := speakerAddrs([]corev1.Pod{
		pod("198.51.100.12", corev1.PodRunning, false),
		pod("198.51.100.11", corev1.PodRunning, false),
		pod("198.51.100.11", corev1.PodRunning, false), // duplicate (restarted pod)
		pod("198.51.100.13", corev1.PodPending, false),
		pod("198.51.100.14", corev1.PodRunning, true),
		pod("", corev1.PodRunning, false),
		pod("2001:db8::1", corev1.PodRunning, false),
	}, 7946)
	want := []netip.AddrPort{
		netip.MustParseAddrPort("198.51.100.11:7946"),
		netip.MustParseAddrPort("198.51.100.12:7946"),
		netip.MustParseAddrPort("[2001:db8::1]:7946"),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("speakerAddrs = %v, want %v", got, want)
	}
}

func TestNodeIPv4(t *testing.T) {
	n := &corev1.Node{Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeHostName, Address: "n1"},
		{Type: corev1.NodeExternalIP, Address: "203.0.113.5"},
		{Type: corev1.NodeInternalIP, Address: "2001:db8::5"},
		{Type: corev1.NodeInternalIP, Address: "198.51.100.5"},
	}}}
	if got := nodeIPv4(n); got != netip.MustParseAddr("198.51.100.5") {
		t.Fatalf("nodeIPv4 = %v, want the IPv4 InternalIP", got)
	}
	n.Status.Addresses = n.Status.Addresses[:3]
	if got := nodeIPv4(n); got != netip.MustParseAddr("203.0.113.5") {
		t.Fatalf("nodeIPv4 = %v, want the ExternalIP fallback", got)
	}
}

package allocation

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A due event renders the type, reason and message the controller emitted
// when it formatted them at decision time, and refers to the Service as it
// was then.
func TestDueEventRender(t *testing.T) {
	v4, v6 := netip.MustParseAddr("198.51.100.10"), netip.MustParseAddr("2001:db8::a")
	tests := []struct {
		e                 dueEvent
		typ, reason, want string
	}{
		{dueEvent{kind: dueAssigned, ips: []netip.Addr{v4, v6}}, corev1.EventTypeNormal, EventIPAllocated,
			`Assigned IP ["198.51.100.10" "2001:db8::a"]`},
		{dueEvent{kind: dueCleared, ips: []netip.Addr{v6}, text: "the Service is no longer a LoadBalancer with a ClusterIP"},
			corev1.EventTypeNormal, EventClearAssignment,
			`Cleared IP ["2001:db8::a"]: the Service is no longer a LoadBalancer with a ClusterIP`},
		{dueEvent{kind: duePoolNotAdvertised, ips: []netip.Addr{v4}, text: "pool-a"}, corev1.EventTypeWarning, EventPoolNotAdvertised,
			`IP ["198.51.100.10"] comes from IPAddressPool "pool-a", which no L2Advertisement or BGPAdvertisement selects: no node announces it`},
		{dueEvent{kind: dueDeprecated, text: "Service uses deprecated annotations"}, corev1.EventTypeWarning, EventDeprecatedAnnotation,
			"Service uses deprecated annotations"},
		{dueEvent{kind: dueFailed, text: "no available IPs"}, corev1.EventTypeWarning, EventAllocationFailed, "no available IPs"},
	}
	for _, tt := range tests {
		typ, reason, msg := tt.e.render()
		if typ != tt.typ || reason != tt.reason || msg != tt.want {
			t.Errorf("kind %d: render = %q, %q, %q; want %q, %q, %q", tt.e.kind, typ, reason, msg, tt.typ, tt.reason, tt.want)
		}
	}

	c := &Controller{deferred: map[string][]dueEvent{}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "u-1", ResourceVersion: "41"}}
	c.later("ns/web", svc, dueEvent{kind: dueAssigned, ips: []netip.Addr{v4}})
	svc.ResourceVersion = "42"
	c.later("ns/web", svc, dueEvent{kind: dueFailed, text: "x"})
	evs := c.deferred["ns/web"]
	if len(evs) != 2 || evs[0].kind != dueAssigned || evs[1].kind != dueFailed {
		t.Fatalf("deferred = %+v, want the two events in order", evs)
	}
	want := corev1.ObjectReference{APIVersion: "v1", Kind: "Service", Namespace: "ns", Name: "web", UID: "u-1", ResourceVersion: "41"}
	if got := *evs[0].ref("ns/web"); got != want {
		t.Errorf("ref = %+v, want %+v", got, want)
	}
	if got := evs[1].ref("ns/web").ResourceVersion; got != "42" {
		t.Errorf("second event's resourceVersion %q, want 42", got)
	}
}

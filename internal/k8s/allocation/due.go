package allocation

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// dueKind is which event a dueEvent is.
type dueKind uint8

const (
	// dueAssigned is IPAllocated: Assigned IP ["a"].
	dueAssigned dueKind = iota
	// dueCleared is ClearAssignment: Cleared IP ["a"]: <text>.
	dueCleared
	// duePoolNotAdvertised is the PoolNotAdvertised warning; text is the
	// pool.
	duePoolNotAdvertised
	// dueDeprecated is the deprecatedAnnotation warning; text is its
	// message.
	dueDeprecated
	// dueFailed is the AllocationFailed warning; text is its message.
	dueFailed
)

// dueEvent is an event due on a Service, waiting for the low-priority
// queue: which event, the data its message is rendered from when it is
// written (render), and the Service's identity when it was decided. A burst
// of 10,000 Services keeps 10,000 of them until the recorder has written
// them at the API server's pace, so it holds no formatted message or
// object reference of its own: ips is the slice the decision already had
// (not copied), uid and rv are the Service's strings.
type dueEvent struct {
	kind dueKind
	// ips are the addresses the message names.
	ips []netip.Addr
	// text is the rest of the message (dueKind says which).
	text string
	// uid and rv are the Service's UID and resourceVersion the event is
	// about (its involvedObject).
	uid types.UID
	rv  string
}

// render returns the event's type, reason and message.
func (e *dueEvent) render() (typ, reason, msg string) {
	switch e.kind {
	case dueAssigned:
		return corev1.EventTypeNormal, EventIPAllocated, fmt.Sprintf("Assigned IP %q", ipStrings(e.ips))
	case dueCleared:
		return corev1.EventTypeNormal, EventClearAssignment, fmt.Sprintf("Cleared IP %q: %s", ipStrings(e.ips), e.text)
	case duePoolNotAdvertised:
		return corev1.EventTypeWarning, EventPoolNotAdvertised,
			fmt.Sprintf("IP %q comes from IPAddressPool %q, which no L2Advertisement or BGPAdvertisement selects: no node announces it", ipStrings(e.ips), e.text)
	case dueDeprecated:
		return corev1.EventTypeWarning, EventDeprecatedAnnotation, e.text
	default:
		return corev1.EventTypeWarning, EventAllocationFailed, e.text
	}
}

// ref returns the reference of the Service key the event is about.
func (e *dueEvent) ref(key string) *corev1.ObjectReference {
	k := splitKey(key)
	return &corev1.ObjectReference{
		APIVersion: "v1", Kind: "Service", Namespace: k.Namespace, Name: k.Name,
		UID: e.uid, ResourceVersion: e.rv,
	}
}

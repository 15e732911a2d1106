// Package eventrec gives the controller and the speaker their Kubernetes
// event recorder, and names the component their events come from.
//
// Both components record core/v1 Events through client-go's tools/record
// broadcaster (the manager's, so that it is flushed and stopped after
// everything else), as MetalLB's components do. Its correlator keeps
// bounded state: three LRU caches of 4,096 entries each (client-go's
// maxLruCacheEntries), so the memory a component spends on events does not
// grow with the number of Services. client-go's events.k8s.io/v1 broadcaster
// (tools/events), which the controller used before, keeps a deep copy of
// every event it sent for 6 to 12 minutes, with no bound on their number:
// about 1.9 KiB per Service in a burst of 10,000 new Services
// (docs/performance.md).
//
// What the correlator does with events, per component:
//
//   - Identical events (object, type, reason and message) are one Event
//     whose count grows, while the first is still in the LRU cache.
//   - More than 10 events on one object with the same type and reason but
//     different messages within 10 minutes are written as one Event whose
//     message starts with "(combined from similar events): ".
//   - At most 25 events per object and type are sent at once; after that
//     one more every 5 minutes, and the others are dropped.
//   - Events are sent one at a time; up to 1,000 wait, and more are
//     dropped without a log line.
//
// The Events carry the component as source.component and
// reportingController (the "From" column of kubectl describe); their
// reportingInstance and action are empty. Writing them needs create and
// patch on core/v1 events, nothing in events.k8s.io.
package eventrec

import (
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

// The component names Herald's events carry: MetalLB's, so that what MetalLB
// users filter on (kubectl get events --field-selector
// source=metallb-controller or reportingComponent=metallb-speaker, the "From"
// column of kubectl describe) keeps working (docs/migrating-from-metallb.md,
// "Events and log reasons"). Herald's own objects are named herald-*.
const (
	// Controller is the controller's component name.
	Controller = "metallb-controller"
	// Speaker is the speakers' component name.
	Speaker = "metallb-speaker"
)

// Recorder emits an Event about object: client-go's record.EventRecorder
// Eventf. eventtype is corev1.EventTypeNormal or corev1.EventTypeWarning;
// the message is messageFmt formatted with args (fmt.Sprintf). object is a
// Kubernetes object whose kind the recorder's scheme knows, or a
// *corev1.ObjectReference; an Event is never refused by an error returned to
// the caller (a failure is logged).
type Recorder interface {
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any)
}

// For returns the recorder of mgr (a controller-runtime manager) that
// records core/v1 Events from component (Controller or Speaker).
func For(mgr recorder.Provider, component string) Recorder {
	// GetEventRecorderFor is deprecated in favour of GetEventRecorder,
	// whose events.k8s.io/v1 broadcaster keeps every event it sent (see
	// the package doc). If controller-runtime drops it, build the
	// broadcaster here with record.NewBroadcaster, as controller/leader.go
	// does for the leader election's events.
	return mgr.GetEventRecorderFor(component) //nolint:staticcheck // core/v1 recorder: bounded state (package doc)
}

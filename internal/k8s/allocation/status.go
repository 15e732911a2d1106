package allocation

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/internal/ipam"
)

// ConditionType is the Service status condition the controller maintains.
const ConditionType = "herald.io/IPAllocated"

// Condition reasons: ReasonAllocated when the Service holds its IPs, one
// CamelCase word per failure kind otherwise.
const (
	ReasonAllocated            = "IPAllocated"
	ReasonNoPoolMatches        = "NoPoolMatches"
	ReasonPoolExhausted        = "PoolExhausted"
	ReasonSharingConflict      = "SharingConflict"
	ReasonIPInUse              = "IPInUse"
	ReasonRequestedIPNotInPool = "RequestedIPNotInPool"
	ReasonFamilyUnavailable    = "FamilyUnavailable"
	ReasonUnknownPool          = "UnknownPool"
	ReasonInvalidRequest       = "InvalidRequest"
	ReasonNotEnoughClusterIPs  = "NotEnoughClusterIPs"
	ReasonImportConflict       = "ImportConflict"
	ReasonInternalError        = "InternalError"
)

// Event reasons, as MetalLB's controller emits them.
const (
	EventIPAllocated          = "IPAllocated"
	EventAllocationFailed     = "AllocationFailed"
	EventClearAssignment      = "ClearAssignment"
	EventDeprecatedAnnotation = "deprecatedAnnotation"
	// EventPoolNotAdvertised (Herald's) warns that the address came from a
	// pool no L2Advertisement or BGPAdvertisement selects: nothing
	// announces it.
	EventPoolNotAdvertised = "PoolNotAdvertised"
	// EventStatusWriteFailed (Herald's, Warning) reports a status write
	// the API server refused for another reason than a concurrent change
	// (an admission webhook or policy, RBAC), once per distinct error.
	EventStatusWriteFailed = "StatusWriteFailed"
)

// ReasonFor maps an allocation error to the condition reason.
func ReasonFor(err error) string {
	for _, r := range []struct {
		err    error
		reason string
	}{
		{ErrNotEnoughClusterIPs, ReasonNotEnoughClusterIPs},
		{ipam.ErrSharingConflict, ReasonSharingConflict},
		{ipam.ErrIPInUse, ReasonIPInUse},
		{ipam.ErrNoPoolMatches, ReasonNoPoolMatches},
		{ipam.ErrPoolExhausted, ReasonPoolExhausted},
		{ipam.ErrRequestedIPNotInPool, ReasonRequestedIPNotInPool},
		{ipam.ErrFamilyUnavailable, ReasonFamilyUnavailable},
		{ipam.ErrUnknownPool, ReasonUnknownPool},
		{ipam.ErrInvalidRequest, ReasonInvalidRequest},
	} {
		if errors.Is(err, r.err) {
			return r.reason
		}
	}
	return ReasonInvalidRequest
}

// desiredCondition returns the condition to write, keeping the transition
// time of an existing condition with the same status.
func desiredCondition(s *corev1.Service, ok bool, reason, msg string) metav1.Condition {
	cond := metav1.Condition{
		Type:               ConditionType,
		Status:             metav1.ConditionFalse,
		Reason:             reason,
		Message:            msg,
		ObservedGeneration: s.Generation,
		LastTransitionTime: metav1.Now(),
	}
	if ok {
		cond.Status = metav1.ConditionTrue
	}
	if old := meta.FindStatusCondition(s.Status.Conditions, ConditionType); old != nil && old.Status == cond.Status {
		cond.LastTransitionTime = old.LastTransitionTime
	}
	return cond
}

// statusUpToDate reports whether s already shows ips and cond.
func statusUpToDate(s *corev1.Service, ips []netip.Addr, cond *metav1.Condition) bool {
	if !slices.Equal(IngressIPs(s), ips) || len(s.Status.LoadBalancer.Ingress) != len(ips) {
		return false
	}
	old := meta.FindStatusCondition(s.Status.Conditions, ConditionType)
	if cond == nil {
		return old == nil
	}
	return old != nil && old.Status == cond.Status && old.Reason == cond.Reason &&
		old.Message == cond.Message && old.ObservedGeneration == cond.ObservedGeneration
}

// statusPatch builds a strategic-merge patch of the status subresource that
// sets the ingress list to ips and our condition to cond (other conditions
// are kept: Service conditions merge by type). A nil cond deletes ours. A
// non-nil pool also sets the pool annotation to *pool ("" removes it): the
// API server keeps the metadata of a services/status write, so the
// annotation needs no write of its own. A non-empty resourceVersion makes
// it a precondition: the API server refuses the patch with 409 Conflict if
// the Service has changed since.
func statusPatch(resourceVersion string, ips []netip.Addr, cond *metav1.Condition, pool *string) ([]byte, error) {
	var p patchBody
	if len(ips) > 0 {
		p.Status.LoadBalancer.Ingress = make([]patchIngress, len(ips))
		for i, ip := range ips {
			p.Status.LoadBalancer.Ingress[i] = patchIngress{IP: ip.String(), IPMode: string(corev1.LoadBalancerIPModeVIP)}
		}
	}
	if cond != nil {
		p.Status.Conditions[0] = cond
	} else {
		p.Status.Conditions[0] = patchDeleteCondition{Patch: "delete", Type: ConditionType}
	}
	if resourceVersion != "" || pool != nil {
		p.Metadata = &patchMeta{ResourceVersion: resourceVersion}
		if pool != nil {
			p.Metadata.Annotations = &patchPoolAnnotation{}
			if *pool != "" {
				p.Metadata.Annotations.Pool = pool
			}
		}
	}
	b, err := json.Marshal(&p)
	if err != nil {
		return nil, fmt.Errorf("build status patch: %w", err)
	}
	return b, nil
}

// patchBody is the JSON document statusPatch writes. Its types encode as
// maps of the same keys would (keys in sorted order), without building
// the maps: the patch is built once per status write.
type patchBody struct {
	Metadata *patchMeta  `json:"metadata,omitempty"`
	Status   patchStatus `json:"status"`
}

type patchMeta struct {
	Annotations     *patchPoolAnnotation `json:"annotations,omitempty"`
	ResourceVersion string               `json:"resourceVersion,omitempty"`
}

// patchPoolAnnotation sets the pool annotation; a nil Pool (null) removes
// it.
type patchPoolAnnotation struct {
	Pool *string `json:"metallb.io/ip-allocated-from-pool"`
}

type patchStatus struct {
	// Conditions holds our condition (*metav1.Condition) or the
	// directive deleting it (patchDeleteCondition).
	Conditions   [1]any  `json:"conditions"`
	LoadBalancer patchLB `json:"loadBalancer"`
}

// patchLB's nil Ingress (null) empties the list.
type patchLB struct {
	Ingress []patchIngress `json:"ingress"`
}

type patchIngress struct {
	IP     string `json:"ip"`
	IPMode string `json:"ipMode"`
}

// patchDeleteCondition is the strategic-merge directive deleting the
// condition of Type.
type patchDeleteCondition struct {
	Patch string `json:"$patch"`
	Type  string `json:"type"`
}

// ipStrings renders ips for event messages (MetalLB: Assigned IP ["a" "b"]).
func ipStrings(ips []netip.Addr) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}

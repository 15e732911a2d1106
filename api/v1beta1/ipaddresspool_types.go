package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IPAddressPoolSpec defines a set of IP addresses Herald may assign to
// Services of type LoadBalancer.
type IPAddressPoolSpec struct {
	// Addresses lists the addresses of the pool. Each entry is either a CIDR
	// ("198.51.100.0/24", "2001:db8::/120") or an inclusive range
	// "start-end" of the same family ("198.51.100.10-198.51.100.20"); ranges
	// are split into the smallest covering set of CIDRs and surrounding
	// whitespace is ignored. The start of a range must not be greater than
	// its end. CIDRs must not overlap, neither within a pool nor across pools.
	// +kubebuilder:validation:MinItems=1
	Addresses []string `json:"addresses"`

	// AutoAssign says whether Herald may pick this pool on its own. When
	// false, the pool is used only for Services that request it explicitly
	// (pool annotation or a requested IP). Defaults to true.
	// +optional
	// +kubebuilder:default:=true
	AutoAssign *bool `json:"autoAssign,omitempty"`

	// AvoidBuggyIPs skips IPv4 addresses ending in .0 or .255, which some
	// old consumer equipment drops. It also applies to explicitly requested
	// IPs. IPv6 addresses are not affected. Defaults to false.
	// +optional
	// +kubebuilder:default:=false
	AvoidBuggyIPs bool `json:"avoidBuggyIPs,omitempty"`

	// ServiceAllocation restricts and orders which Services get addresses
	// from this pool. When it is set but all of its lists are empty, the pool
	// matches every Service.
	// +optional
	ServiceAllocation *ServiceAllocation `json:"serviceAllocation,omitempty"`
}

// ServiceAllocation restricts a pool to some namespaces and Services and
// gives it a priority among the pools that match a Service.
type ServiceAllocation struct {
	// Priority orders the matching pools: a lower value is tried first.
	// 0 (unset) ranks after every pool with a priority greater than 0.
	// +optional
	Priority int `json:"priority,omitempty"`

	// Namespaces pins the pool to Services in these namespaces. Duplicate
	// names are rejected.
	// +optional
	Namespaces []string `json:"namespaces,omitempty"`

	// NamespaceSelectors pins the pool to Services in namespaces whose labels
	// match at least one of the selectors.
	// +optional
	NamespaceSelectors []metav1.LabelSelector `json:"namespaceSelectors,omitempty"`

	// ServiceSelectors pins the pool to Services whose labels match at least
	// one of the selectors.
	// +optional
	ServiceSelectors []metav1.LabelSelector `json:"serviceSelectors,omitempty"`
}

// IPAddressPoolStatus reports how much of the pool is in use. The controller
// writes it; users should not.
type IPAddressPoolStatus struct {
	// AssignedIPv4 is the number of IPv4 addresses of the pool assigned to
	// Services.
	AssignedIPv4 int64 `json:"assignedIPv4"`

	// AssignedIPv6 is the number of IPv6 addresses of the pool assigned to
	// Services.
	AssignedIPv6 int64 `json:"assignedIPv6"`

	// AvailableIPv4 is the number of IPv4 addresses of the pool still free.
	AvailableIPv4 int64 `json:"availableIPv4"`

	// AvailableIPv6 is the number of IPv6 addresses of the pool still free
	// (saturated at the int64 maximum for very large pools).
	AvailableIPv6 int64 `json:"availableIPv6"`
}

// IPAddressPool is a pool of addresses Herald assigns to Services of type
// LoadBalancer. It must live in Herald's namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Auto Assign",type=boolean,JSONPath=`.spec.autoAssign`
// +kubebuilder:printcolumn:name="Avoid Buggy IPs",type=boolean,JSONPath=`.spec.avoidBuggyIPs`
// +kubebuilder:printcolumn:name="Addresses",type=string,JSONPath=`.spec.addresses`
type IPAddressPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state of the IPAddressPool.
	Spec IPAddressPoolSpec `json:"spec"`
	// Status is the observed state, written by Herald (see IPAddressPoolStatus).
	Status IPAddressPoolStatus `json:"status,omitempty"`
}

// IPAddressPoolList is a list of IPAddressPool.
//
// +kubebuilder:object:root=true
type IPAddressPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the IPAddressPool objects.
	Items []IPAddressPool `json:"items"`
}

package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// L2AdvertisementSpec says which pools are announced at layer 2 (gratuitous
// ARP, RFC 826, for IPv4; unsolicited neighbor advertisements, RFC 4861, for
// IPv6), from which nodes and on which interfaces.
type L2AdvertisementSpec struct {
	// IPAddressPools selects pools by name. When neither this nor
	// IPAddressPoolSelectors is set, the advertisement applies to all pools.
	// +optional
	IPAddressPools []string `json:"ipAddressPools,omitempty"`

	// IPAddressPoolSelectors selects pools whose labels match at least one
	// selector. A pool selected both by name and by label is attached once.
	// +optional
	IPAddressPoolSelectors []metav1.LabelSelector `json:"ipAddressPoolSelectors,omitempty"`

	// NodeSelectors limits the nodes that may announce the addresses to
	// those matching at least one selector. Empty means all nodes.
	// +optional
	NodeSelectors []metav1.LabelSelector `json:"nodeSelectors,omitempty"`

	// Interfaces limits announcements to these network interface names of
	// the node. Empty means every eligible interface. Names are not
	// validated; the speaker raises a warning event when none of them exists
	// on its node.
	// +optional
	Interfaces []string `json:"interfaces,omitempty"`

	// ServiceSelectors limits the advertisement to Services whose labels
	// match at least one selector. Empty means all Services.
	// +optional
	ServiceSelectors []metav1.LabelSelector `json:"serviceSelectors,omitempty"`

	// PreferredNodeSelectors are soft preferences for the choice of the
	// announcing node. A node's score is the sum of the weights of the
	// selectors it matches, summed over every advertisement of the pool; the
	// eligible node with the highest score announces. Preferences only rank
	// nodes that NodeSelectors already allows.
	// +optional
	PreferredNodeSelectors []PreferredNodeSelector `json:"preferredNodeSelectors,omitempty"`
}

// PreferredNodeSelector is a weighted node preference of an L2Advertisement.
type PreferredNodeSelector struct {
	// Weight added to the score of a node that matches Preference, 1..100.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Weight int32 `json:"weight"`

	// Preference selects the nodes that get Weight.
	Preference metav1.LabelSelector `json:"preference"`
}

// L2AdvertisementStatus is empty; it exists so MetalLB objects carrying a
// status apply unchanged.
type L2AdvertisementStatus struct{}

// L2Advertisement announces the addresses of some pools at layer 2.
//
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="IPAddressPools",type=string,JSONPath=`.spec.ipAddressPools`
// +kubebuilder:printcolumn:name="IPAddressPool Selectors",type=string,JSONPath=`.spec.ipAddressPoolSelectors`
// +kubebuilder:printcolumn:name="Interfaces",type=string,JSONPath=`.spec.interfaces`
// +kubebuilder:printcolumn:name="Node Selectors",type=string,JSONPath=`.spec.nodeSelectors`,priority=10
type L2Advertisement struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state of the L2Advertisement.
	Spec L2AdvertisementSpec `json:"spec,omitempty"`
	// Status is the observed state, written by Herald (see L2AdvertisementStatus).
	Status L2AdvertisementStatus `json:"status,omitempty"`
}

// L2AdvertisementList is a list of L2Advertisement.
//
// +kubebuilder:object:root=true
type L2AdvertisementList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the L2Advertisement objects.
	Items []L2Advertisement `json:"items"`
}

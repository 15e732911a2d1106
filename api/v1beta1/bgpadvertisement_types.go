package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BGPAdvertisementSpec says how the addresses of some pools are announced to
// BGP peers (RFC 4271): with which prefix length, attributes and from which
// nodes.
//
// +kubebuilder:validation:XValidation:rule="!has(self.serviceSelectors) || size(self.serviceSelectors) == 0 || ((!has(self.aggregationLength) || self.aggregationLength == 32) && (!has(self.aggregationLengthV6) || self.aggregationLengthV6 == 128))",message="serviceSelectors cannot be combined with an aggregationLength other than 32 or an aggregationLengthV6 other than 128"
type BGPAdvertisementSpec struct {
	// AggregationLength is the prefix length announced for IPv4 addresses,
	// 1..32, default 32 (one /32 per Service address). A shorter length
	// announces the covering prefix instead ("roll-up"); it must be at least
	// the prefix length of every CIDR of the selected pools.
	// +optional
	// +kubebuilder:default:=32
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=32
	AggregationLength *int32 `json:"aggregationLength,omitempty"`

	// AggregationLengthV6 is the prefix length announced for IPv6 addresses,
	// 1..128, default 128. The same rule as AggregationLength applies.
	// +optional
	// +kubebuilder:default:=128
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=128
	AggregationLengthV6 *int32 `json:"aggregationLengthV6,omitempty"`

	// LocalPref is the LOCAL_PREF attribute (RFC 4271 §5.1.5) of the
	// announced routes, 0..4294967295. It is sent only to iBGP peers (peers
	// whose peerASN equals myASN). 0 means the attribute is not set.
	// +optional
	// +kubebuilder:validation:Maximum=4294967295
	// +kubebuilder:validation:Format=int64
	LocalPref uint32 `json:"localPref,omitempty"`

	// Communities are attached to the announced routes. Each entry is a
	// standard community "65000:100" (two 16-bit numbers, RFC 1997), a large
	// community "large:65000:1:2" (three 32-bit numbers, RFC 8092), or the
	// name of an alias defined in a Community object. Duplicates are
	// rejected.
	// +optional
	Communities []string `json:"communities,omitempty"`

	// IPAddressPools selects pools by name. When neither this nor
	// IPAddressPoolSelectors is set, the advertisement applies to all pools.
	// +optional
	IPAddressPools []string `json:"ipAddressPools,omitempty"`

	// IPAddressPoolSelectors selects pools whose labels match at least one
	// selector.
	// +optional
	IPAddressPoolSelectors []metav1.LabelSelector `json:"ipAddressPoolSelectors,omitempty"`

	// NodeSelectors limits the nodes that announce the routes (and so act as
	// next hop) to those matching at least one selector. Empty means all
	// nodes.
	// +optional
	NodeSelectors []metav1.LabelSelector `json:"nodeSelectors,omitempty"`

	// Peers limits the announcement to the BGPPeer objects with these names.
	// Empty means all peers.
	// +optional
	Peers []string `json:"peers,omitempty"`

	// ServiceSelectors limits the advertisement to Services whose labels
	// match at least one selector. It cannot be combined with a non-default
	// aggregation length.
	// +optional
	ServiceSelectors []metav1.LabelSelector `json:"serviceSelectors,omitempty"`
}

// BGPAdvertisementStatus is empty; it exists so MetalLB objects carrying a
// status apply unchanged.
type BGPAdvertisementStatus struct{}

// BGPAdvertisement announces the addresses of some pools to BGP peers.
//
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="IPAddressPools",type=string,JSONPath=`.spec.ipAddressPools`
// +kubebuilder:printcolumn:name="IPAddressPool Selectors",type=string,JSONPath=`.spec.ipAddressPoolSelectors`
// +kubebuilder:printcolumn:name="Peers",type=string,JSONPath=`.spec.peers`
// +kubebuilder:printcolumn:name="Node Selectors",type=string,JSONPath=`.spec.nodeSelectors`,priority=10
type BGPAdvertisement struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state of the BGPAdvertisement.
	Spec BGPAdvertisementSpec `json:"spec,omitempty"`
	// Status is the observed state, written by Herald (see BGPAdvertisementStatus).
	Status BGPAdvertisementStatus `json:"status,omitempty"`
}

// BGPAdvertisementList is a list of BGPAdvertisement.
//
// +kubebuilder:object:root=true
type BGPAdvertisementList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the BGPAdvertisement objects.
	Items []BGPAdvertisement `json:"items"`
}

package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CommunitySpec defines named BGP community values.
type CommunitySpec struct {
	// Communities are the aliases. Names must be unique across all Community
	// objects.
	// +optional
	Communities []CommunityAlias `json:"communities,omitempty"`
}

// CommunityAlias gives a name to a BGP community value.
type CommunityAlias struct {
	// Name is the alias used in BGPAdvertisement.communities.
	Name string `json:"name,omitempty"`

	// Value is a standard community "65000:100" (two 16-bit numbers,
	// RFC 1997) or a large community "large:65000:1:2" (three 32-bit
	// numbers, RFC 8092).
	Value string `json:"value,omitempty"`
}

// CommunityStatus is empty; it exists so MetalLB objects carrying a status
// apply unchanged.
type CommunityStatus struct{}

// Community defines aliases for BGP communities used by BGPAdvertisements.
//
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
type Community struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state of the Community.
	Spec CommunitySpec `json:"spec,omitempty"`
	// Status is the observed state, written by Herald (see CommunityStatus).
	Status CommunityStatus `json:"status,omitempty"`
}

// CommunityList is a list of Community.
//
// +kubebuilder:object:root=true
type CommunityList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the Community objects.
	Items []Community `json:"items"`
}

// Package v1beta1 contains the metallb.io/v1beta1 API types served by Herald:
// IPAddressPool, L2Advertisement, BGPAdvertisement, BFDProfile, Community,
// ServiceL2Status, ServiceBGPStatus, ConfigurationState, and the older BGPPeer
// shape. v1beta1 is the storage version of every kind except BGPPeer, whose
// storage version is metallb.io/v1beta2.
//
// +kubebuilder:object:generate=true
// +groupName=metallb.io
package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of the types in this package.
var GroupVersion = schema.GroupVersion{Group: "metallb.io", Version: "v1beta1"}

// SchemeBuilder registers the types of this package with a runtime.Scheme.
var SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

// AddToScheme adds every kind of this package (and its List) to a scheme.
var AddToScheme = SchemeBuilder.AddToScheme

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&IPAddressPool{}, &IPAddressPoolList{},
		&L2Advertisement{}, &L2AdvertisementList{},
		&BGPAdvertisement{}, &BGPAdvertisementList{},
		&BGPPeer{}, &BGPPeerList{},
		&BFDProfile{}, &BFDProfileList{},
		&Community{}, &CommunityList{},
		&ServiceL2Status{}, &ServiceL2StatusList{},
		&ServiceBGPStatus{}, &ServiceBGPStatusList{},
		&ConfigurationState{}, &ConfigurationStateList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

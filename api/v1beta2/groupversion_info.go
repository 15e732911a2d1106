// Package v1beta2 contains the metallb.io/v1beta2 API types served by Herald:
// BGPPeer, whose storage version this is. v1beta2 is the conversion hub for
// BGPPeer (see api/v1beta1 for the older shape).
//
// +kubebuilder:object:generate=true
// +groupName=metallb.io
package v1beta2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of the types in this package.
var GroupVersion = schema.GroupVersion{Group: "metallb.io", Version: "v1beta2"}

// SchemeBuilder registers the types of this package with a runtime.Scheme.
var SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

// AddToScheme adds every kind of this package (and its List) to a scheme.
var AddToScheme = SchemeBuilder.AddToScheme

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &BGPPeer{}, &BGPPeerList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// Package v1alpha1 contains Herald's own API types, group herald.io, version
// v1alpha1: kinds that MetalLB does not have. Today that is BGPSessionState,
// the state of one BGP session of one node, written by that node's speaker.
//
// These kinds live outside metallb.io on purpose: a kind Herald added to
// metallb.io could later collide with a kind of the same name that MetalLB
// adds with another schema (both CRDs would be named <plural>.metallb.io),
// and frrk8s.metallb.io belongs to frr-k8s. docs/bgp.md explains the choice.
//
// +kubebuilder:object:generate=true
// +groupName=herald.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of the types in this package.
var GroupVersion = schema.GroupVersion{Group: "herald.io", Version: "v1alpha1"}

// SchemeBuilder registers the types of this package with a runtime.Scheme.
var SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

// AddToScheme adds every kind of this package (and its List) to a scheme.
var AddToScheme = SchemeBuilder.AddToScheme

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&BGPSessionState{}, &BGPSessionStateList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

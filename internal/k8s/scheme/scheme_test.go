package scheme

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestNewKnowsEveryGroup(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	for _, gvk := range []schema.GroupVersionKind{
		corev1.SchemeGroupVersion.WithKind("Service"),
		{Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSlice"},
		{Group: "metallb.io", Version: "v1beta1", Kind: "IPAddressPool"},
		{Group: "metallb.io", Version: "v1beta1", Kind: "ServiceL2Status"},
		{Group: "metallb.io", Version: "v1beta1", Kind: "ConfigurationState"},
		{Group: "metallb.io", Version: "v1beta2", Kind: "BGPPeer"},
		{Group: "herald.io", Version: "v1alpha1", Kind: "BGPSessionState"},
	} {
		if !s.Recognizes(gvk) {
			t.Errorf("scheme does not know %s", gvk)
		}
	}
}

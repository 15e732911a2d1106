package v1beta1

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/api/v1beta2"
)

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func TestBGPPeerRoundTripFromV1beta1(t *testing.T) {
	tests := []struct {
		name string
		in   BGPPeer
	}{
		{"minimal", BGPPeer{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
			Spec:       BGPPeerSpec{MyASN: 64500, PeerASN: 64501, PeerAddress: "198.51.100.1"},
		}},
		{"full", BGPPeer{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: map[string]string{"a": "b"}, Annotations: map[string]string{"x": "y"}},
			Spec: BGPPeerSpec{
				MyASN: 4200000000, PeerASN: 64501, PeerAddress: "2001:db8::1", SourceAddress: "2001:db8::2",
				PeerPort: 1179, HoldTime: dur(9 * time.Second), KeepaliveTime: dur(3 * time.Second),
				RouterID: "198.51.100.9", Password: "secret", BFDProfile: "fast", EBGPMultiHop: true,
				NodeSelectors: []NodeSelector{
					{MatchLabels: map[string]string{"rack": "r1"}},
					{MatchExpressions: []MatchExpression{{Key: "zone", Operator: "In", Values: []string{"a", "b"}}, {Key: "edge", Operator: "Exists"}}},
				},
			},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hub v1beta2.BGPPeer
			in := tt.in.DeepCopy()
			if err := in.ConvertTo(&hub); err != nil {
				t.Fatalf("ConvertTo: %v", err)
			}
			if !equality.Semantic.DeepEqual(in, &tt.in) {
				t.Fatalf("ConvertTo modified its receiver")
			}
			if hub.Spec.PeerAddress != tt.in.Spec.PeerAddress || len(hub.Spec.NodeSelectors) != len(tt.in.Spec.NodeSelectors) {
				t.Fatalf("hub lost fields: %+v", hub.Spec)
			}
			if _, ok := hub.Annotations[AnnotationV1beta2Fields]; ok {
				t.Fatalf("hub carries %s", AnnotationV1beta2Fields)
			}
			var back BGPPeer
			if err := back.ConvertFrom(&hub); err != nil {
				t.Fatalf("ConvertFrom: %v", err)
			}
			if !equality.Semantic.DeepEqual(back, tt.in) {
				t.Fatalf("round trip differs:\n got  %+v\n want %+v", back, tt.in)
			}
		})
	}
}

func TestBGPPeerRoundTripFromV1beta2(t *testing.T) {
	tests := []struct {
		name          string
		in            v1beta2.BGPPeer
		wantAnnotated bool
	}{
		{"v1beta1 fields only", v1beta2.BGPPeer{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
			Spec: v1beta2.BGPPeerSpec{MyASN: 64500, PeerASN: 64501, PeerAddress: "198.51.100.1", PeerPort: 179,
				NodeSelectors: []metav1.LabelSelector{{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"v"}}}}}},
		}, false},
		{"every v1beta2-only field", v1beta2.BGPPeer{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Annotations: map[string]string{"keep": "me"}},
			Spec: v1beta2.BGPPeerSpec{
				MyASN: 64500, DynamicASN: v1beta2.ExternalASNMode, LocalASN: 64999, Interface: "eth1",
				ConnectTime: dur(10 * time.Second), PasswordSecret: &corev1.SecretReference{Name: "s", Namespace: "ns"},
				EnableGracefulRestart: true, VRF: "red", DisableMP: true, DualStackAddressFamily: true,
				HoldTime: dur(90 * time.Second),
			},
		}, true},
		{"one v1beta2-only field", v1beta2.BGPPeer{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
			Spec:       v1beta2.BGPPeerSpec{MyASN: 64500, PeerASN: 64500, PeerAddress: "198.51.100.1", VRF: "blue"},
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in.DeepCopy()
			var spoke BGPPeer
			if err := spoke.ConvertFrom(in); err != nil {
				t.Fatalf("ConvertFrom: %v", err)
			}
			if !equality.Semantic.DeepEqual(in, &tt.in) {
				t.Fatalf("ConvertFrom modified its source")
			}
			if _, ok := spoke.Annotations[AnnotationV1beta2Fields]; ok != tt.wantAnnotated {
				t.Fatalf("annotation %s present = %v, want %v", AnnotationV1beta2Fields, ok, tt.wantAnnotated)
			}
			var back v1beta2.BGPPeer
			if err := spoke.ConvertTo(&back); err != nil {
				t.Fatalf("ConvertTo: %v", err)
			}
			if !equality.Semantic.DeepEqual(back, tt.in) {
				t.Fatalf("round trip differs:\n got  %+v\n want %+v", back, tt.in)
			}
		})
	}
}

func TestBGPPeerConvertToBadAnnotation(t *testing.T) {
	p := BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{AnnotationV1beta2Fields: "{not json"}}}
	if err := p.ConvertTo(&v1beta2.BGPPeer{}); err == nil {
		t.Fatal("ConvertTo accepted a malformed annotation")
	}
}

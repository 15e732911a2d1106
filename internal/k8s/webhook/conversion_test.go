package webhook_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
)

// testBGPPeerV1beta1 checks that the shipped CRD serves BGPPeer
// metallb.io/v1beta1 (as MetalLB does) through the conversion webhook at
// /convert, with v1beta2 the storage version: a v1beta1 object (a GitOps
// repository's YAML) is stored, reads back unchanged as v1beta1 and as the
// equivalent v1beta2, and a v1beta2 object edited through v1beta1 keeps
// the fields v1beta1 cannot express. env's CRDs get their conversion
// webhook from envtest (pointing at the test's server), the rest is
// manifests/crds as shipped.
func testBGPPeerV1beta1(t *testing.T, c client.Client) {
	ctx := context.Background()
	defer deleteAll(t, c)

	// Every v1beta1 field Herald accepts (bfdProfile is refused by Herald's
	// validation, in both versions).
	oldSpec := v1beta1.BGPPeerSpec{
		MyASN:         64512,
		PeerASN:       64500,
		PeerAddress:   "198.51.100.1",
		SourceAddress: "198.51.100.10",
		PeerPort:      1790,
		HoldTime:      &metav1.Duration{Duration: 9 * time.Second},
		KeepaliveTime: &metav1.Duration{Duration: 3 * time.Second},
		RouterID:      "198.51.100.10",
		Password:      "s3cret",
		EBGPMultiHop:  true,
		NodeSelectors: []v1beta1.NodeSelector{{
			MatchLabels: map[string]string{"rack": "r1"},
			MatchExpressions: []v1beta1.MatchExpression{
				{Key: "zone", Operator: "In", Values: []string{"a", "b"}},
				{Key: "edge", Operator: "Exists"},
			},
		}},
	}
	old := &v1beta1.BGPPeer{
		ObjectMeta: metav1.ObjectMeta{Name: "gitops", Namespace: heraldNS, Labels: map[string]string{"repo": "infra"}, Annotations: map[string]string{"note": "v1beta1"}},
		Spec:       *oldSpec.DeepCopy(),
	}
	if err := c.Create(ctx, old); err != nil {
		t.Fatalf("create v1beta1 BGPPeer: %v", err)
	}

	// Read as v1beta2: the same peer.
	hub := &v1beta2.BGPPeer{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(old), hub); err != nil {
		t.Fatalf("get as v1beta2: %v", err)
	}
	wantHub := v1beta2.BGPPeerSpec{
		MyASN: 64512, PeerASN: 64500, PeerAddress: "198.51.100.1", SourceAddress: "198.51.100.10",
		PeerPort: 1790, HoldTime: oldSpec.HoldTime, KeepaliveTime: oldSpec.KeepaliveTime,
		RouterID: "198.51.100.10", Password: "s3cret", EBGPMultiHop: true,
		NodeSelectors: []metav1.LabelSelector{{
			MatchLabels: map[string]string{"rack": "r1"},
			MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "zone", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}},
				{Key: "edge", Operator: metav1.LabelSelectorOpExists},
			},
		}},
	}
	if !equality.Semantic.DeepEqual(hub.Spec, wantHub) {
		t.Errorf("v1beta1 peer read as v1beta2:\n  %+v\nwant\n  %+v", hub.Spec, wantHub)
	}
	if !equality.Semantic.DeepEqual(hub.Annotations, old.Annotations) || !equality.Semantic.DeepEqual(hub.Labels, old.Labels) {
		t.Errorf("v1beta2 metadata: labels %v annotations %v, want %v %v", hub.Labels, hub.Annotations, old.Labels, old.Annotations)
	}

	// And back as v1beta1: unchanged, no conversion annotation.
	back := &v1beta1.BGPPeer{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(old), back); err != nil {
		t.Fatalf("get as v1beta1: %v", err)
	}
	if !equality.Semantic.DeepEqual(back.Spec, oldSpec) {
		t.Errorf("v1beta1 round trip:\n  %+v\nwant\n  %+v", back.Spec, oldSpec)
	}
	if !equality.Semantic.DeepEqual(back.Annotations, old.Annotations) {
		t.Errorf("v1beta1 annotations after the round trip: %v, want %v", back.Annotations, old.Annotations)
	}

	// A v1beta2 peer with v1beta2-only fields, edited through v1beta1 (as
	// an older client or MetalLB's controller would), keeps those fields.
	modern := &v1beta2.BGPPeer{
		ObjectMeta: metav1.ObjectMeta{Name: "modern", Namespace: heraldNS},
		Spec: v1beta2.BGPPeerSpec{
			MyASN: 64512, PeerASN: 64501, PeerAddress: "203.0.113.1",
			ConnectTime: &metav1.Duration{Duration: 5 * time.Second}, EnableGracefulRestart: true,
			VRF: "red", DualStackAddressFamily: true,
		},
	}
	if err := c.Create(ctx, modern); err != nil {
		t.Fatalf("create v1beta2 BGPPeer: %v", err)
	}
	down := &v1beta1.BGPPeer{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(modern), down); err != nil {
		t.Fatalf("get v1beta2 peer as v1beta1: %v", err)
	}
	if a := down.Annotations[v1beta1.AnnotationV1beta2Fields]; !strings.Contains(a, `"vrf":"red"`) {
		t.Errorf("v1beta1 view lacks the %s annotation: %q", v1beta1.AnnotationV1beta2Fields, a)
	}
	down.Spec.HoldTime = &metav1.Duration{Duration: 30 * time.Second}
	if err := c.Update(ctx, down); err != nil {
		t.Fatalf("update through v1beta1: %v", err)
	}
	up := &v1beta2.BGPPeer{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(modern), up); err != nil {
		t.Fatalf("get as v1beta2 after the v1beta1 update: %v", err)
	}
	want := *modern.Spec.DeepCopy()
	want.PeerPort = 179 // the CRD default
	want.HoldTime = &metav1.Duration{Duration: 30 * time.Second}
	if !equality.Semantic.DeepEqual(up.Spec, want) {
		t.Errorf("v1beta2 peer after an edit through v1beta1:\n  %+v\nwant\n  %+v", up.Spec, want)
	}
	if _, ok := up.Annotations[v1beta1.AnnotationV1beta2Fields]; ok {
		t.Errorf("stored v1beta2 peer keeps the conversion annotation: %v", up.Annotations)
	}

	// A bad v1beta1 peer is judged by the v1beta2 webhook (matchPolicy
	// Equivalent) and refused with the object and field named.
	bad := &v1beta1.BGPPeer{
		ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: heraldNS},
		Spec:       v1beta1.BGPPeerSpec{MyASN: 64512, PeerASN: 64500, PeerAddress: "not-an-ip", PeerPort: 179},
	}
	err := c.Create(ctx, bad)
	if err == nil || !strings.Contains(err.Error(), "BGPPeer herald-system/bad") || !strings.Contains(err.Error(), "peerAddress") {
		t.Errorf("invalid v1beta1 peer: err = %v, want Herald's refusal naming BGPPeer herald-system/bad and peerAddress", err)
	}

	// A value the CRD schema lets through but the Go type does not
	// (holdTime is a string in the schema): the API server converts the
	// v1beta1 object before any admission webhook sees it, so the
	// conversion webhook's answer is what the user reads. It names the
	// object and the field, not just the decoder's error.
	bad1 := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta1", "kind": "BGPPeer",
		"metadata": map[string]any{"name": "bad-duration", "namespace": heraldNS},
		"spec":     map[string]any{"myASN": int64(64512), "peerASN": int64(64500), "peerAddress": "198.51.100.9", "holdTime": "abc"},
	}}
	err = c.Create(ctx, bad1)
	const wantDecode = `BGPPeer herald-system/bad-duration: spec.holdTime "abc": does not decode`
	if err == nil || !strings.Contains(err.Error(), wantDecode) {
		t.Errorf("v1beta1 peer with holdTime \"abc\": err = %v, want it to contain %q", err, wantDecode)
	}
}

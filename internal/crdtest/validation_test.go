package crdtest

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/testenv"
)

type obj = map[string]any

func raw(apiVersion, kind, ns, name string, spec obj) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: obj{
		"apiVersion": apiVersion, "kind": kind,
		"metadata": obj{"namespace": ns, "name": name},
	}}
	if spec != nil {
		u.Object["spec"] = spec
	}
	return u
}

// wantInvalid fails unless err is a 422 Invalid naming every part of want.
func wantInvalid(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: accepted, want rejection", what)
		return
	}
	if !apierrors.IsInvalid(err) {
		t.Errorf("%s: error %v, want Invalid", what, err)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: error %q does not mention %q", what, err, w)
		}
	}
}

func testRejects(ctx context.Context, t *testing.T, env *testenv.Env) {
	ns := env.Namespace(t)
	const b1, b2 = "metallb.io/v1beta1", "metallb.io/v1beta2"
	peer := func(extra obj) obj {
		s := obj{"myASN": 64512, "peerASN": 64513, "peerAddress": "198.51.100.1"}
		for k, v := range extra {
			s[k] = v
		}
		return s
	}
	l2pref := func(w int) obj {
		return obj{"preferredNodeSelectors": []any{obj{"weight": w, "preference": obj{"matchLabels": obj{"a": "b"}}}}}
	}
	tests := []struct {
		name     string
		u        *unstructured.Unstructured
		mentions []string
	}{
		{"peerPort 0", raw(b2, "BGPPeer", ns, "port0", peer(obj{"peerPort": 0})), []string{"spec.peerPort"}},
		{"peerPort 16385", raw(b2, "BGPPeer", ns, "port-big", peer(obj{"peerPort": 16385})), []string{"spec.peerPort"}},
		{"myASN 0", raw(b2, "BGPPeer", ns, "asn0", peer(obj{"myASN": 0})), []string{"spec.myASN"}},
		{"myASN above 2^32-1", raw(b2, "BGPPeer", ns, "asn-big", peer(obj{"myASN": int64(4294967296)})), []string{"spec.myASN"}},
		{"peerASN above 2^32-1", raw(b2, "BGPPeer", ns, "peerasn-big", peer(obj{"peerASN": int64(4294967296)})), []string{"spec.peerASN"}},
		{"myASN missing", raw(b2, "BGPPeer", ns, "noasn", obj{"peerASN": 1, "peerAddress": "198.51.100.1"}), []string{"spec.myASN"}},
		{"dynamicASN not in enum", raw(b2, "BGPPeer", ns, "dyn", peer(obj{"dynamicASN": "sometimes"})), []string{"spec.dynamicASN"}},
		{"connectTime below 1s", raw(b2, "BGPPeer", ns, "ct-small", peer(obj{"connectTime": "500ms"})), []string{"connectTime must be between 1s and 65535s"}},
		{"connectTime above 65535s", raw(b2, "BGPPeer", ns, "ct-big", peer(obj{"connectTime": "65536s"})), []string{"connectTime must be between 1s and 65535s"}},
		{"connectTime fractional", raw(b2, "BGPPeer", ns, "ct-frac", peer(obj{"connectTime": "1500ms"})), []string{"connectTime must be a whole number of seconds"}},
		{"weight 101", raw(b1, "L2Advertisement", ns, "w101", l2pref(101)), []string{"weight"}},
		{"weight 0", raw(b1, "L2Advertisement", ns, "w0", l2pref(0)), []string{"weight"}},
		{"pool without addresses", raw(b1, "IPAddressPool", ns, "empty", obj{"addresses": []any{}}), []string{"spec.addresses"}},
		{"pool without spec", raw(b1, "IPAddressPool", ns, "nospec", nil), []string{"spec"}},
		{"aggregationLength 0", raw(b1, "BGPAdvertisement", ns, "agg0", obj{"aggregationLength": 0}), []string{"spec.aggregationLength"}},
		{"aggregationLength 33", raw(b1, "BGPAdvertisement", ns, "agg33", obj{"aggregationLength": 33}), []string{"spec.aggregationLength"}},
		{"aggregationLengthV6 129", raw(b1, "BGPAdvertisement", ns, "agg129", obj{"aggregationLengthV6": 129}), []string{"spec.aggregationLengthV6"}},
		{"serviceSelectors with roll-up", raw(b1, "BGPAdvertisement", ns, "sel-agg",
			obj{"aggregationLength": 24, "serviceSelectors": []any{obj{"matchLabels": obj{"a": "b"}}}}), []string{"serviceSelectors cannot be combined"}},
		{"serviceSelectors with v6 roll-up", raw(b1, "BGPAdvertisement", ns, "sel-agg6",
			obj{"aggregationLengthV6": 64, "serviceSelectors": []any{obj{"matchLabels": obj{"a": "b"}}}}), []string{"serviceSelectors cannot be combined"}},
		{"BFD receiveInterval 9", raw(b1, "BFDProfile", ns, "rx", obj{"receiveInterval": 9}), []string{"spec.receiveInterval"}},
		{"BFD transmitInterval 60001", raw(b1, "BFDProfile", ns, "tx", obj{"transmitInterval": 60001}), []string{"spec.transmitInterval"}},
		{"BFD detectMultiplier 1", raw(b1, "BFDProfile", ns, "mult", obj{"detectMultiplier": 1}), []string{"spec.detectMultiplier"}},
		{"BFD echoInterval 9", raw(b1, "BFDProfile", ns, "echo", obj{"echoInterval": 9}), []string{"spec.echoInterval"}},
		{"BFD minimumTtl 255", raw(b1, "BFDProfile", ns, "ttl", obj{"minimumTtl": 255}), []string{"spec.minimumTtl"}},
	}
	for _, tt := range tests {
		err := env.Client.Create(ctx, tt.u, client.FieldValidation(metav1.FieldValidationStrict))
		wantInvalid(t, tt.name, err, tt.mentions...)
	}

	unknown := raw(b1, "IPAddressPool", ns, "unknown", obj{"addresses": []any{"198.51.100.0/28"}, "autoassign": true})
	if err := env.Client.Create(ctx, unknown, client.FieldValidation(metav1.FieldValidationStrict)); err == nil || !strings.Contains(err.Error(), "autoassign") {
		t.Errorf("unknown field spec.autoassign under strict validation: err = %v, want a rejection naming it", err)
	}

	// Positive controls at the edges of the same ranges.
	good := []*unstructured.Unstructured{
		raw(b2, "BGPPeer", ns, "edges", peer(obj{"peerPort": 16384, "myASN": int64(4294967295), "connectTime": "1s"})),
		raw(b1, "L2Advertisement", ns, "w100", l2pref(100)),
		raw(b1, "BGPAdvertisement", ns, "sel-default", obj{"aggregationLength": 32, "aggregationLengthV6": 128, "serviceSelectors": []any{obj{"matchLabels": obj{"a": "b"}}}}),
		raw(b1, "BFDProfile", ns, "edges", obj{"receiveInterval": 60000, "detectMultiplier": 2, "minimumTtl": 1}),
	}
	for _, u := range good {
		if err := env.Client.Create(ctx, u); err != nil {
			t.Errorf("%s %s at the edge of its ranges rejected: %v", u.GetKind(), u.GetName(), err)
		}
	}

	// ConfigurationState result is an enum (status subresource).
	cs := &v1beta1.ConfigurationState{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "speaker-x"}}
	if err := env.Client.Create(ctx, cs); err != nil {
		t.Fatal(err)
	}
	cs.Status.Result = "Bogus"
	wantInvalid(t, "ConfigurationState result Bogus", env.Client.Status().Update(ctx, cs), "status.result")
}

func testImmutable(ctx context.Context, t *testing.T, env *testenv.Env) {
	ns := env.Namespace(t)
	c := env.Client

	for _, start := range []bool{true, false} {
		p := &v1beta2.BGPPeer{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "gr-"},
			Spec:       v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64513, PeerAddress: "198.51.100.1", EnableGracefulRestart: start},
		}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.Spec.HoldTime = &metav1.Duration{Duration: 30e9}
		if err := c.Update(ctx, p); err != nil {
			t.Fatalf("BGPPeer update keeping enableGracefulRestart=%v rejected: %v", start, err)
		}
		p.Spec.EnableGracefulRestart = !start
		wantInvalid(t, "enableGracefulRestart changed", c.Update(ctx, p), "enableGracefulRestart cannot be changed")
	}

	s := &v1beta1.ServiceL2Status{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "l2-"}}
	if err := c.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	s.Status = v1beta1.ServiceL2StatusStatus{
		ServiceStatusCommon: v1beta1.ServiceStatusCommon{Node: "node-a", ServiceName: "web", ServiceNamespace: "shop"},
		Interfaces:          []v1beta1.InterfaceInfo{{Name: "eth0"}},
	}
	if err := c.Status().Update(ctx, s); err != nil {
		t.Fatalf("first ServiceL2Status status write rejected: %v", err)
	}
	s.Status.Interfaces = []v1beta1.InterfaceInfo{{Name: "eth1"}}
	if err := c.Status().Update(ctx, s); err != nil {
		t.Fatalf("ServiceL2Status interfaces change rejected: %v", err)
	}
	for _, tc := range []struct {
		field  string
		mutate func(*v1beta1.ServiceStatusCommon)
	}{
		{"node", func(st *v1beta1.ServiceStatusCommon) { st.Node = "node-b" }},
		{"serviceName", func(st *v1beta1.ServiceStatusCommon) { st.ServiceName = "api" }},
		{"serviceNamespace", func(st *v1beta1.ServiceStatusCommon) { st.ServiceNamespace = "other" }},
	} {
		changed := s.DeepCopy()
		tc.mutate(&changed.Status.ServiceStatusCommon)
		wantInvalid(t, "ServiceL2Status "+tc.field+" changed", c.Status().Update(ctx, changed), tc.field+" is immutable")
	}

	b := &v1beta1.ServiceBGPStatus{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "bgp-"}}
	if err := c.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	b.Status.ServiceStatusCommon = v1beta1.ServiceStatusCommon{Node: "node-a", ServiceName: "web", ServiceNamespace: "shop"}
	if err := c.Status().Update(ctx, b); err != nil {
		t.Fatalf("first ServiceBGPStatus status write rejected: %v", err)
	}
	b.Status.Node = "node-b"
	wantInvalid(t, "ServiceBGPStatus node changed", c.Status().Update(ctx, b), "node is immutable")
}

package crdtest

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/testenv"
)

func sel(k, v string) metav1.LabelSelector {
	return metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
}

func exprSel(k string, op metav1.LabelSelectorOperator, vals ...string) metav1.LabelSelector {
	return metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: k, Operator: op, Values: vals}}}
}

func meta(ns, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Namespace: ns, Name: name,
		Labels:      map[string]string{"app": "herald-test"},
		Annotations: map[string]string{"note": name},
	}
}

// roundTrip creates obj, reads it back into fresh, and returns fresh. With
// status set, it also writes the status subresource first.
func roundTrip[T client.Object](ctx context.Context, t *testing.T, env *testenv.Env, obj T, fresh T, status func(T)) T {
	t.Helper()
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
	if status != nil {
		status(obj)
		if err := env.Client.Status().Update(ctx, obj); err != nil {
			t.Fatalf("update status of %T %s: %v", obj, obj.GetName(), err)
		}
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), fresh); err != nil {
		t.Fatalf("get %T %s: %v", obj, obj.GetName(), err)
	}
	if !equality.Semantic.DeepEqual(fresh.GetLabels(), obj.GetLabels()) || !equality.Semantic.DeepEqual(fresh.GetAnnotations(), obj.GetAnnotations()) {
		t.Errorf("%T %s: metadata differs: labels %v annotations %v", obj, obj.GetName(), fresh.GetLabels(), fresh.GetAnnotations())
	}
	return fresh
}

func check(t *testing.T, what string, got, want any) {
	t.Helper()
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("%s: read back\n  %+v\nwant\n  %+v", what, got, want)
	}
}

func testRoundTrip(ctx context.Context, t *testing.T, env *testenv.Env) {
	ns := env.Namespace(t)

	poolSpec := v1beta1.IPAddressPoolSpec{
		Addresses:     []string{"198.51.100.0/26", "203.0.113.10-203.0.113.20", "2001:db8:1::/120"},
		AutoAssign:    ptr.To(false),
		AvoidBuggyIPs: true,
		ServiceAllocation: &v1beta1.ServiceAllocation{
			Priority:           7,
			Namespaces:         []string{"a", "b"},
			NamespaceSelectors: []metav1.LabelSelector{sel("team", "edge")},
			ServiceSelectors:   []metav1.LabelSelector{exprSel("tier", metav1.LabelSelectorOpIn, "web", "api")},
		},
	}
	poolStatus := v1beta1.IPAddressPoolStatus{AssignedIPv4: 3, AssignedIPv6: 1, AvailableIPv4: 72, AvailableIPv6: 255}
	pool := roundTrip(ctx, t, env,
		&v1beta1.IPAddressPool{ObjectMeta: meta(ns, "pool"), Spec: *poolSpec.DeepCopy()}, &v1beta1.IPAddressPool{},
		func(p *v1beta1.IPAddressPool) { p.Status = poolStatus })
	check(t, "IPAddressPool spec", pool.Spec, poolSpec)
	check(t, "IPAddressPool status", pool.Status, poolStatus)

	l2Spec := v1beta1.L2AdvertisementSpec{
		IPAddressPools:         []string{"pool"},
		IPAddressPoolSelectors: []metav1.LabelSelector{sel("pool", "public")},
		NodeSelectors:          []metav1.LabelSelector{exprSel("node-role", metav1.LabelSelectorOpDoesNotExist)},
		Interfaces:             []string{"eth0", "bond0"},
		ServiceSelectors:       []metav1.LabelSelector{sel("expose", "l2")},
		PreferredNodeSelectors: []v1beta1.PreferredNodeSelector{
			{Weight: 1, Preference: sel("zone", "a")},
			{Weight: 100, Preference: exprSel("rack", metav1.LabelSelectorOpNotIn, "r9")},
		},
	}
	l2 := roundTrip(ctx, t, env, &v1beta1.L2Advertisement{ObjectMeta: meta(ns, "l2"), Spec: *l2Spec.DeepCopy()}, &v1beta1.L2Advertisement{}, nil)
	check(t, "L2Advertisement spec", l2.Spec, l2Spec)

	bgpAdvSpec := v1beta1.BGPAdvertisementSpec{
		AggregationLength:      ptr.To[int32](32),
		AggregationLengthV6:    ptr.To[int32](128),
		LocalPref:              4000000000,
		Communities:            []string{"65535:65282", "large:64512:1:2", "alias"},
		IPAddressPools:         []string{"pool"},
		IPAddressPoolSelectors: []metav1.LabelSelector{sel("pool", "public")},
		NodeSelectors:          []metav1.LabelSelector{sel("bgp", "yes")},
		Peers:                  []string{"tor-a", "tor-b"},
		ServiceSelectors:       []metav1.LabelSelector{sel("expose", "bgp")},
	}
	adv := roundTrip(ctx, t, env, &v1beta1.BGPAdvertisement{ObjectMeta: meta(ns, "bgp"), Spec: *bgpAdvSpec.DeepCopy()}, &v1beta1.BGPAdvertisement{}, nil)
	check(t, "BGPAdvertisement spec", adv.Spec, bgpAdvSpec)

	rollup := v1beta1.BGPAdvertisementSpec{AggregationLength: ptr.To[int32](24), AggregationLengthV6: ptr.To[int32](64)}
	adv = roundTrip(ctx, t, env, &v1beta1.BGPAdvertisement{ObjectMeta: meta(ns, "rollup"), Spec: *rollup.DeepCopy()}, &v1beta1.BGPAdvertisement{}, nil)
	check(t, "BGPAdvertisement roll-up spec", adv.Spec, rollup)

	peerSpec := v1beta2.BGPPeerSpec{
		MyASN: 4200000000, PeerASN: 4200000001, DynamicASN: v1beta2.InternalASNMode, LocalASN: 4294967295,
		PeerAddress: "2001:db8::1", Interface: "eth1", SourceAddress: "2001:db8::2", PeerPort: 16384,
		HoldTime:      &metav1.Duration{Duration: 9 * time.Second},
		KeepaliveTime: &metav1.Duration{Duration: 3 * time.Second},
		ConnectTime:   &metav1.Duration{Duration: 65535 * time.Second},
		RouterID:      "198.51.100.9",
		NodeSelectors: []metav1.LabelSelector{sel("rack", "r1"), exprSel("zone", metav1.LabelSelectorOpExists)},
		Password:      "md5-key", PasswordSecret: &corev1.SecretReference{Name: "tor-password", Namespace: ns},
		BFDProfile: "fast", EnableGracefulRestart: true, EBGPMultiHop: true, VRF: "red",
		DisableMP: true, DualStackAddressFamily: true,
	}
	peer := roundTrip(ctx, t, env, &v1beta2.BGPPeer{ObjectMeta: meta(ns, "peer"), Spec: *peerSpec.DeepCopy()}, &v1beta2.BGPPeer{}, nil)
	check(t, "BGPPeer spec", peer.Spec, peerSpec)

	bfdSpec := v1beta1.BFDProfileSpec{
		ReceiveInterval: ptr.To[uint32](10), TransmitInterval: ptr.To[uint32](60000), DetectMultiplier: ptr.To[uint32](255),
		EchoInterval: ptr.To[uint32](50), EchoMode: ptr.To(true), PassiveMode: ptr.To(false), MinimumTTL: ptr.To[uint32](254),
	}
	bfd := roundTrip(ctx, t, env, &v1beta1.BFDProfile{ObjectMeta: meta(ns, "fast"), Spec: *bfdSpec.DeepCopy()}, &v1beta1.BFDProfile{}, nil)
	check(t, "BFDProfile spec", bfd.Spec, bfdSpec)

	commSpec := v1beta1.CommunitySpec{Communities: []v1beta1.CommunityAlias{
		{Name: "no-export", Value: "65535:65281"}, {Name: "big", Value: "large:64512:7:8"},
	}}
	comm := roundTrip(ctx, t, env, &v1beta1.Community{ObjectMeta: meta(ns, "aliases"), Spec: *commSpec.DeepCopy()}, &v1beta1.Community{}, nil)
	check(t, "Community spec", comm.Spec, commSpec)

	common := v1beta1.ServiceStatusCommon{Node: "node-a", ServiceName: "web", ServiceNamespace: "shop"}
	l2Status := v1beta1.ServiceL2StatusStatus{ServiceStatusCommon: common, Interfaces: []v1beta1.InterfaceInfo{{Name: "eth0"}, {Name: "eth1"}}}
	l2s := roundTrip(ctx, t, env, &v1beta1.ServiceL2Status{ObjectMeta: meta(ns, "l2-x")}, &v1beta1.ServiceL2Status{},
		func(s *v1beta1.ServiceL2Status) { s.Status = *l2Status.DeepCopy() })
	check(t, "ServiceL2Status status", l2s.Status, l2Status)

	bgpStatus := v1beta1.ServiceBGPStatusStatus{ServiceStatusCommon: common, Peers: []string{"tor-a", "tor-b"}}
	bgps := roundTrip(ctx, t, env, &v1beta1.ServiceBGPStatus{ObjectMeta: meta(ns, "bgp-x")}, &v1beta1.ServiceBGPStatus{},
		func(s *v1beta1.ServiceBGPStatus) { s.Status = *bgpStatus.DeepCopy() })
	check(t, "ServiceBGPStatus status", bgps.Status, bgpStatus)

	stamp := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	csStatus := v1beta1.ConfigurationStateStatus{
		Result:       v1beta1.ConfigurationResultInvalid,
		ErrorSummary: "pool public: overlapping CIDRs",
		Conditions: []metav1.Condition{
			{Type: v1beta1.ConditionConfigReconcilerValid, Status: metav1.ConditionFalse, Reason: v1beta1.ReasonConfigurationError, Message: "bad", LastTransitionTime: stamp, ObservedGeneration: 1},
			{Type: v1beta1.ConditionPoolReconcilerValid, Status: metav1.ConditionTrue, Reason: v1beta1.ReasonReconciled, LastTransitionTime: stamp},
		},
	}
	cs := roundTrip(ctx, t, env, &v1beta1.ConfigurationState{ObjectMeta: meta(ns, "controller")}, &v1beta1.ConfigurationState{},
		func(s *v1beta1.ConfigurationState) { s.Status = *csStatus.DeepCopy() })
	check(t, "ConfigurationState status", cs.Status, csStatus)
}

func testDefaults(ctx context.Context, t *testing.T, env *testenv.Env) {
	ns := env.Namespace(t)
	c := env.Client

	pool := &v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}, Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"198.51.100.0/28"}}}
	if err := c.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if pool.Spec.AutoAssign == nil || !*pool.Spec.AutoAssign {
		t.Errorf("IPAddressPool autoAssign = %v, want default true", pool.Spec.AutoAssign)
	}

	peer := &v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}, Spec: v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64513, PeerAddress: "198.51.100.1"}}
	if err := c.Create(ctx, peer); err != nil {
		t.Fatal(err)
	}
	if peer.Spec.PeerPort != 179 {
		t.Errorf("BGPPeer peerPort = %d, want default 179", peer.Spec.PeerPort)
	}

	adv := &v1beta1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a"}}
	if err := c.Create(ctx, adv); err != nil {
		t.Fatal(err)
	}
	if adv.Spec.AggregationLength == nil || *adv.Spec.AggregationLength != 32 {
		t.Errorf("BGPAdvertisement aggregationLength = %v, want default 32", adv.Spec.AggregationLength)
	}
	if adv.Spec.AggregationLengthV6 == nil || *adv.Spec.AggregationLengthV6 != 128 {
		t.Errorf("BGPAdvertisement aggregationLengthV6 = %v, want default 128", adv.Spec.AggregationLengthV6)
	}
}

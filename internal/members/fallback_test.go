package members

import (
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNodeStatusFromNode(t *testing.T) {
	t.Parallel()
	cond := func(typ corev1.NodeConditionType, s corev1.ConditionStatus) corev1.NodeCondition {
		return corev1.NodeCondition{Type: typ, Status: s}
	}
	for _, tc := range []struct {
		name string
		node corev1.Node
		want NodeStatus
	}{
		{"no conditions", corev1.Node{}, NodeStatus{}},
		{"ready", corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse), cond(corev1.NodeReady, corev1.ConditionTrue)}}},
			NodeStatus{Ready: true}},
		{"ready unknown", corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			cond(corev1.NodeReady, corev1.ConditionUnknown)}}}, NodeStatus{}},
		{"network unavailable", corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			cond(corev1.NodeReady, corev1.ConditionTrue), cond(corev1.NodeNetworkUnavailable, corev1.ConditionTrue)}}},
			NodeStatus{Ready: true, NetworkUnavailable: true}},
		{"network available", corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			cond(corev1.NodeNetworkUnavailable, corev1.ConditionFalse)}}}, NodeStatus{}},
		{"out of service", corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: "node.kubernetes.io/unschedulable", Effect: corev1.TaintEffectNoSchedule},
			{Key: OutOfServiceTaint, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}}},
			NodeStatus{OutOfService: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.node.ObjectMeta = metav1.ObjectMeta{Name: "n1"}
			tc.want.Name = "n1"
			if got := NodeStatusFromNode(&tc.node); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestLiveFromNodeConditions(t *testing.T) {
	t.Parallel()
	got := LiveFromNodeConditions([]NodeStatus{
		{Name: "ready", Ready: true},
		{Name: "not-ready"},
		{Name: "network-unavailable", Ready: true, NetworkUnavailable: true},
		{Name: "out-of-service", Ready: true, OutOfService: true},
		{Name: "all-bad", NetworkUnavailable: true, OutOfService: true},
	})
	want := map[string]bool{
		"ready":               true,
		"not-ready":           false,
		"network-unavailable": false,
		"out-of-service":      false,
		"all-bad":             false,
	}
	if !maps.Equal(got, want) {
		t.Errorf("LiveFromNodeConditions = %v, want %v", got, want)
	}
	if got := LiveFromNodeConditions(nil); len(got) != 0 {
		t.Errorf("no nodes: %v, want empty", got)
	}
}

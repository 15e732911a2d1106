package config

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestEmptyConfigurationIsValid: a cluster with no configuration objects
// (a fresh install) builds a snapshot for a speaker whose Node exists, so
// the speaker becomes ready (speaker.Controller.Ready) and a rollout proceeds;
// only its own Node missing keeps it without one.
func TestEmptyConfigurationIsValid(t *testing.T) {
	opts := Options{Namespace: "herald-system", NodeName: "n1", DropTransient: true}
	node := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"kubernetes.io/hostname": "n1"}}}
	s, err := Build(Resources{Nodes: []corev1.Node{node}}, opts)
	if err != nil || s == nil {
		t.Fatalf("empty configuration: snapshot %v, error %v; want a snapshot", s, err)
	}
	if s, err := Build(Resources{}, opts); err == nil || !IsTransient(err) || s != nil {
		t.Fatalf("without the speaker's Node: snapshot %v, error %v; want a transient error", s, err)
	}
	if s, err := Build(Resources{}, Options{Namespace: "herald-system"}); err != nil || s == nil {
		t.Fatalf("controller (no node), empty configuration: snapshot %v, error %v", s, err)
	}
}

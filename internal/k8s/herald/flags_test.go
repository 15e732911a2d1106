package herald

import (
	"bytes"
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/herald-lb/herald/internal/explain"
	"github.com/herald-lb/herald/internal/version"
)

// TestFlagValue: the speakers' and controller's settings are read from
// their Pods' arguments in every form the flag package accepts.
func TestFlagValue(t *testing.T) {
	pod := func(args ...string) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Command: []string{"/speaker"}, Args: args}}}}
	}
	for _, tc := range []struct {
		args      []string
		name      string
		want      string
		wantFound bool
	}{
		{[]string{"--lb-class=edge"}, "lb-class", "edge", true},
		{[]string{"--lb-class", "edge", "--port=7472"}, "lb-class", "edge", true},
		{[]string{"--ignore-exclude-lb"}, "ignore-exclude-lb", "true", true},
		{[]string{"--ignore-exclude-lb", "--lb-class=x"}, "ignore-exclude-lb", "true", true},
		{[]string{"--ignore-exclude-lb=false"}, "ignore-exclude-lb", "false", true},
		{[]string{"--lb-classes=x"}, "lb-class", "", false},
		{[]string{"-lb-class=edge"}, "lb-class", "edge", true},
		{[]string{"-lb-class", "edge"}, "lb-class", "edge", true},
		{[]string{"--lb-class=a", "--lb-class=b"}, "lb-class", "b", true},
		{[]string{"--", "--lb-class=a"}, "lb-class", "", false},
		{[]string{"lb-class=a"}, "lb-class", "", false},
		{nil, "lb-class", "", false},
	} {
		got, ok := flagValue(pod(tc.args...), tc.name)
		if got != tc.want || ok != tc.wantFound {
			t.Errorf("%v %s: %q %v, want %q %v", tc.args, tc.name, got, ok, tc.want, tc.wantFound)
		}
	}
}

// TestSetting: memberlist is on when both its settings are given, by flag
// or by environment (a value or a valueFrom, as the manifests set the bind
// address).
func TestSetting(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Args: []string{"--ml-labels=app=x"},
		Env: []corev1.EnvVar{{Name: "METALLB_ML_BIND_ADDR", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
			{Name: "METALLB_OTHER", Value: ""}},
	}}}}
	for _, tc := range []struct {
		name, env string
		want      bool
	}{
		{"ml-labels", "METALLB_ML_LABELS", true},
		{"ml-bindaddr", "METALLB_ML_BIND_ADDR", true},
		{"other", "METALLB_OTHER", false},
		{"missing", "METALLB_MISSING", false},
	} {
		if got := setting(pod, tc.name, tc.env); got != tc.want {
			t.Errorf("%s/%s: %v, want %v", tc.name, tc.env, got, tc.want)
		}
	}
}

func TestVersionFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"--version"}, &out, &errOut); code != ExitOK {
		t.Fatalf("--version: exit %d, stderr %q", code, errOut.String())
	}
	if want := "kubectl-herald " + version.String() + "\n"; out.String() != want {
		t.Errorf("--version printed %q, want %q", out.String(), want)
	}
}

// TestSpeakerElection: a speaker Pod's layer 2 election is read from its
// arguments in every form the flag package accepts, with the speaker's
// rules (explain.ElectionFromFlags); refused flags are reported, not
// guessed.
func TestSpeakerElection(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    explain.L2Election
		refused bool
	}{
		{nil, explain.L2ElectionPerAddress, false},
		{[]string{"--log-level=info"}, explain.L2ElectionPerAddress, false},
		{[]string{"--l2-election=balanced"}, explain.L2ElectionBalanced, false},
		{[]string{"--l2-election", "balanced", "--log-level=info"}, explain.L2ElectionBalanced, false},
		{[]string{"-l2-election=balanced"}, explain.L2ElectionBalanced, false},
		{[]string{"--l2-election=balanced", "--l2-election=per-address"}, explain.L2ElectionPerAddress, false},
		{[]string{"--l2-election=metallb"}, explain.L2ElectionMetalLB, false},
		{[]string{"--ml-key-derivation=metallb"}, explain.L2ElectionMetalLB, false},
		{[]string{"--ml-key-derivation", "herald", "--l2-election=balanced"}, explain.L2ElectionBalanced, false},
		{[]string{"--l2-election=balanced", "--ml-key-derivation=metallb"}, "", true},
		{[]string{"--l2-election=per-service"}, "", true},
	} {
		p := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Command: []string{"/speaker"}, Args: tc.args}}}}
		p.Name = "speaker-n1"
		got := speakerElection(p)
		if got.Election != tc.want || (got.Error != "") != tc.refused || got.Pod != "speaker-n1" || got.Node != "n1" {
			t.Errorf("%v: %+v, want %q refused %v", tc.args, got, tc.want, tc.refused)
		}
	}
}

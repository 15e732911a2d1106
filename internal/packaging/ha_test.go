package packaging

import (
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// TestControllerRollout: the controller elects a leader by default, and
// its rollout never runs two allocators without election (issue 11 item 3):
// the manifests surge one Pod (it stands by until the old one hands over
// the Lease), the chart does too and switches to Recreate without leader
// election, where more than one replica is refused.
func TestControllerRollout(t *testing.T) {
	var d appsv1.Deployment
	find(t, heraldYAML(t), "Deployment", ns, "herald-controller").into(t, &d)
	wantArgs(t, container(t, d.Spec.Template.Spec, "controller"), "--leader-elect=true")
	if s := d.Spec.Strategy; s.Type != appsv1.RollingUpdateDeploymentStrategyType || s.RollingUpdate == nil ||
		s.RollingUpdate.MaxUnavailable == nil || s.RollingUpdate.MaxUnavailable.IntValue() != 0 {
		t.Errorf("manifests: strategy %+v, want RollingUpdate with maxUnavailable 0 (the webhook stays served)", s)
	}

	chart := func(sets ...string) ([]object, appsv1.Deployment) {
		objs := parseObjects(t, helmTemplate(t, "herald", ns, sets...))
		var d appsv1.Deployment
		find(t, objs, "Deployment", ns, "herald-controller").into(t, &d)
		return objs, d
	}
	objs, d := chart()
	wantArgs(t, container(t, d.Spec.Template.Spec, "controller"), "--leader-elect=true")
	if d.Spec.Template.Spec.Affinity != nil {
		t.Errorf("1 replica: affinity %+v, want none", d.Spec.Template.Spec.Affinity)
	}
	if *d.Spec.Replicas != 1 || len(ofKind(objs, "PodDisruptionBudget")) != 0 {
		t.Errorf("chart defaults: %d replicas, %d PodDisruptionBudgets; want 1 and none", *d.Spec.Replicas, len(ofKind(objs, "PodDisruptionBudget")))
	}
	if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
		t.Errorf("chart default strategy %s", d.Spec.Strategy.Type)
	}

	objs, d = chart("controller.replicas=2")
	if *d.Spec.Replicas != 2 {
		t.Errorf("replicas %d, want 2", *d.Spec.Replicas)
	}
	if a := d.Spec.Template.Spec.Affinity; a == nil || a.PodAntiAffinity == nil ||
		len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
		a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey != "kubernetes.io/hostname" {
		t.Errorf("2 replicas: affinity %+v, want a preferred anti-affinity per node", d.Spec.Template.Spec.Affinity)
	}
	var pdb policyv1.PodDisruptionBudget
	find(t, objs, "PodDisruptionBudget", ns, "herald-controller").into(t, &pdb)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.Selector == nil ||
		!labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("PodDisruptionBudget %+v does not cover the controller Pods with maxUnavailable 1", pdb.Spec)
	}

	_, d = chart("controller.leaderElection.enabled=false")
	wantArgs(t, container(t, d.Spec.Template.Spec, "controller"), "--leader-elect=false")
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("without leader election the strategy is %s, want Recreate", d.Spec.Strategy.Type)
	}

	bin, env := helm(t)
	out, err := tryRun("", nil, env, bin, "template", "herald", filepath.Join(repoRoot(t), "charts", "herald"), "--namespace", ns,
		"--kube-version", kubeVersion, "--set", "controller.replicas=2", "--set", "controller.leaderElection.enabled=false")
	if err == nil || !strings.Contains(string(out)+err.Error(), "leaderElection") {
		t.Errorf("2 replicas without leader election rendered (err %v)", err)
	}
}

package packaging

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/herald-lb/herald/internal/testenv"
)

// migrationValues is the chart's values file for the node-by-node
// migration window, the Helm twin of the kustomize overlay in the same
// directory (docs/migrating-from-metallb.md, "Node by node with Helm").
func migrationValues(t testing.TB) string {
	return filepath.Join(repoRoot(t), "manifests", "metallb-migration", "helm-values.yaml")
}

// helmTemplateArgs renders charts/herald as release name in namespace with
// helm template's extra arguments args (-f FILE, --set K=V).
func helmTemplateArgs(t testing.TB, name, namespace string, args ...string) []byte {
	t.Helper()
	bin, env := helm(t)
	all := append([]string{"template", name, filepath.Join(repoRoot(t), "charts", "herald"), "--namespace", namespace, "--kube-version", kubeVersion}, args...)
	return run(t, "", nil, env, bin, all...)
}

// sameAsOverlay fails t when got (the chart's) and want (the overlay's)
// differ as JSON.
func sameAsOverlay(t *testing.T, what string, got, want any) {
	t.Helper()
	g, _ := json.MarshalIndent(got, "", " ")
	w, _ := json.MarshalIndent(want, "", " ")
	if string(g) != string(w) {
		t.Errorf("%s differs between the chart with helm-values.yaml and the overlay manifests/metallb-migration:\nchart:   %s\noverlay: %s", what, g, w)
	}
}

// envByName returns env keyed by variable name (no variable refers to
// another with $(NAME), so their order is immaterial).
func envByName(env []corev1.EnvVar) map[string]corev1.EnvVar {
	out := map[string]corev1.EnvVar{}
	for _, e := range env {
		out[e.Name] = e
	}
	return out
}

// extraPodLabels returns the Pod template's labels other than the
// app.kubernetes.io/* ones (the chart's and the manifests' selector labels
// differ: the chart adds app.kubernetes.io/instance).
func extraPodLabels(ds appsv1.DaemonSet) map[string]string {
	out := map[string]string{}
	for k, v := range ds.Spec.Template.Labels {
		if !strings.HasPrefix(k, "app.kubernetes.io/") {
			out[k] = v
		}
	}
	return out
}

// envValue returns the value of the container's environment variable name.
func envValue(t *testing.T, c corev1.Container, name string) string {
	t.Helper()
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	t.Errorf("%s: no %s", c.Name, name)
	return ""
}

// TestChartMigrationValues: with manifests/metallb-migration/helm-values.yaml,
// Herald's chart (release herald in metallb-system) runs the speakers as
// the kustomize overlay manifests/metallb-migration does: the same
// arguments (--l2-election=metallb), environment (METALLB_ML_LABELS with
// MetalLB's selector), volumes (MetalLB's memberlist Secret), mounts,
// ports, probes and node affinity, and the same extra Pod labels, which
// both MetalLB's selector and Herald's own match. The controller is the
// overlay's too (it keeps creating herald-memberlist for after the
// window). Each of the values alone is checked against the default
// rendering, so a value that stopped reaching the DaemonSet fails here.
func TestChartMigrationValues(t *testing.T) {
	root := repoRoot(t)
	overlay := parseObjects(t, run(t, "", nil, nil, kubectl(t), "kustomize", filepath.Join(root, "manifests", "metallb-migration")))
	chart := parseObjects(t, helmTemplateArgs(t, "herald", "metallb-system", "-f", migrationValues(t)))
	def := parseObjects(t, helmTemplateArgs(t, "herald", "metallb-system"))

	var ods, cds, dds appsv1.DaemonSet
	find(t, overlay, "DaemonSet", "metallb-system", "herald-speaker").into(t, &ods)
	find(t, chart, "DaemonSet", "metallb-system", "herald-speaker").into(t, &cds)
	find(t, def, "DaemonSet", "metallb-system", "herald-speaker").into(t, &dds)
	op, cp := ods.Spec.Template.Spec, cds.Spec.Template.Spec
	oc, cc := container(t, op, "speaker"), container(t, cp, "speaker")
	sameAsOverlay(t, "speaker args", cc.Args, oc.Args)
	// kustomize's strategic merge moves a patched env entry to the front;
	// the order of plain values does not matter to the container.
	sameAsOverlay(t, "speaker env (by name)", envByName(cc.Env), envByName(oc.Env))
	sameAsOverlay(t, "speaker volumeMounts", cc.VolumeMounts, oc.VolumeMounts)
	sameAsOverlay(t, "speaker ports", cc.Ports, oc.Ports)
	sameAsOverlay(t, "speaker probes", []any{cc.LivenessProbe, cc.ReadinessProbe}, []any{oc.LivenessProbe, oc.ReadinessProbe})
	sameAsOverlay(t, "speaker volumes", cp.Volumes, op.Volumes)
	sameAsOverlay(t, "speaker affinity", cp.Affinity, op.Affinity)
	sameAsOverlay(t, "speaker nodeSelector", cp.NodeSelector, op.NodeSelector)
	sameAsOverlay(t, "speaker tolerations", cp.Tolerations, op.Tolerations)
	sameAsOverlay(t, "speaker Pod labels (besides app.kubernetes.io/*)", extraPodLabels(cds), extraPodLabels(ods))

	// Each side's speakers find the other's: MetalLB's selector (its
	// manifests' METALLB_ML_LABELS) and Herald's own match Herald's Pods,
	// and Herald's matches MetalLB's Pods.
	metallbPod := labels.Set{"app": "metallb", "component": "speaker"}
	for _, sel := range []string{"app=metallb,component=speaker", envValue(t, cc, "METALLB_ML_LABELS")} {
		s, err := labels.Parse(sel)
		if err != nil {
			t.Fatalf("selector %q: %v", sel, err)
		}
		if !s.Matches(labels.Set(cds.Spec.Template.Labels)) {
			t.Errorf("selector %q does not match Herald's speaker Pods %v", sel, cds.Spec.Template.Labels)
		}
		if !s.Matches(metallbPod) {
			t.Errorf("selector %q does not match MetalLB's speaker Pods %v", sel, metallbPod)
		}
	}
	// The DaemonSet's selector is the default one: `helm upgrade` back to
	// the normal values keeps it (a selector is immutable).
	sameJSON(t, "speaker selector (migration values vs default)", cds.Spec.Selector, dds.Spec.Selector)

	var od, cd appsv1.Deployment
	find(t, overlay, "Deployment", "metallb-system", "herald-controller").into(t, &od)
	find(t, chart, "Deployment", "metallb-system", "herald-controller").into(t, &cd)
	sameAsOverlay(t, "controller env", envByName(container(t, cd.Spec.Template.Spec, "controller").Env), envByName(container(t, od.Spec.Template.Spec, "controller").Env))
	sameAsOverlay(t, "controller args", container(t, cd.Spec.Template.Spec, "controller").Args, container(t, od.Spec.Template.Spec, "controller").Args)

	// Every value alone changes only its own part, and is off by default.
	dc := container(t, dds.Spec.Template.Spec, "speaker")
	for _, tc := range []struct {
		set   string
		check func(ds appsv1.DaemonSet) (got, want any)
	}{
		{"layer2.election=metallb", func(ds appsv1.DaemonSet) (any, any) {
			return container(t, ds.Spec.Template.Spec, "speaker").Args, append(append([]string{}, dc.Args...), "--l2-election=metallb")
		}},
		{"speaker.secretName=metallb-memberlist", func(ds appsv1.DaemonSet) (any, any) {
			return ds.Spec.Template.Spec.Volumes[0].Secret.SecretName, "metallb-memberlist"
		}},
		{"speaker.memberlist.labels.component=speaker", func(ds appsv1.DaemonSet) (any, any) {
			return []any{envValue(t, container(t, ds.Spec.Template.Spec, "speaker"), "METALLB_ML_LABELS"), extraPodLabels(ds)},
				[]any{"component=speaker", map[string]string{"component": "speaker"}}
		}},
	} {
		var ds appsv1.DaemonSet
		find(t, parseObjects(t, helmTemplateArgs(t, "herald", "metallb-system", "--set", tc.set)), "DaemonSet", "metallb-system", "herald-speaker").into(t, &ds)
		got, want := tc.check(ds)
		sameJSON(t, "--set "+tc.set, got, want)
	}
	if dds.Spec.Template.Spec.Volumes[0].Secret.SecretName != "herald-memberlist" || envValue(t, dc, "METALLB_ML_LABELS") != "app.kubernetes.io/name=herald,app.kubernetes.io/component=speaker" ||
		dds.Spec.Template.Spec.Affinity != nil || len(extraPodLabels(dds)) != 0 || strings.Contains(strings.Join(dc.Args, " "), "--l2-election") {
		t.Errorf("default values render migration settings: volumes %v, env %v, affinity %v, labels %v, args %v",
			dds.Spec.Template.Spec.Volumes, dc.Env, dds.Spec.Template.Spec.Affinity, dds.Spec.Template.Labels, dc.Args)
	}

	// Memberlist labels that would change the selector's labels, or
	// contradict speaker.podLabels, are refused with the key named.
	for _, tc := range []struct{ set, want string }{
		{"speaker.memberlist.labels.app\\.kubernetes\\.io/name=metallb", `speaker.memberlist.labels.app.kubernetes.io/name: "metallb", but the speaker Pods' selector label is "herald"`},
		{"speaker.memberlist.labels.app=metallb,speaker.podLabels.app=edge", `speaker.memberlist.labels.app: "metallb", but speaker.podLabels.app is "edge"`},
		{"layer2.election=per-service", "/layer2/election"},
	} {
		if out, ok := helmTemplateErr(t, "--set", tc.set); ok || !strings.Contains(out, tc.want) {
			t.Errorf("--set %s: installed %t, want a refusal with %q:\n%s", tc.set, ok, tc.want, out)
		}
	}
}

// TestHelmMigrationInstall installs the chart with the migration values in
// metallb-system on a real API server (which checks the DaemonSet, its
// selector against the Pod labels, the affinity) and upgrades it back to
// the default values with --reset-values, as the guide's last step does
// (a bare helm upgrade reuses the migration values): the upgrade is
// accepted (the selector is unchanged) and the stored DaemonSet is back in
// Herald's own mode.
func TestHelmMigrationInstall(t *testing.T) {
	env := testenv.Start(t)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	hb, henv := helm(t)
	c := &cluster{t: t, kubeconfig: kc, kubectl: kubectl(t), helm: hb, helmEnv: henv}
	chart := filepath.Join(repoRoot(t), "charts", "herald")
	// The test environment pre-installs Herald's CRDs outside any release:
	// --take-ownership stands in for hack/adopt-metallb-crds.sh. Their
	// BGPPeer conversion webhook is a URL, which the chart's Service
	// reference cannot be merged with.
	c.mustKubectl(t, nil, "patch", "crd", "bgppeers.metallb.io", "--type=json", "-p", `[{"op":"remove","path":"/spec/conversion"}]`)
	c.mustHelm(t, "install", "herald", chart, "--namespace", "metallb-system", "--create-namespace", "--take-ownership", "-f", migrationValues(t), "--timeout", "180s")
	speaker := func() (appsv1.DaemonSet, corev1.Container) {
		var ds appsv1.DaemonSet
		objs := parseObjects(t, c.mustKubectl(t, nil, "get", "daemonset", "herald-speaker", "-n", "metallb-system", "-o", "yaml"))
		objs[0].into(t, &ds)
		return ds, container(t, ds.Spec.Template.Spec, "speaker")
	}
	ds, sc := speaker()
	if got := ds.Spec.Template.Spec.Volumes[0].Secret.SecretName; got != "memberlist" {
		t.Errorf("migration install: memberlist volume Secret %q, want MetalLB's memberlist", got)
	}
	if got := envValue(t, sc, "METALLB_ML_LABELS"); got != "app=metallb,component=speaker" {
		t.Errorf("migration install: METALLB_ML_LABELS %q", got)
	}
	if a := ds.Spec.Template.Spec.Affinity; a == nil || a.NodeAffinity == nil {
		t.Error("migration install: no node affinity")
	}
	if !strings.Contains(strings.Join(sc.Args, " "), "--l2-election=metallb") {
		t.Errorf("migration install: args %v lack --l2-election=metallb", sc.Args)
	}
	wantLabels := map[string]string{"app": "metallb", "component": "speaker"}
	if got := extraPodLabels(ds); !maps.Equal(got, wantLabels) {
		t.Errorf("migration install: Pod labels %v, want %v besides app.kubernetes.io/*", got, wantLabels)
	}

	// --reset-values: without values and without it, helm upgrade reuses
	// the release's last values and stays in the migration mode.
	c.mustHelm(t, "upgrade", "herald", chart, "--namespace", "metallb-system", "--reset-values", "--timeout", "180s")
	ds, sc = speaker()
	if got := ds.Spec.Template.Spec.Volumes[0].Secret.SecretName; got != "herald-memberlist" {
		t.Errorf("after the upgrade to the default values: memberlist volume Secret %q, want herald-memberlist", got)
	}
	if got := envValue(t, sc, "METALLB_ML_LABELS"); got != "app.kubernetes.io/name=herald,app.kubernetes.io/component=speaker" {
		t.Errorf("after the upgrade: METALLB_ML_LABELS %q", got)
	}
	if ds.Spec.Template.Spec.Affinity != nil || len(extraPodLabels(ds)) != 0 || strings.Contains(strings.Join(sc.Args, " "), "--l2-election") {
		t.Errorf("after the upgrade: still in migration mode: affinity %v, labels %v, args %v", ds.Spec.Template.Spec.Affinity, ds.Spec.Template.Labels, sc.Args)
	}
	c.mustHelm(t, "uninstall", "herald", "--namespace", "metallb-system", "--timeout", "180s")
}

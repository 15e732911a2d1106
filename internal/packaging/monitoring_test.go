package packaging

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// monitor is the part of a ServiceMonitor or PodMonitor that decides a
// target's job label.
type monitor struct {
	Spec struct {
		JobLabel  string `json:"jobLabel"`
		Endpoints []struct {
			Relabelings []relabeling `json:"relabelings"`
		} `json:"endpoints"`
		PodMetricsEndpoints []struct {
			Relabelings []relabeling `json:"relabelings"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

type relabeling struct {
	Action       string   `json:"action"`
	SourceLabels []string `json:"sourceLabels"`
	TargetLabel  string   `json:"targetLabel"`
	Replacement  *string  `json:"replacement"`
}

// operatorJob is the job label the Prometheus Operator gives the targets
// of monitor o (kind ServiceMonitor or PodMonitor, named name in
// namespace) whose Service or Pod carries labels: the value of the
// jobLabel label, else the Service name (ServiceMonitor) or
// "<namespace>/<name>" (PodMonitor); then the endpoint's relabelings, of
// which this follows the literal "replace into job" form (no
// sourceLabels) and fails on any other rule touching job.
func operatorJob(t *testing.T, o object, svcName string, labels map[string]string) string {
	t.Helper()
	var m monitor
	if err := yaml.Unmarshal(o.Raw, &m); err != nil {
		t.Fatal(err)
	}
	job := svcName
	if o.Kind == "PodMonitor" {
		job = o.Meta.Namespace + "/" + o.Meta.Name
	}
	if v, ok := labels[m.Spec.JobLabel]; m.Spec.JobLabel != "" && ok {
		job = v
	}
	var rules []relabeling
	for _, e := range m.Spec.Endpoints {
		rules = append(rules, e.Relabelings...)
	}
	for _, e := range m.Spec.PodMetricsEndpoints {
		rules = append(rules, e.Relabelings...)
	}
	for _, r := range rules {
		if r.TargetLabel != "job" {
			continue
		}
		if (r.Action != "" && r.Action != "replace") || len(r.SourceLabels) > 0 || r.Replacement == nil {
			t.Fatalf("%s: relabeling of job %+v not understood by this test", o.key(), r)
		}
		job = *r.Replacement
	}
	return job
}

// monitoredJobs returns the job label of the controller's and the
// speaker's targets in the rendered objects.
func monitoredJobs(t *testing.T, objs []object, kind string) (controller, speaker string) {
	t.Helper()
	jobs := map[string]string{}
	for _, c := range []string{"controller", "speaker"} {
		mon := find(t, objs, kind, ns, "herald-"+c)
		var labels map[string]string
		svcName := "herald-" + c + "-metrics"
		if kind == "ServiceMonitor" {
			var svc corev1.Service
			find(t, objs, "Service", ns, svcName).into(t, &svc)
			labels = svc.Labels
		} else if c == "controller" {
			var d appsv1.Deployment
			find(t, objs, "Deployment", ns, "herald-controller").into(t, &d)
			labels = d.Spec.Template.Labels
		} else {
			var ds appsv1.DaemonSet
			find(t, objs, "DaemonSet", ns, "herald-speaker").into(t, &ds)
			labels = ds.Spec.Template.Labels
		}
		jobs[c] = operatorJob(t, mon, svcName, labels)
	}
	return jobs["controller"], jobs["speaker"]
}

// TestMetalLBAlertsOnHerald runs MetalLB's own alerts
// (testdata/metallb-prometheusrules.yaml, which filter on job=~"metallb.*")
// through promtool against series labelled as Prometheus labels Herald's
// targets: with the job the chart's ServiceMonitors and PodMonitors, and
// manifests/herald-prometheus.yaml's ServiceMonitors give them. Every
// MetalLB alert must fire for the Herald component it is about.
func TestMetalLBAlertsOnHerald(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found (make deps installs Debian's prometheus): %v", err)
	}
	chartSM := parseObjects(t, helmTemplate(t, "herald", ns, "metrics.serviceMonitor.enabled=true"))
	chartPM := parseObjects(t, helmTemplate(t, "herald", ns, "metrics.podMonitor.enabled=true"))
	kustomize := parseObjects(t, readFile(t, filepath.Join(repoRoot(t), "manifests", "herald-prometheus.yaml")))
	for _, tc := range []struct {
		name string
		objs []object
		kind string
	}{
		{"chart ServiceMonitor", chartSM, "ServiceMonitor"},
		{"chart PodMonitor", chartPM, "PodMonitor"},
		{"manifests ServiceMonitor", kustomize, "ServiceMonitor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cj, sj := monitoredJobs(t, tc.objs, tc.kind)
			if cj != metallbJob || sj != metallbJob {
				t.Errorf("job labels: controller %q, speaker %q; MetalLB's chart gives both %q", cj, sj, metallbJob)
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), readFile(t, filepath.Join(repoRoot(t), "internal", "packaging", "testdata", "metallb-prometheusrules.yaml")), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "tests.yaml"), []byte(metallbAlertTests(cj, sj)), 0o644); err != nil {
				t.Fatal(err)
			}
			run(t, dir, nil, nil, promtool, "test", "rules", "tests.yaml")
		})
	}
}

// metallbJob is the job label of MetalLB's targets with its Helm chart
// (jobLabel app.kubernetes.io/name, value "metallb"), which its alerts
// match with job=~"metallb.*".
const metallbJob = "metallb"

// metallbAlertTests is a promtool test of MetalLB's alerts on a controller
// target with job cj and a speaker target with job sj (pods
// herald-controller-x and herald-speaker-a).
func metallbAlertTests(cj, sj string) string {
	ctl := fmt.Sprintf(`job="%s",container="controller",pod="herald-controller-x"`, cj)
	spk := fmt.Sprintf(`job="%s",container="speaker",pod="herald-speaker-a"`, sj)
	lbl := func(s string) string {
		return "{" + strings.ReplaceAll(strings.ReplaceAll(s, `="`, `: "`), `",`, `", `) + "}"
	}
	who := func(job, container, pod string) string {
		return fmt.Sprintf("%s - MetalLB %s on %s", job, container, pod)
	}
	c, s := who(cj, "controller", "herald-controller-x"), who(sj, "speaker", "herald-speaker-a")
	return fmt.Sprintf(`
rule_files: [rules.yaml]
evaluation_interval: 30s
tests:
- interval: 30s
  input_series:
  - series: 'metallb_k8s_client_config_stale_bool{%[1]s}'
    values: '0x12'
  - series: 'metallb_k8s_client_config_loaded_bool{%[1]s}'
    values: '0x12'
  - series: 'metallb_k8s_client_config_stale_bool{%[2]s}'
    values: '1x12'
  - series: 'metallb_k8s_client_config_loaded_bool{%[2]s}'
    values: '1x12'
  - series: 'metallb_allocator_addresses_total{%[1]s,pool="full"}'
    values: '4x12'
  - series: 'metallb_allocator_addresses_in_use_total{%[1]s,pool="full"}'
    values: '4x12'
  - series: 'metallb_bgp_session_up{%[2]s,peer="198.51.100.1:179"}'
    values: '0x12'
  alert_rule_test:
  - eval_time: 2m
    alertname: MetalLBStaleConfig
    exp_alerts:
    - exp_labels: %[4]s
      exp_annotations: {summary: "Stale config on herald-speaker-a", description: "%[8]s has a stale config for > 1 minute"}
  - eval_time: 2m
    alertname: MetalLBConfigNotLoaded
    exp_alerts:
    - exp_labels: %[3]s
      exp_annotations: {summary: "Config on herald-controller-x has not been loaded", description: "%[7]s has not loaded for > 1 minute"}
  - eval_time: 2m
    alertname: MetalLBAddressPoolExhausted
    exp_alerts:
    - exp_labels: %[5]s
      exp_annotations: {summary: "Exhausted address pool on herald-controller-x", description: "%[7]s has exhausted address pool full for > 1 minute"}
  - eval_time: 2m
    alertname: MetalLBAddressPoolUsage95Percent
    exp_alerts:
    - exp_labels: %[5]s
      exp_annotations: {summary: "Exhausted address pool on herald-controller-x", message: "%[7]s has address pool full past 95%% usage for > 1 minute"}
  - eval_time: 2m
    alertname: MetalLBBGPSessionDown
    exp_alerts:
    - exp_labels: %[6]s
      exp_annotations: {summary: "BGP session down on herald-speaker-a", message: "%[8]s has BGP session 198.51.100.1:179 down for > 1 minute"}
`, ctl, spk, lbl(ctl), lbl(spk), lbl(ctl+`,pool="full"`), lbl(spk+`,peer="198.51.100.1:179"`), c, s)
}

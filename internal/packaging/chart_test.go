package packaging

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// allOptions turns on every optional part of the chart.
var allOptions = []string{
	"namespace.create=true",
	"metrics.serviceMonitor.enabled=true",
	"metrics.podMonitor.enabled=true",
	"metrics.prometheusRule.enabled=true",
	"metrics.rbacPrometheus.enabled=true",
	"metrics.controllerTLSSecret=ctl-tls",
	"metrics.speakerTLSSecret=spk-tls",
	"grafanaDashboard.enabled=true",
	"loadBalancerClass=example.com/herald",
	"speaker.priorityClassName=system-node-critical",
	"controller.priorityClassName=system-cluster-critical",
	"speaker.memberlist.timings.probeInterval=100ms",
	"speaker.memberlist.keyDerivation=metallb",
	"speaker.memberlist.timings.suspicionMaxTimeoutMult=4",
	"speaker.memberlist.wanConfig=true",
	"speaker.ignoreExcludeLB=true",
	"layer2.gratuitousCount=5",
	"layer2.gratuitousInterval=200ms",
	"layer2.handoverTimeout=300ms",
	"speaker.nodeSelector.zone=a",
	"controller.nodeSelector.zone=b",
	"speaker.tolerations[0].key=dedicated",
	"speaker.tolerations[0].operator=Exists",
	"controller.tolerations[0].key=infra",
	"controller.tolerations[0].operator=Exists",
	"speaker.resources.limits.memory=768Mi",
	"controller.resources.limits.memory=640Mi",
	"controller.image.tag=v9.9.9",
	"speaker.image.repository=registry.example.com/speaker",
	"logLevel=debug",
	"speaker.logLevel=warn",
	"tls.minVersion=VersionTLS12",
	`tls.cipherSuites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256\,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256`,
	`tls.curvePreferences=4588\,29`,
	"networkpolicies.enabled=true",
	"networkpolicies.defaultDeny=true",
	"networkpolicies.metricsFrom[0].namespaceSelector.matchLabels.name=monitoring",
}

func init() {
	allOptions = append(allOptions, extraOptions("controller")...)
	allOptions = append(allOptions, extraOptions("speaker")...)
}

// TestChartLint runs `helm lint --strict` with the default values and with
// every option on.
func TestChartLint(t *testing.T) {
	bin, env := helm(t)
	chart := filepath.Join(repoRoot(t), "charts", "herald")
	for _, sets := range [][]string{nil, allOptions, {"webhook.enabled=false", "crds.enabled=false", "speaker.memberlist.enabled=false", "metrics.port=0"}} {
		args := []string{"lint", "--strict", chart, "--kube-version", kubeVersion}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		out := string(run(t, "", nil, env, bin, args...))
		if strings.Contains(out, "[WARNING]") || strings.Contains(out, "[ERROR]") {
			t.Errorf("helm lint %v:\n%s", sets, out)
		}
	}
}

func sameJSON(t *testing.T, what string, got, want any) {
	t.Helper()
	g, _ := json.MarshalIndent(got, "", " ")
	w, _ := json.MarshalIndent(want, "", " ")
	if string(g) != string(w) {
		t.Errorf("%s differs between the chart and manifests/herald.yaml:\nchart:     %s\nmanifests: %s", what, g, w)
	}
}

// TestChartMatchesManifests: with release name "herald" in herald-system
// and default values, the chart runs the binaries exactly as
// manifests/herald.yaml does and installs the same CRDs, webhooks and
// exclusion list.
func TestChartMatchesManifests(t *testing.T) {
	chart := parseObjects(t, helmTemplate(t, "herald", ns))
	man := heraldYAML(t)

	var cd, md appsv1.Deployment
	find(t, chart, "Deployment", ns, "herald-controller").into(t, &cd)
	find(t, man, "Deployment", ns, "herald-controller").into(t, &md)
	var cds, mds appsv1.DaemonSet
	find(t, chart, "DaemonSet", ns, "herald-speaker").into(t, &cds)
	find(t, man, "DaemonSet", ns, "herald-speaker").into(t, &mds)
	for _, p := range []struct {
		name       string
		chart, man corev1.PodSpec
	}{{"controller", cd.Spec.Template.Spec, md.Spec.Template.Spec}, {"speaker", cds.Spec.Template.Spec, mds.Spec.Template.Spec}} {
		c, m := container(t, p.chart, p.name), container(t, p.man, p.name)
		sameJSON(t, p.name+" image", c.Image, m.Image)
		sameJSON(t, p.name+" args", c.Args, m.Args)
		sameJSON(t, p.name+" env", c.Env, m.Env)
		sameJSON(t, p.name+" ports", c.Ports, m.Ports)
		sameJSON(t, p.name+" probes", []any{c.LivenessProbe, c.ReadinessProbe}, []any{m.LivenessProbe, m.ReadinessProbe})
		sameJSON(t, p.name+" container securityContext", c.SecurityContext, m.SecurityContext)
		sameJSON(t, p.name+" resources", c.Resources, m.Resources)
		sameJSON(t, p.name+" volumeMounts", c.VolumeMounts, m.VolumeMounts)
		sameJSON(t, p.name+" volumes", p.chart.Volumes, p.man.Volumes)
		sameJSON(t, p.name+" pod securityContext", p.chart.SecurityContext, p.man.SecurityContext)
		sameJSON(t, p.name+" serviceAccountName", p.chart.ServiceAccountName, p.man.ServiceAccountName)
		sameJSON(t, p.name+" hostNetwork", p.chart.HostNetwork, p.man.HostNetwork)
		sameJSON(t, p.name+" tolerations", p.chart.Tolerations, p.man.Tolerations)
		sameJSON(t, p.name+" nodeSelector", p.chart.NodeSelector, p.man.NodeSelector)
		sameJSON(t, p.name+" terminationGracePeriodSeconds", p.chart.TerminationGracePeriodSeconds, p.man.TerminationGracePeriodSeconds)
	}

	var ccm, mcm corev1.ConfigMap
	find(t, chart, "ConfigMap", ns, "herald-excludel2").into(t, &ccm)
	find(t, man, "ConfigMap", ns, "herald-excludel2").into(t, &mcm)
	sameJSON(t, "excludel2", ccm.Data, mcm.Data)

	for _, svc := range []string{"herald-webhook-service", "herald-controller-metrics", "herald-speaker-metrics"} {
		var cs, ms corev1.Service
		find(t, chart, "Service", ns, svc).into(t, &cs)
		find(t, man, "Service", ns, svc).into(t, &ms)
		sameJSON(t, svc+" ports", cs.Spec.Ports, ms.Spec.Ports)
		sameJSON(t, svc+" clusterIP", cs.Spec.ClusterIP, ms.Spec.ClusterIP)
	}
	find(t, chart, "Secret", ns, "herald-webhook-cert")
	// The controller creates the memberlist Secret; a chart-shipped one
	// would be deleted by helm uninstall (the key must outlive the release
	// like the CRDs) and emptied by helm upgrade.
	if slices.ContainsFunc(chart, func(o object) bool { return o.key() == "Secret/herald-system/herald-memberlist" }) {
		t.Error("the chart ships Secret herald-memberlist; the controller creates it")
	}

	var cw, mw admissionv1.ValidatingWebhookConfiguration
	find(t, chart, "ValidatingWebhookConfiguration", "", "herald-webhook-configuration").into(t, &cw)
	find(t, man, "ValidatingWebhookConfiguration", "", "herald-webhook-configuration").into(t, &mw)
	if len(mw.Webhooks) == 0 {
		t.Error("manifests/herald.yaml has no webhooks")
	}
	sameJSON(t, "webhooks", cw.Webhooks, mw.Webhooks)

	mcrds := ofKind(man, "CustomResourceDefinition")
	ccrds := ofKind(chart, "CustomResourceDefinition")
	if len(ccrds) != len(mcrds) {
		t.Errorf("chart has %d CRDs, manifests %d", len(ccrds), len(mcrds))
	}
	for _, m := range mcrds {
		var cc, mc apiextv1.CustomResourceDefinition
		find(t, chart, "CustomResourceDefinition", "", m.Meta.Name).into(t, &cc)
		m.into(t, &mc)
		if !reflect.DeepEqual(cc.Spec, mc.Spec) {
			sameJSON(t, "CRD "+m.Meta.Name, cc.Spec, mc.Spec)
		}
		if cc.Annotations["helm.sh/resource-policy"] != "keep" {
			t.Errorf("chart CRD %s lacks helm.sh/resource-policy: keep", m.Meta.Name)
		}
	}
}

// TestChartOptions checks that the values reach the objects.
func TestChartOptions(t *testing.T) {
	objs := parseObjects(t, helmTemplate(t, "herald", ns, allOptions...))
	var d appsv1.Deployment
	find(t, objs, "Deployment", ns, "herald-controller").into(t, &d)
	var ds appsv1.DaemonSet
	find(t, objs, "DaemonSet", ns, "herald-speaker").into(t, &ds)
	c, s := container(t, d.Spec.Template.Spec, "controller"), container(t, ds.Spec.Template.Spec, "speaker")
	tlsArgs := []string{"--tls-min-version=VersionTLS12",
		"--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
		"--tls-curve-preferences=4588,29"}
	wantArgs(t, c, tlsArgs...)
	wantArgs(t, s, tlsArgs...)
	wantArgs(t, c, "--lb-class=example.com/herald", "--log-level=debug", "--metrics-cert-dir=/etc/herald/metrics-tls")
	wantArgs(t, s, "--lb-class=example.com/herald", "--log-level=warn", "--ml-probe-interval=100ms",
		"--ml-suspicion-max-timeout-mult=4", "--ml-wan-config", "--ignore-exclude-lb",
		"--gratuitous-count=5", "--gratuitous-interval=200ms", "--l2-handover-timeout=300ms", "--metrics-cert-dir=/etc/herald/metrics-tls")
	if c.Image != "ghcr.io/herald-lb/herald-controller:v9.9.9" || s.Image != "registry.example.com/speaker:"+chartAppVersion(t) {
		t.Errorf("images %s %s", c.Image, s.Image)
	}
	if ds.Spec.Template.Spec.PriorityClassName != "system-node-critical" || d.Spec.Template.Spec.PriorityClassName != "system-cluster-critical" {
		t.Error("priorityClassName not applied")
	}
	if ds.Spec.Template.Spec.NodeSelector["zone"] != "a" || d.Spec.Template.Spec.NodeSelector["zone"] != "b" {
		t.Error("nodeSelector not applied")
	}
	if !slices.ContainsFunc(ds.Spec.Template.Spec.Tolerations, func(t corev1.Toleration) bool { return t.Key == "dedicated" }) ||
		!slices.ContainsFunc(ds.Spec.Template.Spec.Tolerations, func(t corev1.Toleration) bool { return t.Key == "node-role.kubernetes.io/control-plane" }) ||
		!slices.ContainsFunc(d.Spec.Template.Spec.Tolerations, func(t corev1.Toleration) bool { return t.Key == "infra" }) {
		t.Error("tolerations not applied")
	}
	if s.Resources.Limits.Memory().String() != "768Mi" || c.Resources.Limits.Memory().String() != "640Mi" {
		t.Error("resources not applied")
	}
	for _, k := range []string{
		"Namespace//herald-system",
		"ServiceMonitor/herald-system/herald-controller", "ServiceMonitor/herald-system/herald-speaker",
		"PodMonitor/herald-system/herald-controller", "PodMonitor/herald-system/herald-speaker",
		"PrometheusRule/herald-system/herald",
		"ClusterRoleBinding//herald-metrics-reader",
		"Secret/herald-system/herald-metrics-scraper",
		"ConfigMap/herald-system/herald-grafana-dashboard",
	} {
		if !slices.ContainsFunc(objs, func(o object) bool { return o.key() == k }) {
			t.Errorf("all options: no %s", k)
		}
	}
	var dash corev1.ConfigMap
	find(t, objs, "ConfigMap", ns, "herald-grafana-dashboard").into(t, &dash)
	if dash.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard labels %v", dash.Labels)
	}
	checkDashboard(t, []byte(dash.Data["herald.json"]))

	// Without rotation (cert-manager) the certificate directory is still a
	// writable emptyDir: the controller copies the Secret into it.
	objs = parseObjects(t, helmTemplate(t, "herald", ns, "webhook.certRotation.enabled=false"))
	find(t, objs, "Deployment", ns, "herald-controller").into(t, &d)
	c = container(t, d.Spec.Template.Spec, "controller")
	wantArgs(t, c, "--disable-cert-rotation", "--webhook-mode=enabled")
	writable := false
	for _, m := range c.VolumeMounts {
		for _, v := range d.Spec.Template.Spec.Volumes {
			writable = writable || (m.MountPath == "/tmp/k8s-webhook-server/serving-certs" && !m.ReadOnly && v.Name == m.Name && v.EmptyDir != nil)
		}
	}
	if !writable {
		t.Error("certRotation disabled: the --cert-dir is not a writable emptyDir")
	}
	if slices.ContainsFunc(objs, func(o object) bool { return o.key() == "Secret/herald-system/herald-webhook-cert" }) {
		t.Error("certRotation disabled: the chart ships Secret herald-webhook-cert, which cert-manager owns")
	}

	// Parts switched off.
	objs = parseObjects(t, helmTemplate(t, "herald", ns, "webhook.enabled=false", "crds.enabled=false",
		"speaker.memberlist.enabled=false", "layer2.enabled=false", "metrics.secure=false",
		"metrics.serviceMonitor.enabled=true", "speaker.excludeInterfaces.enabled=false"))
	find(t, objs, "Deployment", ns, "herald-controller").into(t, &d)
	find(t, objs, "DaemonSet", ns, "herald-speaker").into(t, &ds)
	c, s = container(t, d.Spec.Template.Spec, "controller"), container(t, ds.Spec.Template.Spec, "speaker")
	wantArgs(t, c, "--webhook-mode=disabled", "--metrics-secure=false")
	wantArgs(t, s, "--enable-l2=false", "--enable-bgp=true", "--metrics-secure=false")
	wantValue(t, envOf(c), "METALLB_ML_SECRET_NAME", "")
	for name := range envOf(s) {
		if strings.HasPrefix(name, "METALLB_ML_") {
			t.Errorf("memberlist disabled but speaker env has %s", name)
		}
	}
	if len(ds.Spec.Template.Spec.Volumes) != 0 {
		t.Errorf("speaker volumes %v with memberlist and excludeInterfaces off", ds.Spec.Template.Spec.Volumes)
	}
	for _, o := range objs {
		switch o.Kind {
		case "CustomResourceDefinition", "ValidatingWebhookConfiguration":
			t.Errorf("%s rendered with crds and webhook disabled", o.key())
		case "ServiceMonitor":
			var sm struct {
				Spec struct {
					Endpoints []struct{ Scheme string } `json:"endpoints"`
				} `json:"spec"`
			}
			if err := yaml.Unmarshal(o.Raw, &sm); err != nil || len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Scheme != "http" {
				t.Errorf("%s with metrics.secure=false: %+v %v", o.key(), sm, err)
			}
		}
	}
}

// checkDashboard checks that the Grafana dashboard is valid JSON whose
// panels query Herald's metrics, covering pools, allocations,
// announcements, BGP sessions, Layer 2 traffic and failovers, pending
// Services, allocation latency, memberlist and layer 2 conflicts.
func checkDashboard(t *testing.T, data []byte) {
	t.Helper()
	var d struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("dashboard title %q uid %q", d.Title, d.UID)
	}
	var exprs []string
	for _, p := range d.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	all := strings.Join(exprs, "\n")
	for _, m := range []string{
		"metallb_allocator_addresses_total", "metallb_allocator_addresses_in_use_total",
		"metallb_speaker_announced", "metallb_bgp_session_up", "metallb_bgp_announced_prefixes_total",
		"metallb_layer2_requests_received", "metallb_layer2_responses_sent", "metallb_layer2_gratuitous_sent",
		"metallb_k8s_client_config_stale_bool",
		"herald_layer2_announcer_changes_total", "herald_services_pending", "herald_allocation_duration_seconds_bucket",
		"herald_memberlist_members", "herald_memberlist_health_score", "herald_layer2_conflicts_total",
	} {
		if !strings.Contains(all, m) {
			t.Errorf("no dashboard panel queries %s", m)
		}
	}
}

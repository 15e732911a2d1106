package packaging

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/herald-lb/herald/internal/layer2"
)

const ns = "herald-system"

// TestRenderedFilesFresh re-renders manifests/herald.yaml and the chart's
// copies of the CRDs and webhooks into a temporary directory and compares
// them with the committed files.
func TestRenderedFilesFresh(t *testing.T) {
	root := repoRoot(t)
	out := t.TempDir()
	run(t, root, nil, []string{"KUBECTL=" + kubectl(t)}, filepath.Join(root, "hack", "render-manifests.sh"), out)
	var files []string
	err := filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(out, p)
			files = append(files, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("render-manifests.sh wrote only %v", files)
	}
	for _, rel := range files {
		want := readFile(t, filepath.Join(out, rel))
		got, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run make manifests", rel)
		}
	}
	// Nothing left over in the chart's CRD copies.
	entries, err := os.ReadDir(filepath.Join(root, "charts", "herald", "files", "crds"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !slices.Contains(files, filepath.Join("charts", "herald", "files", "crds", e.Name())) {
			t.Errorf("charts/herald/files/crds/%s is not in manifests/crds: run make manifests", e.Name())
		}
	}
}

// TestManifestNames checks manifests/herald.yaml against the shared names
// and flags of the binaries (the defaults in controller/ and speaker/, listed
// in docs/install.md).
func TestManifestNames(t *testing.T) {
	objs := heraldYAML(t)
	for _, o := range objs {
		if o.Meta.Labels["app.kubernetes.io/name"] != "herald" {
			t.Errorf("%s lacks the label app.kubernetes.io/name=herald", o.key())
		}
		if o.Meta.Namespace != "" && o.Meta.Namespace != ns {
			t.Errorf("%s is outside %s", o.key(), ns)
		}
	}
	for _, k := range []string{
		"Namespace//herald-system",
		"ServiceAccount/herald-system/herald-controller",
		"ServiceAccount/herald-system/herald-speaker",
		"Deployment/herald-system/herald-controller",
		"DaemonSet/herald-system/herald-speaker",
		"Service/herald-system/herald-webhook-service",
		"Service/herald-system/herald-controller-metrics",
		"Service/herald-system/herald-speaker-metrics",
		"ValidatingWebhookConfiguration//herald-webhook-configuration",
		"Secret/herald-system/herald-webhook-cert",
		"ConfigMap/herald-system/herald-excludel2",
	} {
		if !slices.ContainsFunc(objs, func(o object) bool { return o.key() == k }) {
			t.Errorf("manifests/herald.yaml has no %s", k)
		}
	}
	// The controller creates the memberlist Secret; it is not shipped (an
	// applied Secret would be emptied by the next apply).
	if slices.ContainsFunc(objs, func(o object) bool { return o.key() == "Secret/herald-system/herald-memberlist" }) {
		t.Error("manifests/herald.yaml ships Secret herald-memberlist; the controller creates it")
	}
	var nsObj corev1.Namespace
	find(t, objs, "Namespace", "", ns).into(t, &nsObj)
	for _, mode := range []string{"enforce", "audit", "warn"} {
		if v := nsObj.Labels["pod-security.kubernetes.io/"+mode]; v != "privileged" {
			t.Errorf("namespace label pod-security.kubernetes.io/%s = %q, want privileged", mode, v)
		}
	}
	var metallb, own []string
	for _, o := range ofKind(objs, "CustomResourceDefinition") {
		if strings.HasSuffix(o.Meta.Name, ".metallb.io") {
			metallb = append(metallb, o.Meta.Name)
		} else {
			own = append(own, o.Meta.Name)
		}
	}
	if len(metallb) != 9 {
		t.Errorf("%d metallb.io CRDs in manifests/herald.yaml, want MetalLB's 9: %v", len(metallb), metallb)
	}
	if len(own) != 1 || own[0] != "bgpsessionstates.herald.io" {
		t.Errorf("Herald's own CRDs in manifests/herald.yaml: %v, want bgpsessionstates.herald.io", own)
	}
}

func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q", name)
	return corev1.Container{}
}

func envOf(c corev1.Container) map[string]corev1.EnvVar {
	m := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		m[e.Name] = e
	}
	return m
}

func wantFieldRef(t *testing.T, env map[string]corev1.EnvVar, name, path string) {
	t.Helper()
	e, ok := env[name]
	if !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != path {
		t.Errorf("env %s: want fieldRef %s, got %+v", name, path, e)
	}
}

func wantValue(t *testing.T, env map[string]corev1.EnvVar, name, value string) {
	t.Helper()
	if e, ok := env[name]; !ok || e.Value != value || e.ValueFrom != nil {
		t.Errorf("env %s: want %q, got %+v", name, value, e)
	}
}

func wantArgs(t *testing.T, c corev1.Container, args ...string) {
	t.Helper()
	for _, a := range args {
		if !slices.Contains(c.Args, a) {
			t.Errorf("container %s: no arg %s in %v", c.Name, a, c.Args)
		}
	}
}

func TestControllerDeployment(t *testing.T) {
	objs := heraldYAML(t)
	var d appsv1.Deployment
	find(t, objs, "Deployment", ns, "herald-controller").into(t, &d)
	spec := d.Spec.Template.Spec
	if spec.ServiceAccountName != "herald-controller" {
		t.Errorf("serviceAccountName %q", spec.ServiceAccountName)
	}
	if got := d.Spec.Template.Labels; got["app.kubernetes.io/name"] != "herald" || got["app.kubernetes.io/component"] != "controller" {
		t.Errorf("pod labels %v", got)
	}
	c := container(t, spec, "controller")
	if c.Image != "ghcr.io/herald-lb/herald-controller:"+chartAppVersion(t) {
		t.Errorf("image %s, want the chart's appVersion %s", c.Image, chartAppVersion(t))
	}
	wantArgs(t, c, "--port=9120", "--health-probe-port=17472", "--webhook-port=9443",
		"--webhook-mode=enabled",
		"--cert-dir=/tmp/k8s-webhook-server/serving-certs",
		"--cert-service-name=herald-webhook-service",
		"--webhook-secret=herald-webhook-cert",
		"--webhook-configuration-name=herald-webhook-configuration")
	env := envOf(c)
	wantFieldRef(t, env, "METALLB_NAMESPACE", "metadata.namespace")
	wantFieldRef(t, env, "METALLB_POD_NAME", "metadata.name")
	wantValue(t, env, "METALLB_ML_SECRET_NAME", "herald-memberlist")
	wantValue(t, env, "METALLB_DEPLOYMENT", "herald-controller")

	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65534 {
		t.Errorf("pod securityContext %+v: want runAsNonRoot, runAsUser 65534", psc)
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Errorf("container securityContext %+v", sc)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["metrics"] != 9120 || ports["webhook"] != 9443 || ports["health"] != 17472 {
		t.Errorf("ports %v", ports)
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.String() != "health" {
			t.Errorf("probe %+v: want httpGet on the health port", p)
		}
	}
	// The certificate directory is writable (the root filesystem is not).
	mounted := false
	for _, m := range c.VolumeMounts {
		if m.MountPath == "/tmp/k8s-webhook-server/serving-certs" && !m.ReadOnly {
			for _, v := range spec.Volumes {
				mounted = mounted || (v.Name == m.Name && v.EmptyDir != nil)
			}
		}
	}
	if !mounted {
		t.Error("no writable emptyDir at the --cert-dir")
	}
	// The webhook Service and the metrics Service select this pod.
	for _, svc := range []string{"herald-webhook-service", "herald-controller-metrics"} {
		var s corev1.Service
		find(t, objs, "Service", ns, svc).into(t, &s)
		if !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) || len(s.Spec.Selector) == 0 {
			t.Errorf("Service %s selector %v does not select the controller pod", svc, s.Spec.Selector)
		}
	}
}

func TestSpeakerDaemonSet(t *testing.T) {
	objs := heraldYAML(t)
	var ds appsv1.DaemonSet
	find(t, objs, "DaemonSet", ns, "herald-speaker").into(t, &ds)
	spec := ds.Spec.Template.Spec
	if spec.ServiceAccountName != "herald-speaker" || !spec.HostNetwork {
		t.Errorf("serviceAccountName %q hostNetwork %v", spec.ServiceAccountName, spec.HostNetwork)
	}
	// The speaker exits within shutdownBudget (4 s, speaker/run.go) of
	// SIGTERM; the grace period must cover it with margin, or the kubelet's
	// SIGKILL can come first (docs/reliability.md, "Speaker shutdown").
	if g := spec.TerminationGracePeriodSeconds; g == nil || *g != 5 {
		t.Errorf("terminationGracePeriodSeconds %v, want 5", g)
	}
	tolerated := false
	for _, tol := range spec.Tolerations {
		tolerated = tolerated || (tol.Key == "node-role.kubernetes.io/control-plane" && tol.Effect == corev1.TaintEffectNoSchedule && tol.Operator == corev1.TolerationOpExists)
	}
	if !tolerated {
		t.Error("speaker does not tolerate control-plane nodes")
	}
	c := container(t, spec, "speaker")
	if c.Image != "ghcr.io/herald-lb/herald-speaker:"+chartAppVersion(t) {
		t.Errorf("image %s", c.Image)
	}
	wantArgs(t, c, "--port=9120", "--health-probe-port=17472", "--enable-l2=true", "--enable-bgp=true",
		"--exclude-l2-config=/etc/metallb/excludel2.yaml")
	env := envOf(c)
	wantFieldRef(t, env, "METALLB_NODE_NAME", "spec.nodeName")
	wantFieldRef(t, env, "METALLB_POD_NAME", "metadata.name")
	wantFieldRef(t, env, "METALLB_NAMESPACE", "metadata.namespace")
	wantFieldRef(t, env, "METALLB_ML_BIND_ADDR", "status.podIP")
	wantValue(t, env, "METALLB_ML_LABELS", "app.kubernetes.io/name=herald,app.kubernetes.io/component=speaker")
	wantValue(t, env, "METALLB_ML_BIND_PORT", "7946")
	wantValue(t, env, "METALLB_ML_SECRET_KEY_PATH", "/etc/ml_secret_key")

	// Memberlist discovery finds exactly the speaker pods.
	sel, err := labels.Parse(env["METALLB_ML_LABELS"].Value)
	if err != nil || !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("METALLB_ML_LABELS %q does not select the speaker pods (%v): %v", env["METALLB_ML_LABELS"].Value, ds.Spec.Template.Labels, err)
	}
	var d appsv1.Deployment
	find(t, objs, "Deployment", ns, "herald-controller").into(t, &d)
	if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Error("METALLB_ML_LABELS selects the controller pod too")
	}

	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		!slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_RAW"}) {
		t.Errorf("capabilities %+v: want drop ALL, add only NET_RAW", sc)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("securityContext %+v: want a read-only root and no privilege escalation", sc)
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("speaker is privileged")
	}
	// Probes reach the loopback-bound health server from the node.
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Host != "127.0.0.1" || p.HTTPGet.Port.IntValue() != 17472 {
			t.Errorf("probe %+v: want httpGet 127.0.0.1:17472", p)
		}
	}
	// /readyz fails until the speaker has a configuration snapshot
	// (speaker.Controller.Ready), so a rolling update one node at a time stops
	// at the first speaker that cannot load its configuration.
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
		t.Errorf("readinessProbe %+v: want httpGet /readyz", p)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Errorf("livenessProbe %+v: want httpGet /healthz", p)
	}
	if u := ds.Spec.UpdateStrategy; u.Type != appsv1.RollingUpdateDaemonSetStrategyType || u.RollingUpdate == nil ||
		u.RollingUpdate.MaxUnavailable == nil || u.RollingUpdate.MaxUnavailable.IntValue() != 1 {
		t.Errorf("updateStrategy %+v: want RollingUpdate, maxUnavailable 1", u)
	}
	// Mounts: the memberlist key and the excludel2 file.
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
		// The kubelet never updates a subPath mount: a new memberlist key
		// would need a restart and split the cluster.
		if m.SubPath != "" || m.SubPathExpr != "" {
			t.Errorf("speaker mount %s uses a subPath; mounted Secrets must update in place", m.MountPath)
		}
	}
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	if v := vols[mounts["/etc/ml_secret_key"]]; v.Secret == nil || v.Secret.SecretName != "herald-memberlist" {
		t.Errorf("/etc/ml_secret_key: want Secret herald-memberlist, got %+v", v)
	}
	if v := vols[mounts["/etc/metallb"]]; v.ConfigMap == nil || v.ConfigMap.Name != "herald-excludel2" {
		t.Errorf("/etc/metallb: want ConfigMap herald-excludel2, got %+v", v)
	}
	var s corev1.Service
	find(t, objs, "Service", ns, "herald-speaker-metrics").into(t, &s)
	if len(s.Spec.Selector) == 0 || !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("herald-speaker-metrics selector %v does not select the speakers", s.Spec.Selector)
	}
}

// TestExcludeL2Defaults: the shipped ConfigMap holds the speaker's
// built-in list (MetalLB's), so shipping it changes nothing by default.
func TestExcludeL2Defaults(t *testing.T) {
	var cm corev1.ConfigMap
	find(t, heraldYAML(t), "ConfigMap", ns, "herald-excludel2").into(t, &cm)
	var file struct {
		AnnouncedInterfacesToExclude []string `json:"announcedInterfacesToExclude"`
	}
	if err := yaml.UnmarshalStrict([]byte(cm.Data["excludel2.yaml"]), &file); err != nil {
		t.Fatalf("excludel2.yaml: %v", err)
	}
	if want := layer2.DefaultExcludeInterfaces(); !slices.Equal(file.AnnouncedInterfacesToExclude, want) {
		t.Errorf("excludel2.yaml lists %v, want layer2.DefaultExcludeInterfaces() %v", file.AnnouncedInterfacesToExclude, want)
	}
}

// TestBGPPeerConversion: BGPPeer converts through the controller's
// webhook at /convert; no other CRD does.
func TestBGPPeerConversion(t *testing.T) {
	for _, o := range ofKind(heraldYAML(t), "CustomResourceDefinition") {
		var crd struct {
			Spec struct {
				Conversion *struct {
					Strategy string `json:"strategy"`
					Webhook  struct {
						ClientConfig struct {
							Service struct{ Name, Namespace, Path string } `json:"service"`
						} `json:"clientConfig"`
					} `json:"webhook"`
				} `json:"conversion"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(o.Raw, &crd); err != nil {
			t.Fatal(err)
		}
		conv := crd.Spec.Conversion
		if o.Meta.Name != "bgppeers.metallb.io" {
			if conv != nil && conv.Strategy == "Webhook" {
				t.Errorf("%s converts through a webhook", o.Meta.Name)
			}
			continue
		}
		if conv == nil || conv.Strategy != "Webhook" || conv.Webhook.ClientConfig.Service.Name != "herald-webhook-service" ||
			conv.Webhook.ClientConfig.Service.Namespace != ns || conv.Webhook.ClientConfig.Service.Path != "/convert" {
			t.Errorf("bgppeers.metallb.io conversion %+v: want the webhook herald-webhook-service /convert", conv)
		}
	}
}

// chartAppVersion is charts/herald/Chart.yaml's appVersion, the release
// the manifests' image tags must name.
func chartAppVersion(t *testing.T) string {
	t.Helper()
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(readFile(t, filepath.Join(repoRoot(t), "charts", "herald", "Chart.yaml")), &c); err != nil || c.AppVersion == "" {
		t.Fatalf("charts/herald/Chart.yaml appVersion: %q %v", c.AppVersion, err)
	}
	return strings.TrimSpace(c.AppVersion)
}

// TestPrometheusManifests: manifests/herald-prometheus.yaml is
// manifests/herald.yaml plus ServiceMonitors that select the metrics
// Services by their "metrics" port, and the /metrics reader binding.
func TestPrometheusManifests(t *testing.T) {
	base := heraldYAML(t)
	prom := parseObjects(t, readFile(t, filepath.Join(repoRoot(t), "manifests", "herald-prometheus.yaml")))
	byKey := map[string]object{}
	for _, o := range prom {
		byKey[o.key()] = o
	}
	for _, o := range base {
		p, ok := byKey[o.key()]
		if !ok || !bytes.Equal(uncommented(p.Raw), uncommented(o.Raw)) {
			t.Errorf("%s differs from manifests/herald.yaml", o.key())
		}
	}
	if len(prom) != len(base)+3 {
		t.Errorf("herald-prometheus.yaml has %d objects, want herald.yaml's %d + 2 ServiceMonitors + 1 binding", len(prom), len(base))
	}
	find(t, prom, "ClusterRoleBinding", "", "herald-metrics-reader")
	for _, component := range []string{"controller", "speaker"} {
		var sm struct {
			Spec struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				Endpoints []struct {
					Port, Scheme string
				} `json:"endpoints"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(find(t, prom, "ServiceMonitor", ns, "herald-"+component).Raw, &sm); err != nil {
			t.Fatal(err)
		}
		var svc corev1.Service
		find(t, base, "Service", ns, "herald-"+component+"-metrics").into(t, &svc)
		if len(sm.Spec.Selector.MatchLabels) == 0 || !labels.SelectorFromSet(sm.Spec.Selector.MatchLabels).Matches(labels.Set(svc.Labels)) {
			t.Errorf("ServiceMonitor herald-%s selector %v does not select Service %s (%v)", component, sm.Spec.Selector.MatchLabels, svc.Name, svc.Labels)
		}
		if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" || sm.Spec.Endpoints[0].Scheme != "https" {
			t.Errorf("ServiceMonitor herald-%s endpoints %+v: want port metrics over https", component, sm.Spec.Endpoints)
		}
		if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "metrics" }) {
			t.Errorf("Service %s has no port named metrics", svc.Name)
		}
	}
}

// uncommented drops the comment lines of a YAML document (the rendered
// files' headers).
func uncommented(doc []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(l, []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

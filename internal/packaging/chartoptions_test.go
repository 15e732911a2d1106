package packaging

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// TestChartTLS: the TLS 1.3 default reaches both components, and cipher
// suites without VersionTLS12 are refused at install with the keys to
// change, as the binaries would refuse them at start.
func TestChartTLS(t *testing.T) {
	objs := parseObjects(t, helmTemplate(t, "herald", ns))
	var d appsv1.Deployment
	find(t, objs, "Deployment", ns, "herald-controller").into(t, &d)
	var ds appsv1.DaemonSet
	find(t, objs, "DaemonSet", ns, "herald-speaker").into(t, &ds)
	for _, c := range []string{"controller", "speaker"} {
		spec := d.Spec.Template.Spec
		if c == "speaker" {
			spec = ds.Spec.Template.Spec
		}
		ct := container(t, spec, c)
		wantArgs(t, ct, "--tls-min-version=VersionTLS13")
		for _, a := range ct.Args {
			if strings.HasPrefix(a, "--tls-cipher-suites") || strings.HasPrefix(a, "--tls-curve-preferences") {
				t.Errorf("%s: default render has %s", c, a)
			}
		}
	}
	out, ok := helmTemplateErr(t, "--set", "tls.cipherSuites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256")
	if ok || !strings.Contains(out, "tls.cipherSuites apply to TLS 1.2 only") || !strings.Contains(out, "tls.minVersion: VersionTLS12") {
		t.Errorf("cipher suites with TLS 1.3: installed %t, want a refusal naming tls.minVersion:\n%s", ok, out)
	}
	if out, ok := helmTemplateErr(t, "--set", "tls.curvePreferences=X25519"); ok || !strings.Contains(out, "curvePreferences") {
		t.Errorf("curve by name: installed %t, want the schema's refusal:\n%s", ok, out)
	}
}

// TestChartSchemaClosed: values.schema.json refuses unknown keys in every
// object (a typo such as controller.resources.limit would otherwise do
// nothing): each object node lists its keys with additionalProperties:
// false, or is a map with a value schema (labels, annotations, resource
// quantities), or a Kubernetes or Prometheus object passed as is (its
// description says so). Helm refuses a typo at each level with its schema
// error.
func TestChartSchemaClosed(t *testing.T) {
	var schema map[string]any
	if err := json.Unmarshal(readFile(t, filepath.Join(repoRoot(t), "charts", "herald", "values.schema.json")), &schema); err != nil {
		t.Fatal(err)
	}
	var walk func(path string, n map[string]any)
	objects := 0
	walk = func(path string, n map[string]any) {
		_, hasProps := n["properties"].(map[string]any)
		if n["type"] == "object" || hasProps {
			objects++
			desc, _ := n["description"].(string)
			ap, hasAP := n["additionalProperties"]
			switch {
			case hasAP && ap == false:
			case hasAP && ap != true:
				// A map with a value schema.
			case strings.HasPrefix(desc, "Passed as is"):
			default:
				t.Errorf("schema %s: an object open to unknown keys (no additionalProperties: false)", path)
			}
		}
		for _, k := range []string{"properties", "definitions"} {
			m, _ := n[k].(map[string]any)
			for name, c := range m {
				if cm, ok := c.(map[string]any); ok {
					walk(path+"/"+name, cm)
				}
			}
		}
		for _, k := range []string{"items", "additionalProperties"} {
			if cm, ok := n[k].(map[string]any); ok {
				walk(path+"/"+k, cm)
			}
		}
	}
	walk("", schema)
	if objects < 40 {
		t.Errorf("walked %d object schemas; the schema's layout changed?", objects)
	}

	for _, tc := range []struct{ set, want string }{
		{"metric.port=9121", "at '': additional properties 'metric' not allowed"},
		{"speaker.memberlist.bindport=7947", "at '/speaker/memberlist': additional properties 'bindport' not allowed"},
		{"controller.resources.limit.memory=1Gi", "at '/controller/resources': additional properties 'limit' not allowed"},
		{"networkpolicies.enable=true", "at '/networkpolicies': additional properties 'enable' not allowed"},
		{"speaker.startupProbe.path=/readyz", "at '/speaker/startupProbe': additional properties 'path' not allowed"},
		{"metrics.serviceMonitor.enable=true", "at '/metrics/serviceMonitor': additional properties 'enable' not allowed"},
		{"controller.extraEnvs[0].name=A", "at '/controller': additional properties 'extraEnvs' not allowed"},
	} {
		out, ok := helmTemplateErr(t, "--set", tc.set)
		if ok || !strings.Contains(out, tc.want) {
			t.Errorf("--set %s: installed %t, want the schema's %q:\n%s", tc.set, ok, tc.want, out)
		}
	}
}

// extraOptions turns on the per-component extras; they are part of
// allOptions (so also applied to the real API server in TestAPIServer).
func extraOptions(component string) []string {
	p := component + "."
	return []string{
		p + "startupProbe.enabled=true",
		p + "startupProbe.failureThreshold=20",
		p + "extraEnv[0].name=HERALD_TEST_ENV",
		p + "extraEnv[0].value=on",
		p + "extraVolumes[0].name=extra",
		p + "extraVolumes[0].emptyDir.medium=Memory",
		p + "extraVolumeMounts[0].name=extra",
		p + "extraVolumeMounts[0].mountPath=/extra",
		p + "extraContainers[0].name=sidecar",
		p + "extraContainers[0].image=registry.example.com/sidecar:1",
		p + "extraContainers[0].volumeMounts[0].name=extra",
		p + "extraContainers[0].volumeMounts[0].mountPath=/extra",
	}
}

// TestChartExtras: startupProbe, extraEnv, extraVolumes, extraVolumeMounts
// and extraContainers reach both Pods; the startup probe asks /healthz
// (never /readyz: the speaker is not ready while its configuration is
// invalid, which must hold a rollout, not restart the Pod).
func TestChartExtras(t *testing.T) {
	objs := parseObjects(t, helmTemplate(t, "herald", ns, allOptions...))
	var d appsv1.Deployment
	find(t, objs, "Deployment", ns, "herald-controller").into(t, &d)
	var ds appsv1.DaemonSet
	find(t, objs, "DaemonSet", ns, "herald-speaker").into(t, &ds)
	for _, p := range []struct {
		name string
		spec corev1.PodSpec
	}{{"controller", d.Spec.Template.Spec}, {"speaker", ds.Spec.Template.Spec}} {
		c := container(t, p.spec, p.name)
		sp := c.StartupProbe
		if sp == nil || sp.HTTPGet == nil || sp.HTTPGet.Path != "/healthz" || sp.FailureThreshold != 20 || sp.PeriodSeconds != 2 {
			t.Errorf("%s startupProbe %+v, want /healthz, failureThreshold 20, periodSeconds 2", p.name, sp)
		} else if sp.HTTPGet.Port != c.LivenessProbe.HTTPGet.Port || sp.HTTPGet.Host != c.LivenessProbe.HTTPGet.Host {
			t.Errorf("%s startupProbe %+v does not ask the liveness probe's endpoint %+v", p.name, sp.HTTPGet, c.LivenessProbe.HTTPGet)
		}
		wantValue(t, envOf(c), "HERALD_TEST_ENV", "on")
		if _, ok := envOf(c)["GOMEMLIMIT"]; !ok {
			t.Errorf("%s: extraEnv replaced the chart's env", p.name)
		}
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "extra" && m.MountPath == "/extra" }) {
			t.Errorf("%s: no extra volume mount in %v", p.name, c.VolumeMounts)
		}
		if !slices.ContainsFunc(p.spec.Volumes, func(v corev1.Volume) bool { return v.Name == "extra" && v.EmptyDir != nil }) {
			t.Errorf("%s: no extra volume in %v", p.name, p.spec.Volumes)
		}
		if len(p.spec.Containers) != 2 || container(t, p.spec, "sidecar").Image != "registry.example.com/sidecar:1" {
			t.Errorf("%s: containers %v, want %s and sidecar", p.name, p.spec.Containers, p.name)
		}
	}

	// Defaults: none of it.
	objs = parseObjects(t, helmTemplate(t, "herald", ns))
	var d0 appsv1.Deployment
	find(t, objs, "Deployment", ns, "herald-controller").into(t, &d0)
	var ds0 appsv1.DaemonSet
	find(t, objs, "DaemonSet", ns, "herald-speaker").into(t, &ds0)
	for _, spec := range []corev1.PodSpec{d0.Spec.Template.Spec, ds0.Spec.Template.Spec} {
		if len(spec.Containers) != 1 || spec.Containers[0].StartupProbe != nil {
			t.Errorf("default render: containers %d, startupProbe %v", len(spec.Containers), spec.Containers[0].StartupProbe)
		}
	}
	if np := ofKind(objs, "NetworkPolicy"); len(np) != 0 {
		t.Errorf("default render has NetworkPolicies (off by default, as in MetalLB's chart): %v", np)
	}
}

// npPorts returns "TCP/9443"-style names of the ports of a rule list.
func npPorts(rules []networkingv1.NetworkPolicyPort) []string {
	var out []string
	for _, p := range rules {
		out = append(out, string(*p.Protocol)+"/"+p.Port.String())
	}
	sort.Strings(out)
	return out
}

// TestChartNetworkPolicies: with networkpolicies.enabled the controller
// accepts its webhook and metrics ports and reaches only the API server;
// the speaker accepts metrics, memberlist and BFD and reaches the API
// server, memberlist, BGP and BFD; defaultDeny selects only this
// release's Pods. Ports follow the values they come from.
func TestChartNetworkPolicies(t *testing.T) {
	objs := parseObjects(t, helmTemplate(t, "herald", ns, "networkpolicies.enabled=true", "networkpolicies.defaultDeny=true",
		"networkpolicies.metricsFrom[0].namespaceSelector.matchLabels.name=monitoring"))
	var deny, ctl, spk networkingv1.NetworkPolicy
	find(t, objs, "NetworkPolicy", ns, "herald-default-deny").into(t, &deny)
	find(t, objs, "NetworkPolicy", ns, "herald-controller").into(t, &ctl)
	find(t, objs, "NetworkPolicy", ns, "herald-speaker").into(t, &spk)
	if got := deny.Spec.PodSelector.MatchLabels; len(got) != 2 || got["app.kubernetes.io/name"] != "herald" || got["app.kubernetes.io/instance"] != "herald" ||
		len(deny.Spec.Ingress) != 0 || len(deny.Spec.Egress) != 0 || len(deny.Spec.PolicyTypes) != 2 {
		t.Errorf("default deny %+v", deny.Spec)
	}
	type rules struct{ ingress, egress [][]string }
	get := func(p networkingv1.NetworkPolicy) rules {
		var r rules
		for _, i := range p.Spec.Ingress {
			r.ingress = append(r.ingress, npPorts(i.Ports))
		}
		for _, e := range p.Spec.Egress {
			r.egress = append(r.egress, npPorts(e.Ports))
		}
		return r
	}
	sameJSON(t, "controller policy", get(ctl), rules{
		ingress: [][]string{{"TCP/9443"}, {"TCP/9120"}},
		egress:  [][]string{{"TCP/443", "TCP/6443"}},
	})
	sameJSON(t, "speaker policy", get(spk), rules{
		ingress: [][]string{{"TCP/9120"}, {"TCP/7946", "UDP/3784", "UDP/4784", "UDP/7946"}},
		egress:  [][]string{{"TCP/179", "TCP/443", "TCP/6443", "TCP/7946", "UDP/3784", "UDP/4784", "UDP/7946"}},
	})
	if from := ctl.Spec.Ingress[1].From; len(from) != 1 || from[0].NamespaceSelector.MatchLabels["name"] != "monitoring" {
		t.Errorf("controller metrics ingress from %+v, want networkpolicies.metricsFrom", from)
	}
	if from := ctl.Spec.Ingress[0].From; len(from) != 0 {
		t.Errorf("webhook ingress from %+v: the API server calls from node addresses, must be open", from)
	}
	for _, p := range []networkingv1.NetworkPolicy{ctl, spk} {
		if p.Spec.PodSelector.MatchLabels["app.kubernetes.io/component"] == "" {
			t.Errorf("%s selects no component", p.Name)
		}
	}

	objs = parseObjects(t, helmTemplate(t, "herald", ns, "networkpolicies.enabled=true", "webhook.port=10443", "metrics.port=7472",
		"speaker.memberlist.bindPort=7947", "networkpolicies.apiPort=443", "networkpolicies.bgpPorts[0]=1179", "bgp.enabled=false"))
	if slices.ContainsFunc(objs, func(o object) bool { return o.key() == "NetworkPolicy/herald-system/herald-default-deny" }) {
		t.Error("default deny without networkpolicies.defaultDeny")
	}
	ctl, spk = networkingv1.NetworkPolicy{}, networkingv1.NetworkPolicy{}
	find(t, objs, "NetworkPolicy", ns, "herald-controller").into(t, &ctl)
	find(t, objs, "NetworkPolicy", ns, "herald-speaker").into(t, &spk)
	sameJSON(t, "controller policy, other ports", get(ctl), rules{
		ingress: [][]string{{"TCP/10443"}, {"TCP/7472"}},
		egress:  [][]string{{"TCP/443"}},
	})
	sameJSON(t, "speaker policy, other ports, no BGP", get(spk), rules{
		ingress: [][]string{{"TCP/7472"}, {"TCP/7947", "UDP/7947"}},
		egress:  [][]string{{"TCP/443", "TCP/7947", "UDP/7947"}},
	})
}

// TestChartSpeakerGOGC: the speaker runs with GOGC from speaker.goGC (50 by
// default, a number or a string, none for ""), the controller without it
// (issue #16: the speaker's memory counts once per node).
func TestChartSpeakerGOGC(t *testing.T) {
	for _, tc := range []struct {
		sets []string
		want string // "" = no GOGC
	}{
		{nil, "50"},
		{[]string{"speaker.goGC=75"}, "75"},
		{[]string{"speaker.goGC=off"}, "off"},
		{[]string{"speaker.goGC="}, ""},
	} {
		objs := parseObjects(t, helmTemplate(t, "herald", ns, tc.sets...))
		var ds appsv1.DaemonSet
		find(t, objs, "DaemonSet", ns, "herald-speaker").into(t, &ds)
		e, ok := envOf(container(t, ds.Spec.Template.Spec, "speaker"))["GOGC"]
		if got := e.Value; ok != (tc.want != "") || got != tc.want {
			t.Errorf("%v: speaker GOGC %q (set %v), want %q", tc.sets, got, ok, tc.want)
		}
		var d appsv1.Deployment
		find(t, objs, "Deployment", ns, "herald-controller").into(t, &d)
		if e, ok := envOf(container(t, d.Spec.Template.Spec, "controller"))["GOGC"]; ok {
			t.Errorf("%v: the controller has GOGC %q", tc.sets, e.Value)
		}
	}
}

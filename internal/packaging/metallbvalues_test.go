package packaging

import (
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// helmTemplateErr renders charts/herald like helmTemplate with extra
// arguments and returns the combined output and whether helm succeeded.
func helmTemplateErr(t *testing.T, args ...string) (string, bool) {
	t.Helper()
	bin, env := helm(t)
	all := append([]string{"template", "herald", filepath.Join(repoRoot(t), "charts", "herald"), "--namespace", ns, "--kube-version", kubeVersion}, args...)
	out, err := tryRun("", nil, env, bin, all...)
	if err != nil {
		return err.Error(), false
	}
	return string(out), true
}

// leaves returns the dotted paths of v's non-map values, with whether each
// asks for something (not null, "", [] or {}).
func leaves(prefix string, v any, out map[string]bool) {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		set := true
		switch x := v.(type) {
		case nil:
			set = false
		case string:
			set = x != ""
		case []any:
			set = len(x) > 0
		case map[string]any:
			set = false
		}
		out[prefix] = set
		return
	}
	for k, c := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		leaves(p, c, out)
	}
}

// TestChartMetalLBValues installs the chart with MetalLB's chart values
// (testdata/metallb-values.yaml, MetalLB's defaults): every value MetalLB's
// chart reads is either one Herald's chart reads under the same key, or
// the install fails with a message naming the key and the Herald key to
// set instead. Nothing is accepted silently.
func TestChartMetalLBValues(t *testing.T) {
	metallbFile := filepath.Join(repoRoot(t), "internal", "packaging", "testdata", "metallb-values.yaml")
	out, ok := helmTemplateErr(t, "-f", metallbFile)
	if ok {
		t.Fatal("MetalLB's values file installed without a word; want a refusal naming the MetalLB keys")
	}
	var reported []string
	for _, line := range strings.Split(out, "\n") {
		if k, hint, found := strings.Cut(strings.TrimSpace(line), " -> "); found && hint != "" {
			reported = append(reported, k)
		}
	}
	if len(reported) == 0 {
		t.Fatalf("refusal names no key:\n%s", out)
	}
	// MetalLB's values file pins MetalLB's images: under Herald's chart they
	// would run MetalLB's binaries with Herald's flags.
	for _, k := range []string{"controller.image.repository", "speaker.image.repository"} {
		if !slices.Contains(reported, k) {
			t.Errorf("refusal does not name %s (MetalLB's image):\n%s", k, out)
		}
	}

	var metallb, herald map[string]any
	if err := yaml.Unmarshal(readFile(t, metallbFile), &metallb); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(readFile(t, filepath.Join(repoRoot(t), "charts", "herald", "values.yaml")), &herald); err != nil {
		t.Fatal(err)
	}
	ml, he := map[string]bool{}, map[string]bool{}
	leaves("", metallb, ml)
	leaves("", herald, he)
	heraldHas := func(p string) bool {
		// The chart passes the probe maps to the Pods as they are: every
		// Kubernetes Probe timing field works.
		for _, c := range []string{"controller", "speaker"} {
			for _, probe := range []string{"livenessProbe", "readinessProbe"} {
				for _, f := range []string{"initialDelaySeconds", "periodSeconds", "timeoutSeconds", "successThreshold", "failureThreshold"} {
					if p == c+"."+probe+"."+f {
						return true
					}
				}
			}
		}
		for h := range he {
			if h == p || strings.HasPrefix(h, p+".") || strings.HasPrefix(p, h+".") {
				return true
			}
		}
		return false
	}
	var silent []string
	for p, set := range ml {
		if !set || heraldHas(p) {
			continue
		}
		covered := false
		for _, r := range reported {
			covered = covered || p == r || strings.HasPrefix(p, r+".")
		}
		if !covered {
			silent = append(silent, p)
		}
	}
	sort.Strings(silent)
	for _, p := range silent {
		t.Errorf("MetalLB value %s is neither read by Herald's chart nor refused", p)
	}

	// Single keys, as a MetalLB user's --set would give them: refused with
	// the Herald key named.
	for _, tc := range []struct{ set, want string }{
		{"speaker.tolerateMaster=false", "speaker.tolerateMaster -> speaker.tolerateControlPlane"},
		{"prometheus.serviceMonitor.enabled=true", "prometheus.serviceMonitor.enabled -> metrics.serviceMonitor.enabled"},
		{"prometheus.prometheusRule.enabled=true", "prometheus.prometheusRule.enabled -> metrics.prometheusRule.enabled"},
		{"controller.labels.team=edge", "controller.labels -> controller.podLabels"},
		{"speaker.labels.team=edge", "speaker.labels -> speaker.podLabels"},
		{"controller.webhookMode=disabled", "controller.webhookMode -> webhook.enabled"},
		{"speaker.memberlist.mlBindPort=7947", "speaker.memberlist.mlBindPort -> speaker.memberlist.bindPort"},
		{"prometheus.someNewKey=1", "prometheus.someNewKey -> metrics"},
		{"frrk8s.enabled=true", "frrk8s -> none"},
		{"controller.command=/controller", "controller.command -> none"},
		{"speaker.livenessProbe.port=7472", "speaker.livenessProbe.port -> none"},
	} {
		out, ok := helmTemplateErr(t, "--set", tc.set)
		if ok || !strings.Contains(out, tc.want) {
			t.Errorf("--set %s: installed %t, want a refusal with %q:\n%s", tc.set, ok, tc.want, out)
		}
	}

	// MetalLB's keys that Herald's chart reads with MetalLB's meaning.
	for _, sets := range [][]string{
		{"speaker.startupProbe.enabled=true", "speaker.startupProbe.failureThreshold=30", "speaker.startupProbe.periodSeconds=5"},
		{"networkpolicies.enabled=true", "networkpolicies.defaultDeny=true", "networkpolicies.apiPort=6443"},
		{"tls.minVersion=VersionTLS12", "tls.cipherSuites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "tls.curvePreferences=29"},
		{"controller.extraContainers[0].name=x", "controller.extraContainers[0].image=x", "speaker.extraContainers[0].name=y", "speaker.extraContainers[0].image=y"},
		{"speaker.secretName=metallb-memberlist"},
	} {
		var args []string
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		if out, ok := helmTemplateErr(t, args...); !ok {
			t.Errorf("MetalLB keys %v refused:\n%s", sets, out)
		}
	}

	// An unknown top-level key (a typo) is refused by the schema.
	if out, ok := helmTemplateErr(t, "--set", "metric.port=9121"); ok || !strings.Contains(out, "'metric' not allowed") {
		t.Errorf("--set metric.port: installed %t, want the schema's refusal:\n%s", ok, out)
	}
	// Empty MetalLB values ask for nothing and install.
	if out, ok := helmTemplateErr(t, "--set", "tls.cipherSuites=", "--set", "tls.minVersion=", "--set-json", "controller.labels={}"); !ok {
		t.Errorf("empty MetalLB values refused:\n%s", out)
	}
}

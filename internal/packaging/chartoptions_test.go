package packaging

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
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

package packaging

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

// TestHelmAdoptsMetalLBCRDs follows docs/migrating-from-metallb.md ("With
// Helm") on a real API server: a Helm release "metallb" owns MetalLB's own
// CRDs (testdata/metallb-crds, installed as MetalLB's chart's crds
// subchart does) and a pool exists. `helm install` of Herald's chart fails
// Helm's ownership check; after hack/adopt-metallb-crds.sh and removing
// the CRDs from MetalLB's release (crds.enabled=false) and MetalLB's
// release itself, Herald's chart installs, owns the CRDs, and the pool is
// still there throughout, also after `helm uninstall` of Herald.
func TestHelmAdoptsMetalLBCRDs(t *testing.T) {
	env := testenv.Start(t)
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	hb, henv := helm(t)
	c := &cluster{t: t, kubeconfig: kc, kubectl: kubectl(t), helm: hb, helmEnv: henv}
	root := repoRoot(t)

	var crdNames []string
	for _, o := range ofKind(heraldYAML(t), "CustomResourceDefinition") {
		if !strings.HasSuffix(o.Meta.Name, ".metallb.io") {
			// Herald's own kinds (herald.io): MetalLB never installed
			// them, the chart creates them. Remove the test
			// environment's copy, as on a cluster that ran MetalLB.
			c.mustKubectl(t, nil, "delete", "crd", o.Meta.Name, "--wait")
			continue
		}
		crdNames = append(crdNames, o.Meta.Name)
	}
	// The test environment pre-installs Herald's CRDs; MetalLB's release
	// takes them over (--take-ownership) and replaces them with MetalLB's
	// own (deleting CRDs is slow on a loaded API server). Their BGPPeer
	// conversion webhook is a URL, which MetalLB's CRD does not have.
	c.mustKubectl(t, nil, "patch", "crd", "bgppeers.metallb.io", "--type=json", "-p", `[{"op":"remove","path":"/spec/conversion"}]`)

	// A stand-in for MetalLB's chart: its crds subchart renders MetalLB's
	// CRDs as templates when crds.enabled (the only part that matters
	// here).
	mchart := filepath.Join(dir, "metallb")
	var crds []string
	files, err := filepath.Glob(filepath.Join(root, "internal", "crdtest", "testdata", "metallb-crds", "metallb.io_*.yaml"))
	if err != nil || len(files) != len(crdNames) {
		t.Fatalf("MetalLB CRDs: %v %v", files, err)
	}
	for _, f := range files {
		crds = append(crds, string(readFile(t, f)))
	}
	for name, content := range map[string]string{
		"Chart.yaml":          "apiVersion: v2\nname: metallb\nversion: 0.16.1\n",
		"values.yaml":         "crds:\n  enabled: true\n",
		"files/crds.yaml":     strings.Join(crds, "\n---\n"),
		"templates/crds.yaml": "{{- if .Values.crds.enabled }}\n{{ .Files.Get \"files/crds.yaml\" }}\n{{- end }}\n",
	} {
		p := filepath.Join(mchart, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c.mustHelm(t, "install", "metallb", mchart, "--namespace", "metallb-system", "--create-namespace", "--take-ownership")
	poll.Until(t, 2*time.Minute, "pools readable", func() error { _, err := c.kubectlRun(nil, "get", "ipaddresspools.metallb.io", "-A"); return err })
	pool := []byte("apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: lab, namespace: metallb-system}\nspec:\n  addresses: [198.51.100.0/28]\n")
	if _, err := c.kubectlRun(pool, "apply", "-f", "-"); err != nil {
		t.Fatalf("create the pool: %v", err)
	}
	poolExists := func(when string) {
		t.Helper()
		if _, err := c.kubectlRun(nil, "get", "ipaddresspool", "lab", "-n", "metallb-system"); err != nil {
			t.Fatalf("%s: pool metallb-system/lab is gone: %v", when, err)
		}
	}

	herald := filepath.Join(root, "charts", "herald")
	install := []string{"install", "herald", herald, "--namespace", "herald-system", "--create-namespace"}
	out, err := tryRun("", nil, henv, hb, append(install, "--kubeconfig", kc)...)
	if err == nil {
		t.Fatal("helm install over MetalLB's Helm-owned CRDs succeeded; want Helm's ownership refusal (the documented failure)")
	}
	for _, want := range []string{"cannot be imported into the current release", "invalid ownership metadata", "meta.helm.sh/release-name"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("helm install refusal lacks %q (docs/migrating-from-metallb.md quotes it):\n%v\n%s", want, err, out)
		}
	}

	// The documented steps.
	run(t, "", nil, []string{"KUBECONFIG=" + kc, "KUBECTL=" + c.kubectl}, filepath.Join(root, "hack", "adopt-metallb-crds.sh"), "herald", "herald-system")
	c.mustHelm(t, "upgrade", "metallb", mchart, "--namespace", "metallb-system", "--reuse-values", "--set", "crds.enabled=false")
	poolExists("after MetalLB's release dropped its CRDs")
	c.mustHelm(t, "uninstall", "metallb", "--namespace", "metallb-system")
	poolExists("after helm uninstall metallb")
	c.mustHelm(t, append(install, "--timeout", "180s")...)
	poolExists("after helm install herald")
	out = c.mustKubectl(t, nil, "get", "crd", "bgppeers.metallb.io", "-o",
		"jsonpath={.metadata.annotations.meta\\.helm\\.sh/release-name} {.spec.conversion.webhook.clientConfig.service.namespace}/{.spec.conversion.webhook.clientConfig.service.name} {.spec.versions[?(@.name==\"v1beta1\")].served}")
	if got := string(out); got != "herald herald-system/herald-webhook-service true" {
		t.Errorf("bgppeers.metallb.io after helm install herald: %q, want Herald's release, webhook and v1beta1 served", got)
	}
	c.mustHelm(t, "uninstall", "herald", "--namespace", "herald-system", "--timeout", "180s")
	poolExists("after helm uninstall herald (crds.keep)")
}

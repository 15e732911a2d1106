package packaging

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

// cluster drives kubectl and helm against one test API server.
type cluster struct {
	t          *testing.T
	kubeconfig string
	kubectl    string
	helm       string
	helmEnv    []string
}

func (c *cluster) kubectlRun(stdin []byte, args ...string) ([]byte, error) {
	return tryRun("", stdin, nil, c.kubectl, append([]string{"--kubeconfig", c.kubeconfig}, args...)...)
}

func (c *cluster) mustKubectl(t *testing.T, stdin []byte, args ...string) []byte {
	t.Helper()
	out, err := c.kubectlRun(stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func (c *cluster) mustHelm(t *testing.T, args ...string) []byte {
	t.Helper()
	return run(t, "", nil, c.helmEnv, c.helm, append(args, "--kubeconfig", c.kubeconfig)...)
}

// apply runs kubectl apply with args, retrying twice when an update lost
// an optimistic-concurrency race (the API server's own controllers update
// freshly created CRDs' status at the same time; kubectl does not retry).
func (c *cluster) apply(t *testing.T, args ...string) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		_, err := c.kubectlRun(nil, append([]string{"apply"}, args...)...)
		if err == nil {
			return
		}
		if attempt == 3 || !strings.Contains(err.Error(), "the object has been modified") {
			t.Fatalf("kubectl apply %s: %v", strings.Join(args, " "), err)
		}
		t.Logf("kubectl apply attempt %d lost a race, retrying: %v", attempt, err)
	}
}

// writeCert stores a certificate in Secret namespace/name as the
// controller's rotation does (an update by another field manager).
func (c *cluster) writeCert(t *testing.T, namespace, name string) {
	t.Helper()
	c.mustKubectl(t, nil, "patch", "secret", name, "-n", namespace, "--type=merge", "--field-manager=herald-controller",
		"-p", `{"data":{"tls.crt":"Y2VydA==","tls.key":"a2V5"}}`)
}

// wantCert fails unless the certificate writeCert stored is still there.
func (c *cluster) wantCert(t *testing.T, namespace, name string) {
	t.Helper()
	out := c.mustKubectl(t, nil, "get", "secret", name, "-n", namespace, "-o", "jsonpath={.data.tls\\.crt} {.data.tls\\.key}")
	if got := string(out); got != "Y2VydA== a2V5" {
		t.Errorf("Secret %s/%s lost the certificate: %q", namespace, name, got)
	}
}

// withoutGroups drops the objects of the given API groups (kinds whose CRDs
// the test server lacks, e.g. monitoring.coreos.com).
func withoutGroups(t *testing.T, data []byte, groups ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, o := range parseObjects(t, data) {
		skip := false
		for _, g := range groups {
			skip = skip || strings.HasPrefix(o.APIVersion, g+"/")
		}
		if !skip {
			b.WriteString("---\n")
			b.Write(o.Raw)
		}
	}
	return b.Bytes()
}

// wantAllExist fails unless every object of the YAML stream exists on the
// server.
func (c *cluster) wantAllExist(t *testing.T, data []byte) {
	t.Helper()
	objs := parseObjects(t, data)
	out := c.mustKubectl(t, data, "get", "-f", "-", "-o", "name")
	if got := len(strings.Fields(string(out))); got != len(objs) {
		t.Errorf("%d of %d objects exist:\n%s", got, len(objs), out)
	}
}

// TestAPIServer installs Herald into a real API server: the chart with
// `helm install` (which must create the CRDs and keep them on uninstall)
// and as a server-side dry-run with default and all options, then
// manifests/herald.yaml for real, and checks the RBAC as the API server
// evaluates it (`kubectl auth can-i`).
func TestAPIServer(t *testing.T) {
	env := testenv.Start(t)
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	hb, henv := helm(t)
	c := &cluster{t: t, kubeconfig: kc, kubectl: kubectl(t), helm: hb, helmEnv: henv}
	chart := filepath.Join(repoRoot(t), "charts", "herald")

	var crdNames []string
	for _, o := range ofKind(heraldYAML(t), "CustomResourceDefinition") {
		crdNames = append(crdNames, o.Meta.Name)
	}

	t.Run("helm install creates the CRDs", func(t *testing.T) {
		// The test environment pre-installs the CRDs; remove them so that
		// the chart has to create them.
		c.mustKubectl(t, nil, append([]string{"delete", "crd", "--wait=true", "--timeout=300s"}, prefixed("", crdNames)...)...)
		c.mustHelm(t, "install", "alt", chart, "--namespace", "alt-system", "--create-namespace", "--timeout", "180s")
		manifest := c.mustHelm(t, "get", "manifest", "alt", "--namespace", "alt-system")
		c.wantAllExist(t, manifest)
		out := c.mustKubectl(t, nil, "get", "crd", "bgppeers.metallb.io", "-o", "jsonpath={.metadata.labels.app\\.kubernetes\\.io/managed-by} {.spec.conversion.webhook.clientConfig.service.namespace}/{.spec.conversion.webhook.clientConfig.service.name}")
		if got := string(out); got != "Helm alt-system/alt-herald-webhook-service" {
			t.Errorf("bgppeers.metallb.io after helm install: %q", got)
		}
		// Established: a BGPPeer list works.
		poll.Until(t, time.Minute, "kubectl get bgppeers", func() error { _, err := c.kubectlRun(nil, "get", "bgppeers.metallb.io", "-A"); return err })
		// helm upgrade keeps the certificate the controller wrote.
		c.writeCert(t, "alt-system", "alt-herald-webhook-cert")
		c.mustHelm(t, "upgrade", "alt", chart, "--namespace", "alt-system", "--timeout", "180s")
		c.wantCert(t, "alt-system", "alt-herald-webhook-cert")
		c.mustHelm(t, "uninstall", "alt", "--namespace", "alt-system", "--timeout", "180s")
		// crds.keep: the CRDs (and so the users' pools) survive uninstall.
		c.mustKubectl(t, nil, append([]string{"get", "crd"}, crdNames...)...)
		if out, err := c.kubectlRun(nil, "get", "deployment", "alt-herald-controller", "-n", "alt-system"); err == nil {
			t.Errorf("deployment left after helm uninstall: %s", out)
		}
	})

	t.Run("helm template dry-run", func(t *testing.T) {
		c.mustKubectl(t, nil, "create", "namespace", "dry-system")
		for _, sets := range [][]string{nil, withoutNamespaceCreate(allOptions)} {
			data := helmTemplate(t, "dry", "dry-system", sets...)
			data = withoutGroups(t, data, "monitoring.coreos.com")
			out := c.mustKubectl(t, data, "apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", "-")
			if n := strings.Count(string(out), "(server dry run)"); n != len(parseObjects(t, data)) {
				t.Errorf("options %v: %d of %d objects accepted:\n%s", sets, n, len(parseObjects(t, data)), out)
			}
		}
	})

	t.Run("NOTES check the metrics set-up", func(t *testing.T) {
		// Stand-ins for the Prometheus Operator's CRDs, so that Helm can
		// map the monitors (their schemas are the operator's business).
		c.mustKubectl(t, monitoringCRDs(), "apply", "-f", "-")
		for _, kind := range []string{"servicemonitors", "podmonitors", "prometheusrules"} {
			poll.Until(t, time.Minute, kind+" served", func() error {
				_, err := c.kubectlRun(nil, "get", kind+".monitoring.coreos.com", "-A")
				return err
			})
		}
		notes := func(sets ...string) string {
			// The CRDs belong to the release installed above.
			args := []string{"install", "notes", chart, "--namespace", "dry-system", "--dry-run=server", "--set", "crds.enabled=false"}
			for _, s := range sets {
				args = append(args, "--set", s)
			}
			out := string(c.mustHelm(t, args...))
			_, n, ok := strings.Cut(out, "NOTES:")
			if !ok {
				t.Fatalf("helm install %v printed no NOTES:\n%s", sets, out)
			}
			return n
		}
		const rbacWarning = "WARNING: secure metrics (metrics.secure: true) with a ServiceMonitor, but no\nPrometheus RBAC"
		for _, tc := range []struct {
			sets          []string
			want, notWant []string
		}{
			{nil, nil, []string{"WARNING"}},
			{[]string{"metrics.serviceMonitor.enabled=true"}, []string{rbacWarning, "monitoring/prometheus-k8s", "herald-metrics-reader"}, nil},
			{[]string{"metrics.serviceMonitor.enabled=true", "metrics.rbacPrometheus.enabled=true"}, nil, []string{"WARNING"}},
			{[]string{"metrics.serviceMonitor.enabled=true", "metrics.secure=false"}, nil, []string{"WARNING"}},
			{[]string{"metrics.serviceMonitor.enabled=true", "metrics.rbacPrometheus.enabled=true", "rbac.create=false"},
				[]string{rbacWarning, "metrics.rbacPrometheus.enabled is ignored with rbac.create=false"}, nil},
			{[]string{"metrics.podMonitor.enabled=true"}, []string{"token of the ServiceAccount\nnotes-herald-metrics-scraper"}, []string{"WARNING"}},
			{[]string{"metrics.podMonitor.enabled=true", "metrics.port=0"}, []string{"WARNING: metrics.port is 0"}, nil},
			{[]string{"networkpolicies.enabled=true"}, []string{"NetworkPolicies are installed.", "host network"}, []string{"WARNING"}},
		} {
			n := notes(tc.sets...)
			for _, w := range tc.want {
				if !strings.Contains(n, w) {
					t.Errorf("--set %v: NOTES lack %q:\n%s", tc.sets, w, n)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(n, w) {
					t.Errorf("--set %v: NOTES have %q:\n%s", tc.sets, w, n)
				}
			}
		}
	})

	heraldFile := filepath.Join(repoRoot(t), "manifests", "herald.yaml")
	t.Run("apply manifests/herald.yaml", func(t *testing.T) {
		// --force-conflicts: the CRDs were last written by Helm above.
		c.apply(t, "--server-side", "--force-conflicts", "-f", heraldFile)
		c.wantAllExist(t, readFile(t, heraldFile))
		out := c.mustKubectl(t, nil, "get", "crd", "bgppeers.metallb.io", "-o", "jsonpath={.spec.conversion.webhook.clientConfig.service.namespace}/{.spec.conversion.webhook.clientConfig.service.name}{.spec.conversion.webhook.clientConfig.service.path}")
		if got := string(out); got != "herald-system/herald-webhook-service/convert" {
			t.Errorf("bgppeers.metallb.io conversion after apply: %q", got)
		}
		// Applying again, server-side or client-side, keeps the
		// certificate the controller wrote into the shipped empty Secret.
		c.writeCert(t, ns, "herald-webhook-cert")
		c.apply(t, "--server-side", "-f", heraldFile)
		c.wantCert(t, ns, "herald-webhook-cert")
		c.apply(t, "-f", heraldFile)
		c.wantCert(t, ns, "herald-webhook-cert")
	})

	t.Run("RBAC as the API server sees it", func(t *testing.T) {
		const (
			controller = "system:serviceaccount:herald-system:herald-controller"
			speaker    = "system:serviceaccount:herald-system:herald-speaker"
			dflt       = "system:serviceaccount:herald-system:default"
		)
		for _, tc := range []struct {
			as   string
			args string // kubectl auth can-i arguments
			want bool
		}{
			{speaker, "list services -A", true},
			{speaker, "watch services -A", true},
			{speaker, "update services -n default", false},
			{speaker, "patch services -n default", false},
			{speaker, "update services --subresource=status -n default", false},
			{speaker, "create services -n default", false},
			{speaker, "delete services -n default", false},
			{speaker, "list endpointslices.discovery.k8s.io -A", true},
			{speaker, "list endpoints -A", false},
			{speaker, "watch nodes", true},
			{speaker, "update nodes", false},
			{speaker, "list namespaces", false},
			{speaker, "create events -n default", true},
			{speaker, "patch events -n default", true},
			{speaker, "create events.events.k8s.io -n default", false}, // core/v1 Events only (internal/k8s/eventrec)
			{speaker, "delete events -n default", false},
			{speaker, "list secrets -n herald-system", true},
			{speaker, "list secrets -n default", false},
			{speaker, "list secrets -A", false},
			{speaker, "update secrets/herald-memberlist -n herald-system", false},
			{speaker, "list pods -n herald-system", true},
			{speaker, "list pods -n default", false},
			{speaker, "list configmaps -n herald-system", false},
			{speaker, "list ipaddresspools.metallb.io -n herald-system", true},
			{speaker, "update ipaddresspools.metallb.io -n herald-system", false},
			{speaker, "update ipaddresspools.metallb.io --subresource=status -n herald-system", false},
			{speaker, "create servicel2statuses.metallb.io -n herald-system", true},
			{speaker, "update servicel2statuses.metallb.io --subresource=status -n herald-system", true},
			{speaker, "delete servicebgpstatuses.metallb.io -n herald-system", true},
			{speaker, "create bgpsessionstates.herald.io -n herald-system", true},
			{speaker, "update bgpsessionstates.herald.io --subresource=status -n herald-system", true},
			{speaker, "delete bgpsessionstates.herald.io -n herald-system", true},
			{speaker, "create bgpsessionstates.herald.io -n default", false},
			{speaker, "create servicel2statuses.metallb.io -n default", false},
			{speaker, "create configurationstates.metallb.io -n herald-system", true},
			{speaker, "create tokenreviews.authentication.k8s.io", true},
			{speaker, "create subjectaccessreviews.authorization.k8s.io", true},
			{speaker, "create leases.coordination.k8s.io -n herald-system", false},

			{controller, "list secrets -A", false},
			{controller, "list secrets -n default", false},
			{controller, "list secrets -n herald-system", true},
			{controller, "create secrets -n herald-system", true},
			{controller, "update secrets/herald-memberlist -n herald-system", true},
			{controller, "update secrets/herald-webhook-cert -n herald-system", true},
			{controller, "update secrets/someone-else -n herald-system", false},
			{controller, "delete secrets/herald-memberlist -n herald-system", false},
			{controller, "list services -A", true},
			{controller, "patch services -n default", false},
			{controller, "patch services --subresource=status -n default", true},
			{controller, "update services -n default", false},
			{controller, "delete services -n default", false},
			{controller, "update services --subresource=status -n default", true},
			{controller, "list endpointslices.discovery.k8s.io -A", false},
			{controller, "list nodes", true},
			{controller, "create events -n default", true},
			{controller, "patch events -n default", true},
			{controller, "create events.events.k8s.io -n default", false}, // core/v1 Events only (internal/k8s/eventrec)
			{controller, "update validatingwebhookconfigurations/herald-webhook-configuration", true},
			{controller, "update validatingwebhookconfigurations/someone-else", false},
			{controller, "delete validatingwebhookconfigurations/herald-webhook-configuration", false},
			{controller, "update customresourcedefinitions/bgppeers.metallb.io", true},
			{controller, "update customresourcedefinitions/ipaddresspools.metallb.io", false},
			{controller, "delete customresourcedefinitions/bgppeers.metallb.io", false},
			{controller, "list ipaddresspools.metallb.io -n herald-system", true},
			{controller, "update ipaddresspools.metallb.io -n herald-system", false},
			{controller, "update ipaddresspools.metallb.io --subresource=status -n herald-system", true},
			{controller, "list ipaddresspools.metallb.io -A", false},
			{controller, "create configurationstates.metallb.io -n herald-system", true},
			{controller, "create servicel2statuses.metallb.io -n herald-system", false},
			// The memberlist Secret has no owner: no Deployment read.
			{controller, "get deployments/herald-controller -n herald-system", false},
			// Speaker Pods: which nodes still have a speaker (the
			// BGPSessionState clean-up, internal/k8s/sessiongc); in
			// Herald's namespace only.
			{controller, "get pods -n herald-system", true},
			{controller, "list pods -n herald-system", true},
			{controller, "watch pods -n herald-system", true},
			{controller, "list pods -n default", false},
			{controller, "delete pods -n herald-system", false},
			{controller, "delete bgpsessionstates.herald.io -n herald-system", true},
			{controller, "create bgpsessionstates.herald.io -n herald-system", false},
			// Marks them not known while no speaker runs on their node;
			// the status only.
			{controller, "update bgpsessionstates.herald.io --subresource=status -n herald-system", true},
			{controller, "update bgpsessionstates.herald.io -n herald-system", false},
			{controller, "update bgpsessionstates.herald.io --subresource=status -n default", false},
			{controller, "create leases.coordination.k8s.io -n herald-system", true},
			{controller, "create leases.coordination.k8s.io -n default", false},
			{controller, "create tokenreviews.authentication.k8s.io", true},

			{dflt, "list services -A", false},
			{dflt, "list secrets -n herald-system", false},
		} {
			args := append([]string{"auth", "can-i", "--as=" + tc.as}, strings.Fields(tc.args)...)
			out, err := c.kubectlRun(nil, args...)
			var exit *exec.ExitError
			switch {
			case err == nil:
				if !tc.want {
					t.Errorf("%s can %s", tc.as, tc.args)
				}
			case errors.As(err, &exit) && exit.ExitCode() == 1 && strings.HasPrefix(string(out), "no"):
				if tc.want {
					t.Errorf("%s cannot %s", tc.as, tc.args)
				}
			default:
				t.Errorf("kubectl auth can-i %s as %s: %v", tc.args, tc.as, err)
			}
		}
	})
}

func prefixed(prefix string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = prefix + n
	}
	return out
}

func withoutNamespaceCreate(sets []string) []string {
	var out []string
	for _, s := range sets {
		if !strings.HasPrefix(s, "namespace.create=") {
			out = append(out, s)
		}
	}
	return out
}

// monitoringCRDs returns minimal CustomResourceDefinitions of the
// Prometheus Operator's ServiceMonitor, PodMonitor and PrometheusRule (any
// spec), for tests that need Helm to map those kinds.
func monitoringCRDs() []byte {
	var b strings.Builder
	for _, k := range []struct{ kind, plural string }{{"ServiceMonitor", "servicemonitors"}, {"PodMonitor", "podmonitors"}, {"PrometheusRule", "prometheusrules"}} {
		fmt.Fprintf(&b, `---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: %[2]s.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names:
    kind: %[1]s
    plural: %[2]s
    singular: %[3]s
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`, k.kind, k.plural, strings.ToLower(k.kind))
	}
	return []byte(b.String())
}

package packaging

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/herald-lb/herald/internal/testenv"
)

// metallbNativeObjects are the objects of MetalLB's
// config/manifests/metallb-native.yaml (github.com/metallb/metallb at
// 7938d3f) other than its CRDs, as Kind/namespace/name.
var metallbNativeObjects = []string{
	"Namespace//metallb-system",
	"ServiceAccount/metallb-system/controller", "ServiceAccount/metallb-system/speaker",
	"Role/metallb-system/controller", "Role/metallb-system/pod-lister",
	"ClusterRole//metallb-system:controller", "ClusterRole//metallb-system:speaker",
	"RoleBinding/metallb-system/controller", "RoleBinding/metallb-system/pod-lister",
	"ClusterRoleBinding//metallb-system:controller", "ClusterRoleBinding//metallb-system:speaker",
	"ConfigMap/metallb-system/metallb-excludel2", "Secret/metallb-system/metallb-webhook-cert",
	"Service/metallb-system/metallb-webhook-service",
	"Deployment/metallb-system/controller", "DaemonSet/metallb-system/speaker",
	"ValidatingWebhookConfiguration//metallb-webhook-configuration",
	// The controller creates it (--ml-secret-name).
	"Secret/metallb-system/memberlist",
}

// TestMetalLBSystemManifests checks manifests/herald-metallb-system.yaml,
// Herald in MetalLB's namespace (docs/migrating-from-metallb.md, "In
// place"): herald.yaml's objects without the Namespace, every namespaced
// one in metallb-system and every reference (webhook and conversion
// Services, RBAC subjects) pointing there; none replaces one of MetalLB's
// objects; the binaries read the namespace from METALLB_NAMESPACE. On a
// real API server it applies next to a MetalLB configuration in
// metallb-system, and removing Herald's workloads as the guide says leaves
// the namespace and the configuration.
func TestMetalLBSystemManifests(t *testing.T) {
	path := filepath.Join(repoRoot(t), "manifests", "herald-metallb-system.yaml")
	data := readFile(t, path)
	objs := parseObjects(t, data)
	base := heraldYAML(t)
	if strings.Contains(string(data), "herald-system") {
		t.Error("herald-metallb-system.yaml still names herald-system")
	}
	if len(objs) != len(base)-1 {
		t.Errorf("%d objects, want herald.yaml's %d without its Namespace", len(objs), len(base))
	}
	for _, o := range base {
		if o.Kind == "Namespace" {
			continue
		}
		key := o.key()
		if o.Meta.Namespace != "" {
			key = o.Kind + "/metallb-system/" + o.Meta.Name
		}
		found := false
		for _, m := range objs {
			found = found || m.key() == key
		}
		if !found {
			t.Errorf("no %s (herald.yaml's %s)", key, o.key())
		}
	}
	for _, o := range objs {
		if o.Kind == "Namespace" {
			t.Errorf("%s: the overlay must not own metallb-system (kubectl delete -f would delete MetalLB's configuration)", o.key())
		}
		for _, m := range metallbNativeObjects {
			if o.key() == m {
				t.Errorf("%s would replace MetalLB's object of the same name", o.key())
			}
		}
	}
	var d appsv1.Deployment
	find(t, objs, "Deployment", "metallb-system", "herald-controller").into(t, &d)
	var ds appsv1.DaemonSet
	find(t, objs, "DaemonSet", "metallb-system", "herald-speaker").into(t, &ds)
	for _, c := range []corev1.Container{container(t, d.Spec.Template.Spec, "controller"), container(t, ds.Spec.Template.Spec, "speaker")} {
		ok := false
		for _, e := range c.Env {
			ok = ok || (e.Name == "METALLB_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace")
		}
		if !ok {
			t.Errorf("%s: METALLB_NAMESPACE is not the Pod's namespace", c.Name)
		}
	}

	env := testenv.Start(t)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, kubeconfig: kc, kubectl: kubectl(t)}
	// MetalLB's CRDs, namespace and configuration, as a MetalLB install
	// left them: MetalLB's CRDs replace the test environment's (whose
	// BGPPeer conversion webhook is a URL, which a Service reference
	// cannot be merged with).
	c.mustKubectl(t, nil, "patch", "crd", "bgppeers.metallb.io", "--type=json", "-p", `[{"op":"remove","path":"/spec/conversion"}]`)
	c.mustKubectl(t, nil, "replace", "-f", filepath.Join(repoRoot(t), "internal", "crdtest", "testdata", "metallb-crds"))
	c.mustKubectl(t, []byte(`apiVersion: v1
kind: Namespace
metadata:
  name: metallb-system
  labels:
    pod-security.kubernetes.io/enforce: privileged
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: lab, namespace: metallb-system}
spec:
  addresses: [198.51.100.0/28]
`), "apply", "-f", "-")
	c.apply(t, "--server-side", "--force-conflicts", "-f", path)
	c.wantAllExist(t, data)
	out := c.mustKubectl(t, nil, "get", "validatingwebhookconfiguration", "herald-webhook-configuration", "-o", "jsonpath={.webhooks[0].clientConfig.service.namespace}")
	if string(out) != "metallb-system" {
		t.Errorf("webhook Service namespace %q, want metallb-system", out)
	}
	// Rolling back removes Herald's workloads and webhook, not the file:
	// the namespace, the CRDs and the configuration stay.
	c.mustKubectl(t, nil, "delete", "-n", "metallb-system", "deployment/herald-controller", "daemonset/herald-speaker")
	c.mustKubectl(t, nil, "delete", "validatingwebhookconfiguration/herald-webhook-configuration")
	c.mustKubectl(t, nil, "get", "namespace", "metallb-system")
	c.mustKubectl(t, nil, "get", "ipaddresspool", "lab", "-n", "metallb-system")
}

package crdtest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/internal/testenv"
)

const fieldOwner = client.FieldOwner("herald-crdtest")

// readObjects decodes every YAML document of the files into unstructured
// objects, skipping kustomization.yaml.
func readObjects(t *testing.T, files ...string) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			u := &unstructured.Unstructured{}
			err := dec.Decode(&u.Object)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("decode %s: %v", f, err)
			}
			if len(u.Object) > 0 {
				objs = append(objs, u)
			}
		}
	}
	return objs
}

func crdFiles(t *testing.T) []string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "manifests", "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in manifests/crds: %v", err)
	}
	return files
}

// testServerSideApply re-applies the committed CRDs with server-side apply
// (as `kubectl apply --server-side` does) over the ones envtest created, then
// applies a configuration written for MetalLB. Apply requests always use
// strict field validation, so a field unknown to Herald's schema fails.
func testServerSideApply(ctx context.Context, t *testing.T, env *testenv.Env) {
	for _, u := range readObjects(t, crdFiles(t)...) {
		if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), fieldOwner); err != nil {
			t.Errorf("server-side apply of CRD %s: %v", u.GetName(), err)
		}
	}

	ns := env.Namespace(t)
	sample := readObjects(t, filepath.Join("testdata", "metallb-sample.yaml"))
	if len(sample) != 6 {
		t.Fatalf("testdata/metallb-sample.yaml: %d objects, want 6", len(sample))
	}
	for _, u := range sample {
		u.SetNamespace(ns)
		if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), fieldOwner); err != nil {
			t.Errorf("server-side apply of MetalLB %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}

	// Negative control: the same apply path rejects an unknown field.
	bad := readObjects(t, filepath.Join("testdata", "metallb-sample.yaml"))[0]
	bad.SetNamespace(ns)
	bad.SetName("typo")
	if err := unstructured.SetNestedField(bad.Object, true, "spec", "autoassign"); err != nil {
		t.Fatal(err)
	}
	err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(bad), fieldOwner)
	if err == nil || !strings.Contains(err.Error(), "autoassign") {
		t.Errorf("apply with unknown field spec.autoassign: err = %v, want a rejection naming it", err)
	}
}

// testKubectl runs kubectl itself against the API server: server-side apply
// of manifests/crds (through its kustomization) and of the MetalLB sample,
// then checks the printer columns. kubectl is testenv.Kubectl ($KUBECTL,
// else bin/k8s/kubectl from `make test-assets`, else PATH); skipped when
// there is none; testServerSideApply covers the same requests from Go.
func testKubectl(ctx context.Context, t *testing.T, env *testenv.Env) {
	kubectl, err := testenv.Kubectl()
	if err != nil {
		t.Skipf("%v; server-side apply is covered by ServerSideApply", err)
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	ns := env.Namespace(t)
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("apply", "--server-side", "--field-manager", "herald-kubectl", "-k", filepath.Join(root, "manifests", "crds"))
	run("apply", "--server-side", "-n", ns, "-f", filepath.Join("testdata", "metallb-sample.yaml"))

	for _, tc := range []struct{ resource, header string }{
		{"ipaddresspools.metallb.io", "AUTO ASSIGN   AVOID BUGGY IPS   ADDRESSES"},
		{"bgppeers.metallb.io", "ADDRESS          ASN     BFD PROFILE   MULTI HOPS"},
	} {
		out := run("get", "-n", ns, tc.resource)
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(tc.header), " ")) {
			t.Errorf("kubectl get %s: columns missing %q in\n%s", tc.resource, tc.header, out)
		}
	}
}

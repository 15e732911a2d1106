package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/e2e/lab"
)

// TestHelm installs Herald with its chart (`helm upgrade --install` of
// charts/herald into the lab's API server) under a release name other than
// "herald", so that every object name differs from the manifests' and the
// lab must run what the chart rendered (found by label). A layer 2 Service
// gets an address from the l2 sample's pool and the client reaches it
// through the node that answers its ARP. `helm uninstall` then removes
// every object of the release except those the chart marks
// helm.sh/resource-policy: keep (the CRDs, and so the users' pools, and the
// webhook certificate Secret); installing the same release again adopts
// the kept objects and serves the Service again at the same address.
func TestHelm(t *testing.T) {
	const (
		release = "edge"
		ns      = "helm"
	)
	opts := lab.InstallOptions{Method: lab.InstallHelm, Release: release}
	withSamples := opts
	withSamples.Samples = []string{"manifests/samples/l2.yaml"}
	e := newEnv(t, 2, withSamples)
	if got, want := e.h.ControllerProcessName(), release+"-herald-controller-n1"; got != want {
		t.Fatalf("controller runs as %q, want the chart's Deployment's Pod %q", got, want)
	}
	e.namespace(t, ns, nil)
	svc := types.NamespacedName{Namespace: ns, Name: "web"}
	e.createService(t, lbService(ns, svc.Name), e.allNodes()...)
	ip := e.ips(t, ns, svc.Name, 1)[0]
	if !lab.L2RangeV4.Contains(ip) {
		t.Fatalf("service address %s is not from the l2 sample's pool", ip)
	}
	node := l2Env{e}.waitAnnouncer(t, svc, ip, "announced after helm install", func(string) bool { return true })
	t.Logf("%s announced by %s", ip, node)

	ctx := testCtx(t, 3*time.Minute)
	manifest, err := e.h.Helm(ctx, "get", "manifest", release, "--namespace", lab.HeraldNamespace)
	if err != nil {
		t.Fatal(err)
	}
	objs := releaseObjects(t, []byte(manifest))
	var kept, gone []string
	for _, o := range objs {
		if o.keep {
			kept = append(kept, o.ref)
			if o.kind != "CustomResourceDefinition" && o.ref != "secret/"+release+"-herald-webhook-cert" {
				t.Errorf("the chart keeps %s on uninstall; only the CRDs and the webhook certificate are meant to stay", o.ref)
			}
		} else {
			gone = append(gone, o.ref)
		}
	}
	if crds := strings.Count(strings.Join(kept, " "), "customresourcedefinition"); crds < 8 || len(gone) < 10 {
		t.Fatalf("release manifest: %d kept CRDs, %d other objects; want the metallb.io CRDs and the workloads:\n%s", crds, len(gone), manifest)
	}
	start := time.Now()
	if err := e.h.Uninstall(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("helm uninstall in %s; the release kept %d of its %d objects", time.Since(start).Round(time.Millisecond), len(kept), len(objs))

	// What exists of the release's objects now: exactly the kept ones.
	file := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := e.l.Kubectl(ctx, "get", "-f", file, "--ignore-not-found", "-o", "name")
	if err != nil {
		t.Fatal(err)
	}
	left := strings.Fields(out)
	slices.Sort(left)
	slices.Sort(kept)
	if !slices.Equal(left, kept) {
		t.Errorf("after helm uninstall these of the release's objects exist:\n  %s\nwant only the kept ones:\n  %s",
			strings.Join(left, "\n  "), strings.Join(kept, "\n  "))
	}
	if out, err := e.h.Helm(ctx, "list", "--namespace", lab.HeraldNamespace, "--all", "--short"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("helm list after uninstall: %q %v", out, err)
	}
	// The CRDs stayed, and so did the user's configuration.
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: lab.HeraldNamespace, Name: "lab-l2"}, &v1beta1.IPAddressPool{}); err != nil {
		t.Errorf("the sample's pool after helm uninstall: %v", err)
	}

	// The same release again: Helm adopts the kept CRDs and Secret (their
	// meta.helm.sh annotations name this release), and the new controller
	// and speakers serve the existing Service at its address.
	start = time.Now()
	h2, err := e.l.InstallHerald(ctx, opts)
	if h2 != nil {
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("after reinstalling:\n%s", h2.Diagnose(context.Background()))
			}
		})
	}
	if err != nil {
		t.Fatalf("helm install after uninstall: %v", err)
	}
	t.Logf("reinstalled in %s", time.Since(start).Round(time.Millisecond))
	e2 := &env{l: e.l, h: h2, c: h2.Client(), k: e.k}
	if got := e2.ips(t, ns, svc.Name, 1); got[0] != ip {
		t.Errorf("address after reinstalling: %v, want %s", got, ip)
	}
	node = l2Env{e2}.waitAnnouncer(t, svc, ip, "announced after reinstalling", func(string) bool { return true })
	t.Logf("%s announced by %s after reinstalling", ip, node)
}

// releaseObject is one object of a Helm release's manifest.
type releaseObject struct {
	kind string
	// ref is the object as `kubectl get -o name` prints it
	// ("secret/x", "customresourcedefinition.apiextensions.k8s.io/y").
	ref string
	// keep: annotated helm.sh/resource-policy: keep.
	keep bool
}

// releaseObjects parses `helm get manifest` output.
func releaseObjects(t *testing.T, manifest []byte) []releaseObject {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifest)))
	var objs []releaseObject
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("release manifest: %v", err)
		}
		var o struct {
			metav1.TypeMeta `json:",inline"`
			Metadata        metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &o); err != nil {
			t.Fatalf("release manifest: %v\n%s", err, doc)
		}
		if o.Kind == "" {
			continue
		}
		res := strings.ToLower(o.Kind)
		if g := o.GroupVersionKind().Group; g != "" {
			res += "." + g
		}
		objs = append(objs, releaseObject{kind: o.Kind, ref: res + "/" + o.Metadata.Name,
			keep: o.Metadata.Annotations["helm.sh/resource-policy"] == "keep"})
	}
}

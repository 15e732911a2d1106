package crdtest

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/herald-lb/herald/internal/testenv"
)

// TestMetalLBCanRunOnHeraldCRDs compares manifests/crds with MetalLB's own
// CRDs (testdata/metallb-crds): for MetalLB's controller and speaker to run
// against Herald's CRDs (rolling back, or a MetalLB component started
// while Herald's CRDs are installed), every kind and version MetalLB serves
// must be served with the same storage version, every field of MetalLB's
// schemas must exist with the same type (the API server would prune it
// otherwise), and Herald must not require a field MetalLB does not. Herald
// may be stricter on values MetalLB's parser refuses anyway (myASN 0,
// peerPort 0); those are not compared.
func TestMetalLBCanRunOnHeraldCRDs(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	metallb := readCRDs(t, filepath.Join(root, "internal", "crdtest", "testdata", "metallb-crds"))
	herald := readCRDs(t, filepath.Join(root, "manifests", "crds"))
	if len(metallb) < 9 {
		t.Fatalf("testdata/metallb-crds holds %d CRDs, want MetalLB's 9", len(metallb))
	}
	for name, m := range metallb {
		h, ok := herald[name]
		if !ok {
			t.Errorf("%s: MetalLB's CRD has no counterpart in manifests/crds", name)
			continue
		}
		if h.Spec.Group != m.Spec.Group || h.Spec.Scope != m.Spec.Scope || h.Spec.Names.Kind != m.Spec.Names.Kind || h.Spec.Names.Plural != m.Spec.Names.Plural {
			t.Errorf("%s: group/scope/names %s %s %+v, MetalLB's %s %s %+v", name, h.Spec.Group, h.Spec.Scope, h.Spec.Names, m.Spec.Group, m.Spec.Scope, m.Spec.Names)
		}
		for _, mv := range m.Spec.Versions {
			i := slices.IndexFunc(h.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == mv.Name })
			if i < 0 {
				t.Errorf("%s %s: version missing", name, mv.Name)
				continue
			}
			hv := h.Spec.Versions[i]
			if hv.Served != mv.Served || hv.Storage != mv.Storage {
				t.Errorf("%s %s: served %t storage %t, MetalLB's served %t storage %t", name, mv.Name, hv.Served, hv.Storage, mv.Served, mv.Storage)
			}
			if mv.Subresources != nil && mv.Subresources.Status != nil &&
				(hv.Subresources == nil || hv.Subresources.Status == nil) && hasStatusFields(mv.Schema.OpenAPIV3Schema) {
				t.Errorf("%s %s: no status subresource, MetalLB writes status through one", name, mv.Name)
			}
			compareSchema(t, name+" "+mv.Name, mv.Schema.OpenAPIV3Schema, hv.Schema.OpenAPIV3Schema)
		}
	}
}

// hasStatusFields reports whether the schema's status has properties (an
// empty status is never written).
func hasStatusFields(s *apiextensionsv1.JSONSchemaProps) bool {
	st, ok := s.Properties["status"]
	return ok && len(st.Properties) > 0
}

func compareSchema(t *testing.T, path string, m, h *apiextensionsv1.JSONSchemaProps) {
	t.Helper()
	if m.Type != "" && m.Type != h.Type {
		t.Errorf("%s: type %q, MetalLB's %q", path, h.Type, m.Type)
	}
	for _, r := range h.Required {
		if !slices.Contains(m.Required, r) {
			t.Errorf("%s: Herald requires %s, MetalLB does not", path, r)
		}
	}
	for k, mp := range m.Properties {
		hp, ok := h.Properties[k]
		if !ok {
			if h.XPreserveUnknownFields == nil || !*h.XPreserveUnknownFields {
				t.Errorf("%s.%s: field missing (the API server would prune it from MetalLB's objects)", path, k)
			}
			continue
		}
		compareSchema(t, path+"."+k, &mp, &hp)
	}
	if m.Items != nil && m.Items.Schema != nil {
		if h.Items == nil || h.Items.Schema == nil {
			t.Errorf("%s[]: items missing", path)
			return
		}
		compareSchema(t, path+"[]", m.Items.Schema, h.Items.Schema)
	}
}

func readCRDs(t *testing.T, dir string) map[string]*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "metallb.io_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in %s: %v", dir, err)
	}
	out := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(b, crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[crd.Name] = crd
	}
	return out
}

package api

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
)

// TestGeneratedFilesUpToDate regenerates the deepcopy code and CRD YAML into
// a temporary directory with hack/generate.sh and fails when the committed
// files differ. It builds controller-gen from hack/tools/gen when
// bin/controller-gen is missing.
func TestGeneratedFilesUpToDate(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	gen := filepath.Join(root, "bin", "controller-gen")
	if _, err := os.Stat(gen); err != nil {
		gen = filepath.Join(t.TempDir(), "controller-gen")
		build := exec.Command("go", "build", "-o", gen, "sigs.k8s.io/controller-tools/cmd/controller-gen")
		build.Dir = filepath.Join(root, "hack", "tools", "gen")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build controller-gen from hack/tools/gen: %v\n%s", err, out)
		}
	}
	out := t.TempDir()
	cmd := exec.Command(filepath.Join(root, "hack", "generate.sh"), out)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CONTROLLER_GEN="+gen)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/generate.sh: %v\n%s", err, b)
	}

	compareDirs(t, filepath.Join(root, "manifests", "crds"), filepath.Join(out, "crds"))
	for _, v := range []string{"v1alpha1", "v1beta1", "v1beta2"} {
		compareFile(t,
			filepath.Join(root, "api", v, "zz_generated.deepcopy.go"),
			filepath.Join(out, "deepcopy", v, "zz_generated.deepcopy.go"))
	}
}

func compareDirs(t *testing.T, committed, fresh string) {
	t.Helper()
	names := map[string]bool{}
	for _, dir := range []string{committed, fresh} {
		entries, err := os.ReadDir(dir)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, e := range entries {
			names[e.Name()] = true
		}
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for _, n := range sorted {
		compareFile(t, filepath.Join(committed, n), filepath.Join(fresh, n))
	}
}

func compareFile(t *testing.T, committed, fresh string) {
	t.Helper()
	want, errW := os.ReadFile(fresh)
	got, errG := os.ReadFile(committed)
	switch {
	case errW != nil && errG == nil:
		t.Errorf("%s is not generated any more: run make generate", committed)
	case errW != nil:
		t.Errorf("read generated %s: %v", fresh, errW)
	case errG != nil:
		t.Errorf("%s is missing: run make generate", committed)
	case !bytes.Equal(got, want):
		t.Errorf("%s is stale (differs from what controller-gen writes now): run make generate", committed)
	}
}

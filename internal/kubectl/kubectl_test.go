package kubectl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKubectlLookup checks the order of Find's lookup ($KUBECTL, then
// bin/k8s/kubectl at the repository root, then PATH) on made-up trees, with
// a PATH that holds no other kubectl.
func TestKubectlLookup(t *testing.T) {
	exe := func(path string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	d := t.TempDir()
	withBin := filepath.Join(d, "repo")
	built := exe(filepath.Join(withBin, "bin", "k8s", "kubectl"))
	withoutBin := filepath.Join(d, "bare")
	if err := os.MkdirAll(withoutBin, 0o755); err != nil {
		t.Fatal(err)
	}
	onPath := exe(filepath.Join(d, "path", "kubectl"))
	override := exe(filepath.Join(d, "other", "kubectl"))
	emptyPath := filepath.Join(d, "empty")

	for _, tc := range []struct {
		name, kubectlEnv, path, root string
		want, wantErr                string
	}{
		{name: "KUBECTL wins over bin/k8s", kubectlEnv: override, path: filepath.Dir(onPath), root: withBin, want: override},
		{name: "KUBECTL missing is an error", kubectlEnv: filepath.Join(d, "nope"), path: filepath.Dir(onPath), root: withBin, wantErr: "$KUBECTL="},
		{name: "bin/k8s/kubectl before PATH", path: filepath.Dir(onPath), root: withBin, want: built},
		{name: "bin/k8s/kubectl without any on PATH", path: emptyPath, root: withBin, want: built},
		{name: "PATH when bin/k8s has none", path: filepath.Dir(onPath), root: withoutBin, want: onPath},
		{name: "PATH when the root is unknown", path: filepath.Dir(onPath), want: onPath},
		{name: "none at all says make test-assets", path: emptyPath, root: withoutBin, wantErr: "make test-assets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KUBECTL", tc.kubectlEnv)
			t.Setenv("PATH", tc.path)
			got, err := Find(tc.root)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Find(%q) = %q, %v; want an error containing %q", tc.root, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Find(%q) = %q, %v; want %q", tc.root, got, err, tc.want)
			}
		})
	}
}

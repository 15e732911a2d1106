package lab

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// applyManifests reports a failed `kubectl apply`. Here the lab's control
// namespace does not exist, so the apply cannot run: before the lint gate
// (staticcheck SA4006) an if-scoped err dropped that error and InstallHerald
// went on as if the manifests were applied. Nothing is created: the command
// fails before it reaches any namespace or API server.
func TestApplyManifestsReportsApplyError(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "herald.yaml")
	if err := os.WriteFile(file, []byte("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: unused\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, manifests := range []string{file, dir} {
		h := &Herald{
			lab:  &Lab{cfg: Config{Prefix: "hzzmissing", StateDir: t.TempDir()}},
			opts: InstallOptions{Manifests: manifests},
		}
		if err := h.applyManifests(context.Background()); err == nil {
			t.Errorf("applyManifests(%s) without a lab = nil, want the apply's error", manifests)
		}
	}
}

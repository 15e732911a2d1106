package lab

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
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

// TestReleaseOptions: a release directory is used only when every file the
// lab runs matches its SHA256SUMS; a damaged binary or a missing directory is
// refused with the file named.
func TestReleaseOptions(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"herald.yaml":      "kind: List\n",
		"herald-1.2.3.tgz": "chart",
		"herald-controller-linux-" + runtime.GOARCH: "controller",
		"herald-speaker-linux-" + runtime.GOARCH:    "speaker",
	}
	var sums strings.Builder
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		d := sha256.Sum256([]byte(body))
		fmt.Fprintf(&sums, "%s  %s\n", hex.EncodeToString(d[:]), name)
	}
	if err := os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(sums.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, m := range []InstallMethod{InstallKubectl, InstallHelm} {
		bin := t.TempDir()
		opts, err := ReleaseOptions(dir, m, bin, "")
		if err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		if m == InstallKubectl && opts.Manifests != filepath.Join(dir, "herald.yaml") || m == InstallHelm && opts.Chart != filepath.Join(dir, "herald-1.2.3.tgz") {
			t.Errorf("%s: %+v", m, opts)
		}
		if target, err := os.Readlink(filepath.Join(bin, "speaker")); err != nil || target != filepath.Join(dir, "herald-speaker-linux-"+runtime.GOARCH) {
			t.Errorf("%s: bin/speaker -> %q, %v", m, target, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "herald-speaker-linux-"+runtime.GOARCH), []byte("a dev build"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := ReleaseOptions(dir, InstallKubectl, t.TempDir(), ""); err == nil || !strings.Contains(err.Error(), "herald-speaker-linux-"+runtime.GOARCH+": SHA-256") {
		t.Errorf("damaged speaker binary: %v, want a SHA-256 mismatch naming it", err)
	}
	if _, err := ReleaseOptions(filepath.Join(dir, "missing"), InstallKubectl, t.TempDir(), ""); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("missing directory: %v", err)
	}
}

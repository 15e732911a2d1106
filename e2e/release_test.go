package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/herald-lb/herald/e2e/lab"
)

// releaseVersion is the version of the release TestReleaseInLab installs
// (the Makefile's RELEASE_CI_VERSION, internal/packaging's releaseVersion).
const releaseVersion = "v0.0.0-ci.1"

// TestReleaseInLab installs a release as a new user would, from nothing but
// the release directory (issue #17): `kubectl apply -f herald.yaml` on one
// fresh lab and `helm install` of the packaged chart on another, each
// running the release's own linux binaries (herald-controller-linux-<arch>,
// herald-speaker-linux-<arch>, the ones the images hold) with the flags
// of the Deployment and DaemonSet the release created; on each, a Service
// gets an address from the layer 2 sample's pool and a node announces it.
// The release is $HERALD_RELEASE_DIR (make test builds it once, make
// release-ci), else one built here with hack/release.sh (the tools of make
// tools and make test-assets).
func TestReleaseInLab(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a release and brings up two labs")
	}
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		t.Skipf("a release has no binaries for %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("HERALD_RELEASE_DIR")
	if dir == "" {
		dir = filepath.Join(t.TempDir(), releaseVersion)
		cmd := exec.Command(filepath.Join(root, "hack", "release.sh"), releaseVersion, dir)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("hack/release.sh %s: %v\n%s", releaseVersion, err, out)
		}
	}
	// The lab runs the release's binaries for this machine (and helm for
	// the chart), as `herald-lab up --release DIR` does.
	helmDir := filepath.Join(root, "bin")
	if d := os.Getenv(lab.BinDirEnv); d != "" && fileExists(filepath.Join(d, "helm")) {
		helmDir = d
	}
	samples := []string{"manifests/samples/l2.yaml"}
	for _, method := range []lab.InstallMethod{lab.InstallKubectl, lab.InstallHelm} {
		opts, err := lab.ReleaseOptions(dir, method, t.TempDir(), helmDir)
		if err != nil {
			t.Fatal(err)
		}
		opts.Samples = samples
		t.Run(string(opts.Method), func(t *testing.T) {
			e := newEnv(t, 2, opts)
			const ns = "release"
			e.namespace(t, ns, nil)
			svc := types.NamespacedName{Namespace: ns, Name: "web"}
			e.createService(t, lbService(ns, svc.Name), e.allNodes()...)
			ip := e.ips(t, ns, svc.Name, 1)[0]
			if !lab.L2RangeV4.Contains(ip) {
				t.Fatalf("service address %s is not from the l2 sample's pool", ip)
			}
			node := l2Env{e}.waitAnnouncer(t, svc, ip, "announced by the release's speaker", func(string) bool { return true })
			t.Logf("%s from the release: %s announced by %s", opts.Method, ip, node)
		})
	}
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

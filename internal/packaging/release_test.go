package packaging

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

// releaseVersion is the version TestRelease builds a release of (the
// Makefile's RELEASE_CI_VERSION).
const releaseVersion = "v0.0.0-ci.1"

// releaseDirEnv names a release of releaseVersion already built (make test
// sets it, see the Makefile's release-ci), which TestRelease checks instead
// of building one.
const releaseDirEnv = "HERALD_RELEASE_DIR"

var releaseToolsOnce sync.Once

// releaseTools returns bin/go-licenses and bin/cyclonedx-gomod, building
// them from their tools modules (as `make tools` does) when missing.
func releaseTools(t *testing.T) (goLicenses, cyclonedx string) {
	t.Helper()
	root := repoRoot(t)
	tools := []struct{ bin, module, pkg string }{
		{filepath.Join(root, "bin", "go-licenses"), "licenses", "github.com/google/go-licenses"},
		{filepath.Join(root, "bin", "cyclonedx-gomod"), "sbom", "github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod"},
	}
	var errs []error
	releaseToolsOnce.Do(func() {
		for _, tool := range tools {
			if _, err := os.Stat(tool.bin); err == nil {
				continue
			}
			t.Logf("building %s from hack/tools/%s", tool.bin, tool.module)
			if _, err := tryRun(filepath.Join(root, "hack", "tools", tool.module), nil, nil, "go", "build", "-o", tool.bin, tool.pkg); err != nil {
				errs = append(errs, err)
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("build release tools: %v", err)
	}
	return tools[0].bin, tools[1].bin
}

// TestRelease is CI's check that a release can be produced (issue #17): it
// runs hack/release.sh (what `make release` runs) with a test version into
// a temporary directory and checks the artefacts as a user would use them:
// the file set and SHA256SUMS (sha256sum format, every other file, digests
// match); static ELF binaries of the right architecture (EM_X86_64,
// EM_AARCH64; no interpreter, no shared libraries); the host's binaries
// print the version and commit with --version; every manifest pins both
// images to the version; the packaged chart has the version and appVersion;
// the SBOMs are CycloneDX of the right binary; the licence bundle holds the
// dependencies' licence and NOTICE files; and, against a real API server,
// `helm install` of the package and `kubectl apply` of herald.yaml create
// every object with the pinned images.
func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds six binaries and starts an API server")
	}
	root := repoRoot(t)
	hb, henv := helm(t)
	goLicenses, cyclonedx := releaseTools(t)
	env := append(henv, "KUBECTL="+kubectl(t), "HELM="+hb, "GO_LICENSES="+goLicenses, "CYCLONEDX_GOMOD="+cyclonedx)
	script := filepath.Join(root, "hack", "release.sh")
	// make test builds the release once (make release-ci) for this test
	// and e2e's TestReleaseInLab; alone, the test builds its own.
	out := os.Getenv(releaseDirEnv)

	t.Run("refuses a version without the v", func(t *testing.T) {
		_, err := tryRun(root, nil, env, script, "1.2.3", filepath.Join(t.TempDir(), "out"))
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(err.Error(), "semantic version with a leading v") {
			t.Errorf("release.sh 1.2.3: %v, want exit 2 naming the version format", err)
		}
	})

	if out == "" {
		out = filepath.Join(t.TempDir(), releaseVersion)
		start := time.Now()
		run(t, root, nil, env, script, releaseVersion, out)
		t.Logf("release built in %v", time.Since(start).Round(time.Second))
	} else {
		t.Logf("checking the release make built in $%s=%s", releaseDirEnv, out)
	}
	commit := strings.TrimSpace(string(run(t, root, nil, nil, "git", "rev-parse", "HEAD")))

	chartFile := "herald-" + strings.TrimPrefix(releaseVersion, "v") + ".tgz"
	manifests := []string{"herald.yaml", "herald-prometheus.yaml", "herald-metallb-system.yaml", "herald-metallb-migration.yaml"}
	var binaries []string
	for _, arch := range []string{"amd64", "arm64"} {
		for _, bin := range []string{"controller", "speaker"} {
			binaries = append(binaries, "herald-"+bin+"-linux-"+arch)
		}
		binaries = append(binaries, "kubectl-herald-linux-"+arch)
	}
	// The migration's values and CRD adoption script, as in the repository.
	copies := map[string]string{
		"herald-metallb-migration-values.yaml": filepath.Join("manifests", "metallb-migration", "helm-values.yaml"),
		"adopt-metallb-crds.sh":                filepath.Join("hack", "adopt-metallb-crds.sh"),
	}
	want := append([]string{"CHANGELOG.md", "LICENSE", "NOTICE", "SHA256SUMS", "third-party-licenses.tar.gz", chartFile}, manifests...)
	for name := range copies {
		want = append(want, name)
	}
	for _, b := range binaries {
		want = append(want, b, b+".cdx.json")
	}
	sort.Strings(want)

	t.Run("files and checksums", func(t *testing.T) {
		entries, err := os.ReadDir(out)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range entries {
			got = append(got, e.Name())
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("release directory holds\n  %v\nwant\n  %v", got, want)
		}
		sums := map[string]string{}
		f, err := os.Open(filepath.Join(out, "SHA256SUMS"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// sha256sum's text format: 64 hex digits, two spaces, the name.
			sum, name, ok := strings.Cut(sc.Text(), "  ")
			if !ok || len(sum) != 64 || strings.Contains(name, "/") {
				t.Fatalf("SHA256SUMS line %q is not sha256sum's format", sc.Text())
			}
			sums[name] = sum
		}
		for _, name := range want {
			if name == "SHA256SUMS" {
				if _, ok := sums[name]; ok {
					t.Error("SHA256SUMS lists itself")
				}
				continue
			}
			b := readFile(t, filepath.Join(out, name))
			h := sha256.Sum256(b)
			if sums[name] != hex.EncodeToString(h[:]) {
				t.Errorf("SHA256SUMS: %s is %q, the file's digest is %x", name, sums[name], h)
			}
		}
		if len(sums) != len(want)-1 {
			t.Errorf("SHA256SUMS lists %d files, want %d", len(sums), len(want)-1)
		}
		if got, want := readFile(t, filepath.Join(out, "LICENSE")), readFile(t, filepath.Join(root, "LICENSE")); string(got) != string(want) {
			t.Error("the release's LICENSE is not the repository's")
		}
		for name, src := range copies {
			if got, want := readFile(t, filepath.Join(out, name)), readFile(t, filepath.Join(root, src)); string(got) != string(want) {
				t.Errorf("the release's %s is not the repository's %s", name, src)
			}
		}
		if fi, err := os.Stat(filepath.Join(out, "adopt-metallb-crds.sh")); err != nil {
			t.Error(err)
		} else if fi.Mode()&0o111 == 0 {
			t.Errorf("adopt-metallb-crds.sh is not executable in the release (%v)", fi.Mode())
		}
	})

	t.Run("static binaries per architecture", func(t *testing.T) {
		for _, name := range binaries {
			f, err := elf.Open(filepath.Join(out, name))
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[name[strings.LastIndex(name, "-")+1:]]
			if f.Machine != machine || f.Class != elf.ELFCLASS64 || f.Type != elf.ET_EXEC {
				t.Errorf("%s: ELF %v %v %v, want %v ELFCLASS64 ET_EXEC", name, f.Machine, f.Class, f.Type, machine)
			}
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP {
					t.Errorf("%s has a program interpreter: not static (CGO_ENABLED=0)", name)
				}
			}
			if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
				t.Errorf("%s links shared libraries %v (%v)", name, libs, err)
			}
			f.Close()
		}
	})

	t.Run("--version", func(t *testing.T) {
		if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
			t.Skipf("no release binary runs on %s/%s", runtime.GOOS, runtime.GOARCH)
		}
		for _, bin := range []string{"controller", "speaker", "kubectl-herald"} {
			file, name := "herald-"+bin, "herald-"+bin
			if bin == "kubectl-herald" {
				file, name = bin, bin
			}
			got := string(run(t, "", nil, nil, filepath.Join(out, file+"-linux-"+runtime.GOARCH), "--version"))
			prefix := name + " " + releaseVersion + " (commit " + commit
			suffix := ", " + runtime.Version() + ")\n"
			if !strings.HasPrefix(got, prefix) || !strings.HasSuffix(got, suffix) {
				t.Errorf("%s --version printed %q, want %q...%q", bin, got, prefix, suffix)
			}
		}
	})

	wantImages := map[string]string{
		"herald-controller": "ghcr.io/herald-lb/herald-controller:" + releaseVersion,
		"herald-speaker":    "ghcr.io/herald-lb/herald-speaker:" + releaseVersion,
	}
	t.Run("manifests pin the version", func(t *testing.T) {
		for _, m := range manifests {
			objs := parseObjects(t, readFile(t, filepath.Join(out, m)))
			// The same objects as the repository's rendering (the
			// migration overlay has no rendered file: kustomize it).
			var repo []object
			if m == "herald-metallb-migration.yaml" {
				repo = parseObjects(t, run(t, root, nil, nil, kubectl(t), "kustomize", filepath.Join(root, "manifests", "metallb-migration")))
			} else {
				repo = parseObjects(t, readFile(t, filepath.Join(root, "manifests", m)))
			}
			if len(objs) != len(repo) {
				t.Errorf("%s: %d objects, manifests/%s has %d", m, len(objs), m, len(repo))
			}
			images := map[string]string{}
			for _, o := range append(ofKind(objs, "Deployment"), ofKind(objs, "DaemonSet")...) {
				var spec struct {
					Spec struct {
						Template struct {
							Spec struct {
								Containers []struct{ Name, Image string }
							}
						}
					}
				}
				if err := yaml.Unmarshal(o.Raw, &spec); err != nil {
					t.Fatal(err)
				}
				for _, c := range spec.Spec.Template.Spec.Containers {
					images[o.Meta.Name] = c.Image
				}
			}
			for name, img := range wantImages {
				if images[name] != img {
					t.Errorf("%s: %s runs %q, want %q", m, name, images[name], img)
				}
			}
		}
	})

	t.Run("chart package", func(t *testing.T) {
		var meta struct{ Name, Version, AppVersion string }
		if err := yaml.Unmarshal(run(t, "", nil, henv, hb, "show", "chart", filepath.Join(out, chartFile)), &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Name != "herald" || meta.Version != strings.TrimPrefix(releaseVersion, "v") || meta.AppVersion != releaseVersion {
			t.Errorf("packaged chart %+v, want herald version %s appVersion %s", meta, strings.TrimPrefix(releaseVersion, "v"), releaseVersion)
		}
	})

	t.Run("SBOMs", func(t *testing.T) {
		for _, name := range binaries {
			var bom struct {
				BOMFormat string `json:"bomFormat"`
				Metadata  struct {
					Component struct{ Name, Version, Purl string }
				}
				Components []struct{ Name, Version string }
			}
			if err := json.Unmarshal(readFile(t, filepath.Join(out, name+".cdx.json")), &bom); err != nil {
				t.Fatalf("%s.cdx.json: %v", name, err)
			}
			arch := name[strings.LastIndex(name, "-")+1:]
			bin := strings.TrimPrefix(strings.TrimSuffix(name, "-linux-"+arch), "herald-")
			c := bom.Metadata.Component
			if bom.BOMFormat != "CycloneDX" || c.Name != "github.com/herald-lb/herald" || c.Version != releaseVersion ||
				!strings.Contains(c.Purl, "goarch="+arch) || !strings.HasSuffix(c.Purl, "#"+bin) {
				t.Errorf("%s.cdx.json: format %q, component %+v", name, bom.BOMFormat, c)
			}
			mods := map[string]bool{}
			for _, m := range bom.Components {
				mods[m.Name] = true
			}
			wantMods := []string{"sigs.k8s.io/controller-runtime", "k8s.io/client-go", "std"}
			if bin == "kubectl-herald" {
				wantMods = []string{"k8s.io/client-go", "github.com/spf13/cobra", "std"}
			}
			if bin == "speaker" {
				wantMods = append(wantMods, "github.com/hashicorp/memberlist", "github.com/osrg/gobgp/v3")
			}
			for _, m := range wantMods {
				if !mods[m] {
					t.Errorf("%s.cdx.json lists no %s", name, m)
				}
			}
		}
	})

	t.Run("third-party licences", func(t *testing.T) {
		f, err := os.Open(filepath.Join(out, "third-party-licenses.tar.gz"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		files := map[string]bool{}
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = true
		}
		for _, name := range []string{
			"third-party-licenses/k8s.io/client-go/LICENSE",
			"third-party-licenses/sigs.k8s.io/controller-runtime/LICENSE",
			"third-party-licenses/github.com/hashicorp/memberlist/LICENSE",
			"third-party-licenses/github.com/prometheus/client_golang/prometheus/NOTICE",
		} {
			if !files[name] {
				t.Errorf("third-party-licenses.tar.gz has no %s", name)
			}
		}
		for name := range files {
			if strings.Contains(name, "herald-lb/herald") {
				t.Errorf("third-party-licenses.tar.gz holds Herald's own %s", name)
			}
		}
	})

	t.Run("installs on a real API server", func(t *testing.T) {
		e := testenv.Start(t)
		kc := filepath.Join(t.TempDir(), "kubeconfig")
		if err := os.WriteFile(kc, e.KubeConfig, 0o600); err != nil {
			t.Fatal(err)
		}
		c := &cluster{t: t, kubeconfig: kc, kubectl: kubectl(t), helm: hb, helmEnv: henv}
		image := func(t *testing.T, kind, namespace, name string) string {
			t.Helper()
			return string(c.mustKubectl(t, nil, "get", kind, name, "-n", namespace, "-o", "jsonpath={.spec.template.spec.containers[0].image}"))
		}
		// The package creates the CRDs itself (the test environment
		// pre-installs them), as on a fresh cluster.
		var crdNames []string
		for _, o := range ofKind(parseObjects(t, readFile(t, filepath.Join(out, "herald.yaml"))), "CustomResourceDefinition") {
			crdNames = append(crdNames, o.Meta.Name)
		}
		// Each CRD's storage must be up before the deletion: the API
		// server's finalizer cannot list the instances of a CRD deleted
		// right after its creation ("storage is (re)initializing") and the
		// deletion hangs.
		for _, crd := range crdNames {
			poll.Until(t, time.Minute, "kubectl get "+crd, func() error {
				_, err := c.kubectlRun(nil, "get", crd, "-A")
				return err
			})
		}
		c.mustKubectl(t, nil, append([]string{"delete", "crd", "--wait=true", "--timeout=300s"}, crdNames...)...)
		c.mustHelm(t, "install", "rel", filepath.Join(out, chartFile), "--namespace", "rel-system", "--create-namespace", "--timeout", "180s")
		c.wantAllExist(t, c.mustHelm(t, "get", "manifest", "rel", "--namespace", "rel-system"))
		for kind, name := range map[string]string{"deployment": "herald-controller", "daemonset": "herald-speaker"} {
			if got := image(t, kind, "rel-system", "rel-"+name); got != wantImages[name] {
				t.Errorf("helm install of the package: %s rel-%s runs %q, want %q", kind, name, got, wantImages[name])
			}
		}
		poll.Until(t, time.Minute, "kubectl get ipaddresspools", func() error {
			_, err := c.kubectlRun(nil, "get", "ipaddresspools.metallb.io", "-A")
			return err
		})
		c.mustHelm(t, "uninstall", "rel", "--namespace", "rel-system", "--timeout", "180s")

		// --force-conflicts: Helm wrote the CRDs (kept on uninstall).
		manifest := filepath.Join(out, "herald.yaml")
		c.apply(t, "--server-side", "--force-conflicts", "-f", manifest)
		c.wantAllExist(t, readFile(t, manifest))
		for kind, name := range map[string]string{"deployment": "herald-controller", "daemonset": "herald-speaker"} {
			if got := image(t, kind, ns, name); got != wantImages[name] {
				t.Errorf("kubectl apply -f herald.yaml: %s %s runs %q, want %q", kind, name, got, wantImages[name])
			}
		}
	})
}

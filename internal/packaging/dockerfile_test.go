package packaging

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// goDirective returns go.mod's go version ("1.26.0").
func goDirective(t *testing.T, root string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^go (\S+)\s*$`).FindSubmatch(readFile(t, filepath.Join(root, "go.mod")))
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	return string(m[1])
}

// TestDockerfiles checks that each image builds its own binary from the
// right main package, with go.mod's Go version, statically and stamped
// with the version, on the distroless base, as the user the manifests
// expect, and that it copies every top-level directory the binary imports.
func TestDockerfiles(t *testing.T) {
	root := repoRoot(t)
	goVersion := goDirective(t, root)
	for _, tc := range []struct {
		binary, user, base string
	}{
		{binary: "controller", user: "65534:65534", base: "gcr.io/distroless/static-debian12:nonroot"},
		{binary: "speaker", user: "0:0", base: "gcr.io/distroless/static-debian12"},
	} {
		t.Run(tc.binary, func(t *testing.T) {
			name := "Dockerfile." + tc.binary
			df := string(readFile(t, filepath.Join(root, name)))
			must := func(what, pattern string) {
				t.Helper()
				if !regexp.MustCompile(pattern).MatchString(df) {
					t.Errorf("%s: %s (want a line matching %s)", name, what, pattern)
				}
			}
			must("GO_VERSION must be go.mod's go version "+goVersion, `(?m)^ARG GO_VERSION=`+regexp.QuoteMeta(goVersion)+`$`)
			must("builder must be golang:${GO_VERSION}-bookworm", `(?m)^FROM .*golang:\$\{GO_VERSION\}-bookworm AS build$`)
			must("must build statically", `CGO_ENABLED=0 `)
			must("must build with -trimpath", `go build -trimpath`)
			must("must stamp internal/version.Version", `-X github.com/herald-lb/herald/internal/version\.Version=\$\{VERSION\}`)
			must("must stamp internal/version.Commit", `-X github.com/herald-lb/herald/internal/version\.Commit=\$\{COMMIT\}`)
			must("must build ./"+tc.binary, `(?m)-o /out/`+tc.binary+` \./`+tc.binary+`$`)
			must("final stage must be "+tc.base, `(?m)^FROM `+regexp.QuoteMeta(tc.base)+`$`)
			must("must copy the binary into the final stage", `(?m)^COPY --from=build /out/`+tc.binary+` /`+tc.binary+`$`)
			must("must run as "+tc.user, `(?m)^USER `+tc.user+`$`)
			must("ENTRYPOINT must be the binary", `(?m)^ENTRYPOINT \["/`+tc.binary+`"\]$`)
			for _, other := range []string{"controller", "speaker"} {
				if other != tc.binary && strings.Contains(df, "./"+other) {
					t.Errorf("%s builds ./%s", name, other)
				}
			}
			// The version variables the ldflags stamp exist.
			v := string(readFile(t, filepath.Join(root, "internal", "version", "version.go")))
			for _, sym := range []string{"Version", "Commit"} {
				if !regexp.MustCompile(`(?m)^\s+` + sym + `\s+=`).MatchString(v) {
					t.Errorf("internal/version has no variable %s", sym)
				}
			}
			// Every top-level directory of the module the binary depends
			// on is copied into the build stage.
			dirs := importedTopDirs(t, root, tc.binary)
			for _, d := range dirs {
				if !strings.Contains(df, "\nCOPY "+d+"/ "+d+"/\n") {
					t.Errorf("%s: ./%s imports packages under %s/ but the Dockerfile does not COPY %s/", name, tc.binary, d, d)
				}
			}
		})
	}
}

// importedTopDirs lists the module's top-level directories that main
// package ./binary and its dependencies live in. It skips the test when the
// main package has no Go files yet.
func importedTopDirs(t *testing.T, root, binary string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, binary))
	if err != nil {
		t.Fatalf("main package ./%s: %v", binary, err)
	}
	hasGo := false
	for _, e := range entries {
		hasGo = hasGo || strings.HasSuffix(e.Name(), ".go")
	}
	if !hasGo {
		t.Skipf("./%s has no Go files yet: the COPY check needs its imports", binary)
	}
	const mod = "github.com/herald-lb/herald"
	out := run(t, root, nil, nil, "go", "list", "-deps", "-f", "{{.ImportPath}}", "./"+binary)
	set := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		if rest, ok := strings.CutPrefix(p, mod+"/"); ok {
			set[strings.SplitN(rest, "/", 2)[0]] = true
		} else if p == mod {
			t.Fatalf("./%s imports the module root package", binary)
		}
	}
	var dirs []string
	for d := range set {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	if len(dirs) == 0 {
		t.Fatalf("go list found no package of %s for ./%s", mod, binary)
	}
	return dirs
}

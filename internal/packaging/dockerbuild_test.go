package packaging

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
)

// dockerStage is one stage of a parsed Dockerfile with the values its ARG
// instructions take in a build.
type dockerStage struct {
	stage instructions.Stage
	args  map[string]string
}

// env returns the stage's arguments as the KEY=value list BuildKit runs
// its commands with.
func (s dockerStage) env() shell.EnvGetter {
	var kv []string
	for k, v := range s.args {
		kv = append(kv, k+"="+v)
	}
	return shell.EnvsFromSlice(kv)
}

// buildDockerfile parses path with BuildKit's own Dockerfile parser
// (moby/buildkit frontend/dockerfile/parser and instructions, the code
// `docker buildx build` runs) and resolves every stage's ARGs the way
// BuildKit's dockerfile2llb does for a build of the platform os/arch with
// the --build-arg values buildArgs:
//
//   - the automatic platform arguments (TARGETOS, TARGETARCH,
//     TARGETPLATFORM, BUILDPLATFORM, ...) and the ARGs before the first FROM
//     form the global scope; a --build-arg overrides a global ARG's default;
//   - inside a stage, `ARG NAME` takes the --build-arg value if there is one,
//     else its own default if it has one, else the global value. A default
//     on `ARG TARGETARCH=amd64` therefore wins over the platform BuildKit
//     builds for: an arm64 image would get the amd64 binary.
func buildDockerfile(t *testing.T, path, goos, goarch string, buildArgs map[string]string) []dockerStage {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := parser.Parse(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	stages, metaArgs, err := instructions.Parse(res.AST, nil)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	lex := shell.NewLex(res.EscapeToken)
	const build = "linux/amd64" // the machine the builder stage runs on
	global := map[string]string{
		"BUILDPLATFORM": build, "BUILDOS": "linux", "BUILDARCH": "amd64",
		"TARGETPLATFORM": goos + "/" + goarch, "TARGETOS": goos, "TARGETARCH": goarch,
	}
	expand := func(word string, env map[string]string) string {
		t.Helper()
		var kv []string
		for k, v := range env {
			kv = append(kv, k+"="+v)
		}
		out, _, err := lex.ProcessWord(word, shell.EnvsFromSlice(kv))
		if err != nil {
			t.Fatalf("%s: expand %q: %v", path, word, err)
		}
		return out
	}
	for _, m := range metaArgs {
		for _, a := range m.Args {
			if v, ok := buildArgs[a.Key]; ok {
				global[a.Key] = v
			} else if a.Value != nil {
				global[a.Key] = expand(*a.Value, global)
			}
		}
	}
	var out []dockerStage
	for _, st := range stages {
		args := map[string]string{}
		for _, c := range st.Commands {
			ac, ok := c.(*instructions.ArgCommand)
			if !ok {
				continue
			}
			for _, a := range ac.Args {
				if v, ok := buildArgs[a.Key]; ok {
					args[a.Key] = v
				} else if a.Value != nil {
					args[a.Key] = expand(*a.Value, args)
				} else if v, ok := global[a.Key]; ok {
					args[a.Key] = v
				}
			}
		}
		st.BaseName = expand(st.BaseName, global)
		st.Platform = expand(st.Platform, global)
		out = append(out, dockerStage{stage: st, args: args})
	}
	return out
}

// TestDockerfilesMultiPlatform reads Dockerfile.controller and
// Dockerfile.speaker as BuildKit does for a multi-platform build
// (--platform linux/amd64,linux/arm64, --build-arg VERSION and COMMIT) and
// checks, for each target platform: the builder stage runs on the build
// machine's platform ($BUILDPLATFORM), its go build command, as the shell
// gets it, cross-compiles statically for the target (GOOS, GOARCH from
// TARGETOS/TARGETARCH; no default shadows them) and stamps the version and
// commit; the final stage is the target platform's (no --platform) and
// carries the OCI labels source, version, revision, licenses and title.
func TestDockerfilesMultiPlatform(t *testing.T) {
	root := repoRoot(t)
	buildArgs := map[string]string{"VERSION": "v9.8.7", "COMMIT": "0123456789abcdef"}
	for _, bin := range []string{"controller", "speaker"} {
		for _, arch := range []string{"amd64", "arm64"} {
			t.Run(bin+"/linux-"+arch, func(t *testing.T) {
				name := filepath.Join(root, "Dockerfile."+bin)
				stages := buildDockerfile(t, name, "linux", arch, buildArgs)
				if len(stages) != 2 {
					t.Fatalf("%d stages, want 2 (build, final)", len(stages))
				}
				b, final := stages[0], stages[1]
				if b.stage.Name != "build" || b.stage.Platform != "linux/amd64" {
					t.Errorf("builder stage %q runs on %q, want stage \"build\" on the build platform (FROM --platform=$BUILDPLATFORM)", b.stage.Name, b.stage.Platform)
				}
				var goBuild string
				for _, c := range b.stage.Commands {
					if rc, ok := c.(*instructions.RunCommand); ok {
						line := strings.Join(rc.CmdLine, " ")
						if strings.Contains(line, "go build") {
							// The shell expands the ARGs (they are in the
							// RUN's environment).
							out, _, err := shell.NewLex('\\').ProcessWord(line, b.env())
							if err != nil {
								t.Fatal(err)
							}
							goBuild = out
						}
					}
				}
				if goBuild == "" {
					t.Fatal("builder stage has no RUN ... go build")
				}
				fields := strings.Fields(goBuild)
				want := func(field string) {
					t.Helper()
					for _, f := range fields {
						if f == field {
							return
						}
					}
					t.Errorf("go build for linux/%s lacks %s:\n%s", arch, field, goBuild)
				}
				want("CGO_ENABLED=0")
				want("GOOS=linux")
				want("GOARCH=" + arch)
				// -ldflags "-s -w -X ...Version=v9.8.7 -X ...Commit=0123..."
				want("github.com/herald-lb/herald/internal/version.Version=v9.8.7")
				want("github.com/herald-lb/herald/internal/version.Commit=0123456789abcdef")
				if final.stage.Platform != "" {
					t.Errorf("final stage has --platform=%s: it must be the target platform", final.stage.Platform)
				}
				labels := map[string]string{}
				for _, c := range final.stage.Commands {
					if lc, ok := c.(*instructions.LabelCommand); ok {
						for _, kv := range lc.Labels {
							v, _, err := shell.NewLex('\\').ProcessWord(kv.Value, final.env())
							if err != nil {
								t.Fatal(err)
							}
							labels[kv.Key] = v
						}
					}
				}
				for k, v := range map[string]string{
					"org.opencontainers.image.source":   "https://github.com/herald-lb/herald",
					"org.opencontainers.image.version":  "v9.8.7",
					"org.opencontainers.image.revision": "0123456789abcdef",
					"org.opencontainers.image.licenses": "Apache-2.0",
					"org.opencontainers.image.title":    "herald-" + bin,
				} {
					if labels[k] != v {
						t.Errorf("final stage label %s = %q, want %q", k, labels[k], v)
					}
				}
			})
		}
	}
}

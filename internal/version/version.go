// Package version holds the build's version and commit, stamped at link time
// by the Makefile (`make build`, `make release`) and the Dockerfiles with
//
//	-ldflags "-X github.com/herald-lb/herald/internal/version.Version=v0.1.0
//	          -X github.com/herald-lb/herald/internal/version.Commit=<git sha>"
//
// Both binaries print them with --version (and exit 0), log them at start
// and export them as the metric herald_build_info{version,commit,goversion}
// (internal/k8s/serving.RegisterBuildInfo).
package version

import (
	"runtime"
	"runtime/debug"
)

// Stamped at link time; the defaults mark an unstamped development build.
var (
	// Version is the release ("v0.1.0"), "dev" when unstamped.
	Version = "dev"
	// Commit is the Git commit the binary was built from; when unstamped,
	// the VCS revision the go command recorded (with "-dirty" for a
	// modified tree), else "unknown".
	Commit = "unknown"
)

// Revision returns Commit, or, when the build did not stamp it, the
// vcs.revision the go command embeds in a build from a Git checkout
// (runtime/debug.ReadBuildInfo), suffixed "-dirty" when vcs.modified.
func Revision() string {
	if Commit != "unknown" {
		return Commit
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return Commit
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return Commit
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// GoVersion is the Go release the binary was built with ("go1.26.8").
func GoVersion() string { return runtime.Version() }

// String returns "Version (commit Revision, GoVersion)", e.g.
// "v0.1.0 (commit 1a2b3c..., go1.26.8)", for logs.
func String() string {
	return Version + " (commit " + Revision() + ", " + GoVersion() + ")"
}

// Line is what --version prints for binary ("controller", "speaker"):
// "herald-controller v0.1.0 (commit 1a2b3c..., go1.26.8)" and a newline.
func Line(binary string) string {
	return "herald-" + binary + " " + String() + "\n"
}

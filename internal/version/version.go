// Package version holds the build's version, stamped at link time with
// -ldflags "-X github.com/herald-lb/herald/internal/version.Version=v0.1.0
// -X github.com/herald-lb/herald/internal/version.Commit=<sha>".
package version

import "runtime"

// Stamped at link time; the defaults mark an unstamped development build.
var (
	Version = "dev"
	Commit  = "unknown"
)

// String returns "Version (Commit, go version)" for logs and --version.
func String() string {
	return Version + " (" + Commit + ", " + runtime.Version() + ")"
}

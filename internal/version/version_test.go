package version

import (
	"runtime"
	"testing"
)

// TestLine checks --version's line for a stamped build.
func TestLine(t *testing.T) {
	defer func(v, c string) { Version, Commit = v, c }(Version, Commit)
	Version, Commit = "v1.2.3", "0123abcd"
	want := "herald-speaker v1.2.3 (commit 0123abcd, " + runtime.Version() + ")\n"
	if got := Line("speaker"); got != want {
		t.Errorf("Line = %q, want %q", got, want)
	}
}

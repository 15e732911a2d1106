package bfd

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPure enforces the layering rule: the protocol core imports no socket,
// namespace or metrics library (those are internal/bfd/bfdnet's), so pure
// packages such as internal/config may import it.
func TestPure(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not in PATH")
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	forbidden := []string{"net", "golang.org/x/net", "golang.org/x/sys", "github.com/prometheus",
		"github.com/vishvananda", "k8s.io/client-go", "github.com/osrg/gobgp"}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") {
				t.Errorf("internal/bfd depends on %s", dep)
			}
		}
	}
}

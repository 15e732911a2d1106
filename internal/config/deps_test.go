package config

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPure enforces the layering rule: the config model imports no
// Kubernetes client, no BGP library, no metrics and no socket library.
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
	forbidden := []string{"k8s.io/client-go", "github.com/osrg/gobgp", "github.com/prometheus",
		"sigs.k8s.io/controller-runtime/pkg/client", "github.com/vishvananda", "github.com/mdlayher"}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") {
				t.Errorf("internal/config depends on %s", dep)
			}
		}
	}
}

package speaker

import (
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// backends are the packages only the speaker binary (speaker/main.go) may
// see: memberlist, the layer 2 announcer (netlink, raw sockets) and gobgp,
// each behind its one Herald package. The glue reaches them only through
// its own interfaces (L2Announcer, Members, bgp.Speaker) and the pure core
// (announce, config, bgp).
var backends = []string{
	"github.com/herald-lb/herald/internal/members",
	"github.com/herald-lb/herald/internal/layer2",
	"github.com/herald-lb/herald/internal/bgp/gobgp",
	"github.com/hashicorp/memberlist",
	"github.com/osrg/gobgp",
	"github.com/vishvananda",
	"github.com/mdlayher",
}

func isBackend(path string) bool {
	for _, b := range backends {
		if path == b || strings.HasPrefix(path, b+"/") {
			return true
		}
	}
	return false
}

// TestImports enforces the glue's dependency rule on its direct imports
// (non-test files; tests may run a real memberlist).
func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(fset, f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if isBackend(path) || path == "syscall" || strings.HasPrefix(path, "golang.org/x/sys") {
				t.Errorf("%s imports %s; only speaker/main.go may (define an interface here instead)", f, path)
			}
		}
	}
}

// TestNoBackendDeps enforces the rule on every package the glue depends on,
// directly or not (go list -deps).
func TestNoBackendDeps(t *testing.T) {
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
	for _, dep := range strings.Fields(string(out)) {
		if isBackend(dep) {
			t.Errorf("internal/k8s/speaker depends on %s", dep)
		}
	}
}

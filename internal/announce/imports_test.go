package announce

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports enforces the package's dependency rule: no client-go, no BGP
// library, no sockets; Kubernetes API types only in convert.go.
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
			switch {
			case strings.HasPrefix(path, "k8s.io/client-go"), strings.HasPrefix(path, "sigs.k8s.io/controller-runtime"),
				strings.Contains(path, "gobgp"), path == "net", path == "syscall", strings.HasPrefix(path, "github.com/vishvananda"),
				strings.HasPrefix(path, "github.com/mdlayher"), strings.Contains(path, "internal/layer2"):
				t.Errorf("%s imports %s", f, path)
			case strings.HasPrefix(path, "k8s.io/api/") && f != "convert.go":
				t.Errorf("%s imports %s; Kubernetes API types belong in convert.go", f, path)
			}
		}
	}
}

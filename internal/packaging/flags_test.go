package packaging

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// binaryFlags builds main package ./name and returns its flags from -h:
// name -> whether it is a boolean flag. It skips the test when the package
// has no Go files yet.
func binaryFlags(t *testing.T, name string) map[string]bool {
	t.Helper()
	root := repoRoot(t)
	entries, err := os.ReadDir(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	hasGo := false
	for _, e := range entries {
		hasGo = hasGo || strings.HasSuffix(e.Name(), ".go") && !strings.HasSuffix(e.Name(), "_test.go")
	}
	if !hasGo {
		t.Skipf("./%s has no Go files yet", name)
	}
	bin := filepath.Join(t.TempDir(), name)
	run(t, root, nil, nil, "go", "build", "-o", bin, "./"+name)
	cmd := exec.Command(bin, "-h")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	_ = cmd.Run() // -h exits 0 or 2 depending on the flag set's error handling
	flags := map[string]bool{}
	// "  -name type" for valued flags, "  -name" alone for booleans.
	for _, m := range regexp.MustCompile(`(?m)^  -(\S+)( \S+)?$`).FindAllStringSubmatch(out.String(), -1) {
		flags[m[1]] = m[2] == ""
	}
	if len(flags) < 5 {
		t.Fatalf("./%s -h listed %d flags:\n%s", name, len(flags), out.String())
	}
	return flags
}

// checkArgs fails for every argument the binary does not define, and for
// a value-less argument that is not a boolean flag.
func checkArgs(t *testing.T, source string, args []string, flags map[string]bool) {
	t.Helper()
	for _, a := range args {
		name, value, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		isBool, ok := flags[name]
		switch {
		case !strings.HasPrefix(a, "-"):
			t.Errorf("%s: argument %q is not a flag", source, a)
		case !ok:
			t.Errorf("%s: flag %s is not defined by the binary", source, a)
		case !hasValue && !isBool:
			t.Errorf("%s: flag %s needs a value", source, a)
		case hasValue && isBool && value != "true" && value != "false":
			t.Errorf("%s: boolean flag %s", source, a)
		}
	}
}

// TestArgsAreFlags builds the controller and the speaker and checks that
// every argument manifests/herald.yaml and the chart (defaults, every
// option on, and parts switched off) pass them is a flag they define.
func TestArgsAreFlags(t *testing.T) {
	renders := map[string][]object{
		"manifests/herald.yaml": heraldYAML(t),
		"chart defaults":        parseObjects(t, helmTemplate(t, "herald", ns)),
		"chart all options":     parseObjects(t, helmTemplate(t, "herald", ns, allOptions...)),
		"chart parts off": parseObjects(t, helmTemplate(t, "herald", ns, "webhook.certRotation.enabled=false",
			"webhook.enabled=false", "speaker.memberlist.enabled=false", "bgp.enabled=false",
			"controller.extraArgs[0]=--log-level=error", "speaker.extraArgs[0]=--ml-bindport=7947")),
	}
	t.Run("controller", func(t *testing.T) {
		flags := binaryFlags(t, "controller")
		for src, objs := range renders {
			var d appsv1.Deployment
			find(t, objs, "Deployment", ns, "herald-controller").into(t, &d)
			checkArgs(t, src, container(t, d.Spec.Template.Spec, "controller").Args, flags)
		}
	})
	t.Run("speaker", func(t *testing.T) {
		flags := binaryFlags(t, "speaker")
		for src, objs := range renders {
			var ds appsv1.DaemonSet
			find(t, objs, "DaemonSet", ns, "herald-speaker").into(t, &ds)
			checkArgs(t, src, container(t, ds.Spec.Template.Spec, "speaker").Args, flags)
		}
	})
}

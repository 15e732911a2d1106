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
	"sigs.k8s.io/yaml"
)

// schemaTimingKeys returns the keys the chart's values schema allows in
// speaker.memberlist.timings, each with whether it is a duration.
func schemaTimingKeys(t *testing.T) map[string]bool {
	t.Helper()
	var schema struct {
		Properties struct {
			Speaker struct {
				Properties struct {
					Memberlist struct {
						Properties struct {
							Timings struct {
								AdditionalProperties *bool          `json:"additionalProperties"`
								Properties           map[string]any `json:"properties"`
							} `json:"timings"`
						} `json:"properties"`
					} `json:"memberlist"`
				} `json:"properties"`
			} `json:"speaker"`
		} `json:"properties"`
	}
	if err := yaml.Unmarshal(readFile(t, filepath.Join(repoRoot(t), "charts", "herald", "values.schema.json")), &schema); err != nil {
		t.Fatal(err)
	}
	tm := schema.Properties.Speaker.Properties.Memberlist.Properties.Timings
	if tm.AdditionalProperties == nil || *tm.AdditionalProperties {
		t.Error("values.schema.json: speaker.memberlist.timings must not allow additional properties (each becomes a flag)")
	}
	keys := map[string]bool{}
	for k, v := range tm.Properties {
		ref, _ := v.(map[string]any)["$ref"].(string)
		keys[k] = ref == "#/definitions/duration"
	}
	if len(keys) == 0 {
		t.Fatal("values.schema.json lists no memberlist timings")
	}
	return keys
}

// kebab is sprig's kebabcase for the lowerCamel keys of the chart.
func kebab(s string) string {
	var b strings.Builder
	for i, r := range s {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('-')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

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
		// Every memberlist timing key of the chart's schema is a flag, and
		// every timing flag is in the schema.
		keys := schemaTimingKeys(t)
		var sets []string
		inSchema := map[string]bool{}
		for k, isDuration := range keys {
			v := "1"
			if isDuration {
				v = "1s"
			}
			sets = append(sets, "speaker.memberlist.timings."+k+"="+v)
			inSchema["ml-"+kebab(k)] = true
		}
		renders["chart every timing"] = parseObjects(t, helmTemplate(t, "herald", ns, sets...))
		for f := range flags {
			contract := f == "ml-bindaddr" || f == "ml-bindport" || f == "ml-labels" || f == "ml-secret-key-path" || f == "ml-wan-config" || f == "ml-key-derivation"
			if strings.HasPrefix(f, "ml-") && !contract && !inSchema[f] {
				t.Errorf("speaker flag --%s has no key in charts/herald/values.schema.json speaker.memberlist.timings", f)
			}
		}
		for src, objs := range renders {
			var ds appsv1.DaemonSet
			find(t, objs, "DaemonSet", ns, "herald-speaker").into(t, &ds)
			checkArgs(t, src, container(t, ds.Spec.Template.Spec, "speaker").Args, flags)
		}
	})
}

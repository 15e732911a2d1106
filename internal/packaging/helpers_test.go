package packaging

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/herald-lb/herald/internal/testenv"
)

// object is one document of a multi-document YAML stream.
type object struct {
	metav1.TypeMeta
	Meta metav1.ObjectMeta
	Raw  []byte
}

// key names an object as "Kind/namespace/name" ("Kind//name" when
// cluster-scoped).
func (o object) key() string { return o.Kind + "/" + o.Meta.Namespace + "/" + o.Meta.Name }

// into decodes the object into v (a typed API object).
func (o object) into(t testing.TB, v any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(o.Raw, v); err != nil {
		t.Fatalf("decode %s: %v", o.key(), err)
	}
}

// parseObjects splits a YAML stream into its non-empty documents.
func parseObjects(t testing.TB, data []byte) []object {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("split YAML: %v", err)
		}
		var head struct {
			metav1.TypeMeta `json:",inline"`
			Metadata        metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("parse YAML document: %v\n%s", err, doc)
		}
		if head.Kind == "" {
			continue // comments only
		}
		objs = append(objs, object{TypeMeta: head.TypeMeta, Meta: head.Metadata, Raw: doc})
	}
}

// find returns the object of kind, namespace and name, failing the test
// when it is missing.
func find(t testing.TB, objs []object, kind, namespace, name string) object {
	t.Helper()
	for _, o := range objs {
		if o.Kind == kind && o.Meta.Namespace == namespace && o.Meta.Name == name {
			return o
		}
	}
	t.Fatalf("no %s %s/%s in the rendered objects", kind, namespace, name)
	return object{}
}

func ofKind(objs []object, kind string) []object {
	var out []object
	for _, o := range objs {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}

func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// heraldYAML returns the objects of manifests/herald.yaml.
func heraldYAML(t testing.TB) []object {
	t.Helper()
	return parseObjects(t, readFile(t, filepath.Join(repoRoot(t), "manifests", "herald.yaml")))
}

// run runs a command and returns its stdout; on failure it fails the test
// with stderr.
func run(t testing.TB, dir string, stdin []byte, env []string, name string, args ...string) []byte {
	t.Helper()
	out, err := tryRun(dir, stdin, env, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return out
}

func tryRun(dir string, stdin []byte, env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		// stderr last: it holds the error, stdout may be long.
		return stdout.Bytes(), fmt.Errorf("%w\nstdout:\n%s\nstderr:\n%s", err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

// kubectl returns the kubectl to use (testenv.Kubectl): $KUBECTL, else
// bin/k8s/kubectl from `make test-assets`, else the one on PATH.
func kubectl(t testing.TB) string {
	t.Helper()
	p, err := testenv.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var helmOnce sync.Once

// helm returns bin/helm, building it from hack/tools/helm (as `make tools`
// does) when it is missing, and an environment that keeps Helm's caches
// and configuration inside the test's temporary directory.
func helm(t testing.TB) (bin string, env []string) {
	t.Helper()
	root := repoRoot(t)
	bin = filepath.Join(root, "bin", "helm")
	var buildErr error
	helmOnce.Do(func() {
		if _, err := os.Stat(bin); err == nil {
			return
		}
		t.Logf("building %s from hack/tools/helm", bin)
		_, buildErr = tryRun(filepath.Join(root, "hack", "tools", "helm"), nil, nil, "go", "build", "-o", bin, "helm.sh/helm/v3/cmd/helm")
	})
	if buildErr != nil {
		t.Fatalf("build helm: %v", buildErr)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("helm: %v (make tools)", err)
	}
	home := t.TempDir()
	env = []string{
		"HELM_CACHE_HOME=" + filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(home, "config"),
		"HELM_DATA_HOME=" + filepath.Join(home, "data"),
	}
	return bin, env
}

// kubeVersion is the Kubernetes version `helm template` assumes: a helm
// built with plain `go build` would otherwise assume v1.20, below the
// chart's kubeVersion.
const kubeVersion = "1.37.2"

// helmTemplate renders charts/herald as release name in namespace with the
// --set arguments in sets.
func helmTemplate(t testing.TB, name, namespace string, sets ...string) []byte {
	t.Helper()
	bin, env := helm(t)
	args := []string{"template", name, filepath.Join(repoRoot(t), "charts", "herald"), "--namespace", namespace, "--kube-version", kubeVersion}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return run(t, "", nil, env, bin, args...)
}

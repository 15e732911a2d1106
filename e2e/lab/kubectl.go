package lab

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// KubectlEnv names the environment variable that overrides the kubectl the
// lab runs (a path; the Makefile sets it to bin/k8s/kubectl).
const KubectlEnv = "KUBECTL"

// KubectlPath returns the absolute path of the kubectl the lab runs, in this
// order: $KUBECTL when set (it must exist), else bin/k8s/kubectl at the
// repository root (built from k8s.io/kubernetes/cmd/kubectl by `make
// test-assets`, hack/test-assets.sh), else the first kubectl on PATH. The
// error says how to get one. The path is absolute because the lab runs
// kubectl inside its namespaces (`ip netns exec`).
func KubectlPath() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		root = ""
	}
	return kubectlIn(root)
}

// kubectlIn is KubectlPath with the repository root given ("" when unknown).
func kubectlIn(root string) (string, error) {
	if k := os.Getenv(KubectlEnv); k != "" {
		p, err := exec.LookPath(k)
		if err != nil {
			return "", fmt.Errorf("kubectl: $%s=%q: %w", KubectlEnv, k, err)
		}
		return filepath.Abs(p)
	}
	if root != "" {
		p := filepath.Join(root, "bin", "k8s", "kubectl")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	p, err := exec.LookPath("kubectl")
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return "", fmt.Errorf("kubectl not found: run `make test-assets` (builds bin/k8s/kubectl), set %s or put kubectl 1.27+ on PATH", KubectlEnv)
		}
		return "", fmt.Errorf("kubectl: %w", err)
	}
	return filepath.Abs(p)
}

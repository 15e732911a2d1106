package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Kubectl returns the absolute path of the kubectl that tests run against
// the test API server, in this order: $KUBECTL when set (it must exist),
// else bin/k8s/kubectl at the repository root (built from
// k8s.io/kubernetes/cmd/kubectl by `make test-assets`, next to
// kube-apiserver and etcd), else the first kubectl on PATH. The error says
// how to get one. e2e/lab.KubectlPath does the same lookup for the lab.
func Kubectl() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		root = ""
	}
	return kubectlIn(root)
}

// kubectlIn is Kubectl with the repository root given ("" when unknown).
func kubectlIn(root string) (string, error) {
	if k := os.Getenv("KUBECTL"); k != "" {
		p, err := exec.LookPath(k)
		if err != nil {
			return "", fmt.Errorf("kubectl: $KUBECTL=%q: %w", k, err)
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
			return "", errors.New("kubectl not found: run `make test-assets` (builds bin/k8s/kubectl), set KUBECTL or put kubectl 1.27+ on PATH")
		}
		return "", fmt.Errorf("kubectl: %w", err)
	}
	return filepath.Abs(p)
}

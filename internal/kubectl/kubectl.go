// Package kubectl finds the kubectl that Herald's tests and lab run: the one
// built from its Go module into bin/k8s (hack/test-assets.sh), unless
// $KUBECTL names another. The Debian package is too old (1.20; the manifests
// need 1.27+ for server-side apply of the CRDs' validation rules).
package kubectl

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Env names the environment variable that overrides the lookup (a path or a
// name on PATH; the Makefile sets it to bin/k8s/kubectl).
const Env = "KUBECTL"

// Find returns the absolute path of the kubectl to run, in this order:
// $KUBECTL when set (it must exist), else bin/k8s/kubectl under root, the
// repository root ("" when unknown; built from k8s.io/kubernetes/cmd/kubectl
// by `make test-assets`, next to kube-apiserver and etcd), else the first
// kubectl on PATH. The path is absolute because the lab runs kubectl inside
// its network namespaces. The error says how to get one.
func Find(root string) (string, error) {
	if k := os.Getenv(Env); k != "" {
		p, err := exec.LookPath(k)
		if err != nil {
			return "", fmt.Errorf("kubectl: $%s=%q: %w", Env, k, err)
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

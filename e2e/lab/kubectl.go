package lab

import "github.com/herald-lb/herald/internal/kubectl"

// KubectlEnv names the environment variable that overrides the kubectl the
// lab runs (a path; the Makefile sets it to bin/k8s/kubectl).
const KubectlEnv = kubectl.Env

// KubectlPath returns the absolute path of the kubectl the lab runs, in this
// order: $KUBECTL when set (it must exist), else bin/k8s/kubectl at the
// repository root (built from k8s.io/kubernetes/cmd/kubectl by `make
// test-assets`, hack/test-assets.sh), else the first kubectl on PATH. The
// error says how to get one (internal/kubectl.Find).
func KubectlPath() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		root = ""
	}
	return kubectl.Find(root)
}

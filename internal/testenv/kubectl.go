package testenv

import "github.com/herald-lb/herald/internal/kubectl"

// Kubectl returns the absolute path of the kubectl that tests run against
// the test API server, in this order: $KUBECTL when set (it must exist),
// else bin/k8s/kubectl at the repository root (built from
// k8s.io/kubernetes/cmd/kubectl by `make test-assets`, next to
// kube-apiserver and etcd), else the first kubectl on PATH. The error says
// how to get one (internal/kubectl.Find, which the lab uses too).
func Kubectl() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		root = ""
	}
	return kubectl.Find(root)
}

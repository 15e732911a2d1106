//go:build tools

// Package tools pins the Kubernetes binaries (kube-apiserver, etcd, kubectl)
// that hack/test-assets.sh builds from source for the integration tests, the
// packaging tests and the lab.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)

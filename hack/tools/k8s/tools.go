//go:build tools

// Package tools pins the Kubernetes test binaries (kube-apiserver, etcd) that
// hack/test-assets.sh builds from source for the integration tests and the lab.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)

//go:build tools

// Package tools pins controller-gen, which generates the CRD YAML and deepcopy
// code from the kubebuilder markers in api/.
package tools

import _ "sigs.k8s.io/controller-tools/cmd/controller-gen"

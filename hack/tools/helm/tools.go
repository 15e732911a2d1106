//go:build tools

// Package tools pins Helm, built from its Go module for the chart tests.
package tools

import _ "helm.sh/helm/v3/cmd/helm"

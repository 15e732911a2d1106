// Package packaging holds the tests of Herald's packaging: the Dockerfiles
// (Dockerfile.controller, Dockerfile.speaker), the kustomize manifests
// (manifests/base, rendered into manifests/herald.yaml by
// hack/render-manifests.sh) and the Helm chart (charts/herald).
//
// The tests check that the rendered files are fresh ("run make manifests"),
// that the manifests follow the shared names and flags of the binaries,
// that the RBAC grants exactly the documented permissions (statically and
// through `kubectl auth can-i` against a real API server), that the chart
// lints, renders, installs and agrees with the manifests, that its
// Prometheus alerts fire as documented (`promtool test rules`), and that
// the Dockerfiles build the right binaries with go.mod's Go version.
//
// The package has no non-test code. The API server tests need
// KUBEBUILDER_ASSETS (make test-assets) and kubectl (KUBECTL overrides the
// one on PATH); they are skipped under -short.
package packaging

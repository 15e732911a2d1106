// Package crdtest holds the integration tests of Herald's CRDs
// (manifests/crds) against a real kube-apiserver: round trips of every kind,
// defaults, and the schema and CEL rules that reject bad objects. It has no
// non-test code.
package crdtest

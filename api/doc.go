// Package api holds Herald's custom resource types, one Go package per API
// version: of the metallb.io group, v1beta1 (storage version of every kind
// except BGPPeer) and v1beta2 (BGPPeer storage version), whose JSON shape
// matches MetalLB, so MetalLB YAML applies unchanged; and v1alpha1, Herald's
// own group herald.io, for kinds MetalLB does not have (BGPSessionState).
//
// The Go types are the source of truth: hack/generate.sh runs controller-gen
// over them to write zz_generated.deepcopy.go and manifests/crds. The test in
// this package fails when those generated files are stale.
package api

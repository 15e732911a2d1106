// Package allocationtest starts the API server of the allocation
// integration tests (internal/k8s/allocation, controller) and of the
// bench-alloc measurement command: internal/testenv's one envtest starter
// (Herald's CRDs, binaries from KUBEBUILDER_ASSETS) with the API server
// flags those need, a dual-stack Service CIDR large enough for thousands of
// Services and in-flight limits a burst does not hit. Start works outside
// `go test` (testenv.Launch).
package allocationtest

import (
	"github.com/herald-lb/herald/internal/testenv"
)

// ServiceCIDRs is the API server's --service-cluster-ip-range: IPv4 /16 and
// IPv6 /112, so Services can be dual-stack and a burst of 10k fits.
const ServiceCIDRs = "10.96.0.0/16,fd00:10:96::/112"

// Options are testenv's options for the allocation tests (for
// testenv.StartWith in a test that wants its own API server).
func Options() testenv.Options {
	return testenv.Options{APIServerFlags: map[string]string{
		"service-cluster-ip-range": ServiceCIDRs,
		// Bursts of thousands of writes: do not let the API server's own
		// flow control be the bottleneck being measured.
		"max-requests-inflight":          "2000",
		"max-mutating-requests-inflight": "1000",
	}}
}

// Start starts etcd and kube-apiserver with Options (testenv.Launch): from
// KUBEBUILDER_ASSETS, else bin/k8s of the repository, with manifests/crds
// installed. Stop it with Env.Stop.
func Start() (*testenv.Env, error) {
	return testenv.Launch(Options())
}

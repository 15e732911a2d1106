//go:build tools

// Package tools pins MetalLB's controller and speaker (go.universe.tf/metallb),
// built from their Go module by hack/metallb-assets.sh into bin/metallb for
// the migration test (e2e TestMigration, make bench-migration).
//
// MetalLB v0.16.2 requires github.com/metallb/frr-k8s v0.0.27, which the Go
// module proxy does not serve (403 "This module version is not available");
// the newest it serves is v0.0.21. go.mod replaces it with v0.0.21, and
// hack/metallb-assets.sh builds against a copy of v0.0.21's API package with the one type and
// field v0.0.21's API lacks (AsPathPrependPrefixes, Advertise.PrefixesWithAsPathPrepend)
// that MetalLB's frr-k8s backend refers to. The native BGP mode the lab runs
// never reaches that backend.
package tools

import (
	_ "go.universe.tf/metallb/controller"
	_ "go.universe.tf/metallb/speaker"
)

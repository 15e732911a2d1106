//go:build tools

// Package tools pins CycloneDX's cyclonedx-gomod, which hack/release.sh runs
// to write the release's SBOM (a CycloneDX BOM of the modules linked into
// each binary) (make release).
package tools

import (
	_ "github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod"
)

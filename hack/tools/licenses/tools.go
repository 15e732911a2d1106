//go:build tools

// Package tools pins go-licenses, which hack/release.sh runs to list the
// licences of the Go modules linked into Herald's binaries and to copy their
// licence and NOTICE texts into the release (make release).
package tools

import (
	_ "github.com/google/go-licenses"
)

//go:build tools

// Package tools pins golangci-lint, built from its Go module for `make lint`
// (the linters and the import rules are in .golangci.yml at the repository root).
package tools

import _ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"

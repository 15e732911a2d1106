package crdtest

import (
	"context"
	"testing"
	"time"

	"github.com/herald-lb/herald/internal/testenv"
)

// TestCRDs runs every check against one API server: starting one takes
// seconds, the checks take milliseconds.
func TestCRDs(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("RoundTrip", func(t *testing.T) { testRoundTrip(ctx, t, env) })
	t.Run("Defaults", func(t *testing.T) { testDefaults(ctx, t, env) })
	t.Run("Rejects", func(t *testing.T) { testRejects(ctx, t, env) })
	t.Run("Immutable", func(t *testing.T) { testImmutable(ctx, t, env) })
	t.Run("ServerSideApply", func(t *testing.T) { testServerSideApply(ctx, t, env) })
	t.Run("Kubectl", func(t *testing.T) { testKubectl(ctx, t, env) })
}

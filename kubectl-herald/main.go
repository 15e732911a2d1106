// Command kubectl-herald is the kubectl plugin "kubectl herald": it explains,
// read-only and with the user's kubeconfig, why a Service has (or has not)
// its address and who announces it (why), the pools (pools), the BGP
// sessions (peers) and the components' configuration state (config).
// Install it by copying bin/kubectl-herald onto PATH. The logic is
// internal/explain, the Kubernetes side internal/k8s/herald.
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/herald-lb/herald/internal/k8s/herald"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := herald.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

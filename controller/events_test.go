package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/internal/poll"
)

// The controller's events name MetalLB's component, metallb-controller,
// as the speaker's name metallb-speaker: `kubectl get events
// --field-selector reportingComponent=metallb-controller` and the "From"
// column of kubectl describe read as with MetalLB (docs/migrating-from-metallb.md).
func TestEventSource(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real API server; skipped under -short")
	}
	env, bin, kc := controllerEnv(t)
	ctx := context.Background()
	herald, app, vwc := heraldFixture(t, env.Client, "198.51.100.0/28")
	startController(t, bin, kc, herald, vwc.Name, "controller", "--pod-name=herald-controller-x")
	if err := env.Client.Create(ctx, lbService(app, "web")); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 60*time.Second, "an IPAllocated event on Service web", func() error {
		var evs eventsv1.EventList
		if err := env.Client.List(ctx, &evs, client.InNamespace(app)); err != nil {
			return err
		}
		seen := ""
		for _, e := range evs.Items {
			if e.Regarding.Name != "web" || e.Reason != "IPAllocated" {
				continue
			}
			if e.ReportingController == "metallb-controller" {
				return nil
			}
			seen += fmt.Sprintf("%s from %q; ", e.Reason, e.ReportingController)
		}
		return fmt.Errorf("no IPAllocated event from metallb-controller; seen: %s", seen)
	})
}

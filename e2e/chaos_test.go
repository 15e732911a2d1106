package e2e

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/herald-lb/herald/e2e/chaos"
	"github.com/herald-lb/herald/e2e/lab"
	"github.com/herald-lb/herald/internal/layer2"
)

// TestChaos runs the short form of every chaos scenario (e2e/chaos; the
// full form is `make bench-chaos`) in one lab and asserts the targets: a
// count row must be 0 (nothing lost), a time row must stay under a bound
// generous enough for a noisy 2-core machine (the product target is
// reported in the logs and by bench-chaos).
func TestChaos(t *testing.T) {
	e := newEnv(t, 3, lab.InstallOptions{})
	ce := &chaos.Env{Lab: e.l, Herald: e.h, Log: slog.New(slog.NewTextHandler(os.Stderr, nil))}
	var results []chaos.Result
	t.Cleanup(func() { t.Logf("chaos table (short form):\n%s", chaos.Table(results, len(e.l.Nodes))) })
	check := func(t *testing.T, res chaos.Result, err error, timeBound time.Duration) {
		t.Helper()
		results = append(results, res)
		for _, n := range res.Notes {
			t.Log(n)
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res.Rows {
			switch {
			case r.Timing && r.Duration > timeBound:
				t.Errorf("%s: %s = %s, want at most %s here (product target %s)", r.Scenario, r.Measure, r.Value(), timeBound, r.Target)
			case r.Timing:
				t.Logf("%s: %s = %s (product target %s)", r.Scenario, r.Measure, r.Value(), r.Target)
			case !r.Met:
				t.Errorf("%s: %s = %s, want %s", r.Scenario, r.Measure, r.Value(), r.Target)
			}
		}
	}

	t.Run("SpeakerRestarts", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		res, err := chaos.SpeakerRestarts(ctx, ce, chaos.RestartOptions{Restarts: 2})
		check(t, res, err, 0)
	})
	t.Run("ControllerKills", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		res, err := chaos.ControllerKills(ctx, ce, chaos.BurstOptions{Services: 150, Kills: 3})
		check(t, res, err, 0)
	})
	t.Run("LinkCut", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		res, err := chaos.LinkCut(ctx, ce, chaos.LinkCutOptions{Trials: 1, Cut: 10 * time.Second, Observe: 20 * time.Second})
		check(t, res, err, 15*time.Second)
	})
	t.Run("CPULoad", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		res, err := chaos.CPULoad(ctx, ce, chaos.CPULoadOptions{Load: 20 * time.Second})
		check(t, res, err, 0)
	})
	t.Run("APIOutage", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		res, err := chaos.APIOutage(ctx, ce, chaos.APIOutageOptions{Outage: 15 * time.Second})
		// The product target is 5 s; measured 2.2 s here (the controller
		// exits on lost leadership and is started again). 10 s leaves room
		// for this noisy machine and still fails the causes fixed for it:
		// the restarted controller waiting 15 s for its own old Lease
		// (16.4 s to the address) and client-go's reflector backoff
		// (24-50 s to the wire).
		check(t, res, err, 10*time.Second)
	})
	t.Run("ControllerRollout", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
		defer cancel()
		res, err := chaos.ControllerRollout(ctx, ce, chaos.ControllerRolloutOptions{Rounds: 1, Services: 120})
		check(t, res, err, 0)
	})
	t.Run("MLKeyRotation", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		res, err := chaos.MLKeyRotation(ctx, ce, chaos.MLKeyOptions{Stagger: 3 * time.Second})
		// The one time row is the longest overlap: how long two nodes
		// answered one address (the client's port captured, requests every
		// 50 ms). Its bound is a protocol property, not machine speed: a
		// node that sees another claim its address re-announces at once,
		// and the old owner stops when it learns of the move, so the two
		// answer for no longer than one gratuitous burst as the speaker
		// defines it (layer2.DefaultBurstLength: DefaultGratuitousCount
		// packets DefaultGratuitousInterval apart, 0.8 s; the lab runs the
		// speakers with the defaults). The measure over-counts by at most
		// one request interval, so a pass is a pass.
		check(t, res, err, layer2.DefaultBurstLength)
	})
	t.Run("PrefixFlood", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		// Twice the speaker's default limit (10,000) is enough to cross it.
		res, err := chaos.PrefixFlood(ctx, ce, chaos.PrefixFloodOptions{Prefixes: 20_000})
		check(t, res, err, 0)
	})
	t.Run("Rollout", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		res, err := chaos.Rollout(ctx, ce, chaos.RolloutOptions{})
		check(t, res, err, 10*time.Second)
	})
}

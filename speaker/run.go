package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/signal"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/herald-lb/herald/internal/bgp/gobgp"
	"github.com/herald-lb/herald/internal/layer2"
	"github.com/herald-lb/herald/internal/members"
)

// component is one long-running part, stopped by cancelling its context.
type component struct {
	name   string
	run    func(context.Context) error
	cancel context.CancelFunc
	done   chan struct{}
}

func start(name string, run func(context.Context) error, fail chan<- error) *component {
	ctx, cancel := context.WithCancel(context.Background())
	c := &component{name: name, run: run, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		if err := run(ctx); err != nil {
			fail <- fmt.Errorf("%s: %w", name, err)
		}
	}()
	return c
}

func (c *component) stop() {
	if c != nil {
		c.cancel()
		<-c.done
	}
}

// shutdownBudget bounds the whole shutdown after SIGTERM. It is less than
// the speaker DaemonSet's terminationGracePeriodSeconds (5 s in
// manifests/base/speaker.yaml and the chart), so the process exits by
// itself before the kubelet's SIGKILL. The budget (see docs/reliability.md,
// "Speaker shutdown"):
//
//   - t = 0: the BGP sessions are closed at once, in parallel with
//     everything else: gobgp sends every peer a Cease NOTIFICATION (RFC 4271
//     §6.7, subcode 3 "Peer De-configured", RFC 4486) and closes the
//     connection, so routers withdraw this node's routes immediately, also
//     with graceful restart (RFC 4724 keeps routes only when the session
//     drops without a NOTIFICATION). This takes milliseconds; nothing else
//     (the memberlist leave, joins to unreachable peers, the manager) can
//     delay it.
//   - t = 0 .. about LeaveTimeout (1 s): memberlist leaves (leaving
//     announcement, Leave, Shutdown; in-flight joins are not waited for), so
//     the other speakers elect successors for the layer 2 addresses; then
//     the manager stops (no more reconciles) and the layer 2 announcer stops
//     answering ARP/NDP, after the successors were told.
//   - t = shutdownBudget: runAll returns even if a component is still
//     stopping (logged), leaving the rest of the grace period as margin.
const shutdownBudget = 4 * time.Second

// runAll runs every component until a signal or the first failure, then
// shuts down within shutdownBudget: the BGP speaker closes at once, in
// parallel with the ordered stop of memberlist (leave, so a successor takes
// over at once), the manager (no more reconciles) and the layer 2 announcer.
func runAll(log *slog.Logger, ml *members.List, l2 *layer2.Announcer, bgpSpeaker *gobgp.Speaker, mgr manager.Manager) error {
	sig, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stopSignals()
	fail := make(chan error, 3)
	var mlC, l2C *component
	if ml != nil {
		mlC = start("memberlist", ml.Run, fail)
	}
	if l2 != nil {
		l2C = start("layer2", l2.Run, fail)
	}
	mgrC := start("manager", mgr.Start, fail)

	var err error
	select {
	case <-sig.Done():
		log.Info("shutting down")
	case err = <-fail:
		log.Error("component failed, shutting down", "error", err)
	}
	return errors.Join(err, shutdown(log, shutdownBudget, bgpSpeaker, mlC, mgrC, l2C))
}

// shutdown closes the BGP speaker (if any) at once and, in parallel, stops
// memberlist, the manager and the layer 2 announcer in that order (nil
// components are skipped). It returns when both are done or after budget,
// whichever comes first; an error reports a failed BGP close or the budget
// running out.
func shutdown(log *slog.Logger, budget time.Duration, bgpSpeaker *gobgp.Speaker, mlC, mgrC, l2C *component) error {
	begin := time.Now()
	timeout := time.NewTimer(budget)
	defer timeout.Stop()
	bgpDone := make(chan error, 1)
	if bgpSpeaker != nil {
		go func() {
			err := bgpSpeaker.Close()
			log.Info("BGP sessions closed", "duration", time.Since(begin), "error", err)
			bgpDone <- err
		}()
	} else {
		bgpDone <- nil
	}
	ordered := make(chan struct{})
	go func() {
		defer close(ordered)
		if mlC != nil {
			mlC.stop()
			log.Info("left memberlist", "duration", time.Since(begin))
		}
		mgrC.stop()
		l2C.stop()
	}()
	var err error
	for pending := 2; pending > 0; pending-- {
		select {
		case cerr := <-bgpDone:
			if cerr != nil {
				err = errors.Join(err, fmt.Errorf("close BGP speaker: %w", cerr))
			}
			bgpDone = nil
		case <-ordered:
			ordered = nil
		case <-timeout.C:
			log.Error("shutdown budget exceeded, exiting with components still stopping", "budget", budget,
				"bgpClosed", bgpDone == nil, "othersStopped", ordered == nil)
			return errors.Join(err, fmt.Errorf("shutdown not finished within %s", budget))
		}
	}
	log.Info("stopped", "duration", time.Since(begin))
	return err
}

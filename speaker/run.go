package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/signal"
	"syscall"
	"time"

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
//   - t = 0, in parallel with the BGP close: the layer 2 announcer stops
//     (its ARP/NDP sockets close, running gratuitous bursts are cancelled),
//     and only then, or after layer2StopWait if it hangs, memberlist leaves
//     (leaving announcement and its acknowledgements (0.5 s at most), Leave,
//     Shutdown, about 1.5 × LeaveTimeout (1.5 s) at
//     most; in-flight joins are not waited for), so the other speakers elect
//     successors for the layer 2 addresses. A successor's takeover burst is
//     the last word for each address: this node answers nothing after it,
//     so the successor sees no reply from this node and records no
//     l2Conflict. The cost is that nobody answers the address between this
//     node's stop and the successor's takeover (the leave's propagation
//     plus one reconcile); clients' entries for it stay valid meanwhile,
//     and the successor's gratuitous ARP/NA moves them. Then the manager
//     stops (no more reconciles).
//   - t = shutdownBudget: runAll returns even if a component is still
//     stopping (logged), leaving the rest of the grace period as margin.
const shutdownBudget = 4 * time.Second

// layer2StopWait bounds how long the memberlist leave waits for the layer 2
// announcer to stop (normally well under a millisecond: cancel, close the
// sockets): a hung announcer must not keep the successors from being told.
const layer2StopWait = 500 * time.Millisecond

// runAll runs every component until a signal or the first failure, then
// shuts down within shutdownBudget: the BGP speaker closes at once, in
// parallel with the ordered stop of the layer 2 announcer (nothing answered
// from here on), memberlist (leave, so a successor takes over at once) and
// the manager (no more reconciles).
//
// runManager runs the controller-runtime manager (and what must stop after
// it) until its context ends.
func runAll(log *slog.Logger, ml *members.List, l2 *layer2.Announcer, bgpSpeaker *gobgp.Speaker, runManager func(context.Context) error) error {
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
	mgrC := start("manager", runManager, fail)

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
// the layer 2 announcer, then memberlist (once layer 2 has stopped, or after
// layer2StopWait), then the manager (nil components are skipped). It
// returns when all are done or after budget, whichever comes first; an
// error reports a failed BGP close or the budget running out.
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
		// Layer 2 first: the successors elected on the leave must be the
		// last to answer for this node's addresses.
		l2Done := make(chan struct{})
		go func() {
			defer close(l2Done)
			if l2C != nil {
				l2C.stop()
				log.Info("layer 2 stopped: answering no ARP/NDP", "duration", time.Since(begin))
			}
		}()
		wait := time.NewTimer(layer2StopWait)
		select {
		case <-l2Done:
		case <-wait.C:
			log.Warn("layer 2 announcer still stopping, leaving memberlist anyway", "waited", layer2StopWait)
		}
		wait.Stop()
		if mlC != nil {
			mlC.stop()
			log.Info("left memberlist", "duration", time.Since(begin))
		}
		mgrC.stop()
		<-l2Done
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

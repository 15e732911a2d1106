package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/signal"
	"syscall"

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

// runAll runs every component until a signal or the first failure, then
// stops them in order: memberlist (leave, so a successor takes over at once),
// the manager (no more reconciles), the layer 2 announcer, the BGP speaker.
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
	if mlC != nil {
		mlC.stop()
		log.Info("left memberlist")
	}
	mgrC.stop()
	l2C.stop()
	if bgpSpeaker != nil {
		if cerr := bgpSpeaker.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close BGP speaker: %w", cerr))
		}
	}
	log.Info("stopped")
	return err
}

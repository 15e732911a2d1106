package apiretry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// WaitReachable returns once the API server at cfg answers discovery (a
// controller-runtime manager's setup needs it: webhooks and caches map
// kinds to resources), or with ctx's error. Without it a process started
// during an API server outage (the controller after it lost the Lease
// there, a speaker on a rebooted node) exited at once, and the kubelet's
// growing CrashLoopBackOff (10 s, 20 s, 40 s, ... up to 5 min) then delayed
// its return long after the API server was back. Meanwhile it answers the
// liveness probe (/healthz 200) on healthAddr ("" or "0": none) and
// /readyz with 503, so the kubelet does not kill it. Retries follow
// FirstDelay doubling to MaxDelay; log gets one line when waiting starts
// and one when it ends.
func WaitReachable(ctx context.Context, cfg *rest.Config, healthAddr string, log *slog.Logger) error {
	dc, err := discovery.NewDiscoveryClientForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return fmt.Errorf("discovery client: %w", err)
	}
	ping := func() error { _, err := dc.ServerVersion(); return err }
	if ping() == nil {
		return nil
	}
	log.Warn("waiting for the API server", "host", cfg.Host)
	if healthAddr != "" && healthAddr != "0" {
		stop, err := serveWaitingProbes(healthAddr)
		if err != nil {
			return err
		}
		defer stop()
	}
	start := time.Now()
	for d := FirstDelay; ; d = min(2*d, MaxDelay) {
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		if err := ping(); err == nil {
			log.Info("API server reachable", "waited", time.Since(start).Round(time.Millisecond).String())
			return nil
		} else if !Unreachable(err) {
			log.Warn("API server answers with an error; still waiting", "error", err)
		}
	}
}

// serveWaitingProbes serves /healthz (200) and /readyz (503) on addr until
// stop, which frees addr for the manager's probe server.
func serveWaitingProbes(addr string) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health probes on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "waiting for the API server", http.StatusServiceUnavailable)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the manager's own probe server reports bind problems
		}
	}()
	return func() { _ = srv.Close(); <-done }, nil
}

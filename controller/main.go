// Command controller is Herald's cluster-wide controller: it assigns
// LoadBalancer IPs to Services and publishes pool counters
// (internal/k8s/allocation), keeps the memberlist Secret
// (internal/k8s/mlsecret) and serves the validating webhooks
// (internal/k8s/webhook). This file only wires them into a controller-runtime
// manager; flags are in options.go and follow MetalLB's controller.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/herald-lb/herald/internal/k8s/allocation"
	"github.com/herald-lb/herald/internal/k8s/apiretry"
	"github.com/herald-lb/herald/internal/k8s/configload"
	"github.com/herald-lb/herald/internal/k8s/eventrec"
	"github.com/herald-lb/herald/internal/k8s/fieldmanager"
	"github.com/herald-lb/herald/internal/k8s/mlsecret"
	"github.com/herald-lb/herald/internal/k8s/scheme"
	"github.com/herald-lb/herald/internal/k8s/serving"
	"github.com/herald-lb/herald/internal/k8s/sessiongc"
	"github.com/herald-lb/herald/internal/k8s/webhook"
	"github.com/herald-lb/herald/internal/logging"
	"github.com/herald-lb/herald/internal/version"
)

func main() {
	var o options
	o.register(flag.CommandLine, os.Getenv)
	flag.Parse()
	if o.version {
		fmt.Print(version.Line("controller"))
		return
	}
	log, level, err := logging.NewLeveled(os.Stdout, o.logLevel, "controller")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := o.complete(os.ReadFile); err != nil {
		log.Error("invalid command line", "error", err)
		os.Exit(2)
	}
	log.Info("starting", "version", version.String(), "namespace", o.namespace, "webhookMode", o.webhookMode, "lbClass", o.lbClass)
	if err := run(ctrl.SetupSignalHandler(), &o, log, level); err != nil {
		log.Error("controller failed", "error", err)
		os.Exit(1)
	}
	log.Info("stopped")
}

// run builds the manager, adds the components --webhook-mode asks for and
// runs until ctx ends (SIGTERM), then shuts down gracefully. level is the
// logger's, changed at run time by PUT /debug/loglevel on the metrics
// server and by SIGUSR1/SIGUSR2.
func run(ctx context.Context, o *options, log *slog.Logger, level *slog.LevelVar) error {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	// client-go's default 5 QPS / 10 burst would throttle a burst of new
	// Services to a crawl.
	cfg.QPS, cfg.Burst = float32(o.apiQPS), o.apiBurst
	// Names the controller in the API server's audit log.
	cfg.UserAgent = fieldmanager.Controller + "/" + version.Version
	sch, err := scheme.New()
	if err != nil {
		return err
	}
	metricsOpts, err := o.serving.MetricsOptions()
	if err != nil {
		return err
	}
	serving.AddHandler(&metricsOpts, logging.LevelPath, logging.LevelHandler(level, log))
	logging.HandleSignals(ctx, level, log)
	if o.pprofAddress != "" {
		if err := startPprof(ctx, o.pprofAddress, log); err != nil {
			return err
		}
	}
	tlsOpts, err := o.serving.TLSOptions()
	if err != nil {
		return err
	}
	if err := apiretry.WaitReachable(ctx, cfg, o.serving.HealthProbeAddress(), log); err != nil {
		if ctx.Err() != nil {
			return nil // SIGTERM while waiting
		}
		return err
	}
	mopts := manager.Options{
		Scheme: sch,
		// Every write of the manager's client names the controller in
		// managedFields.
		Client:                 client.Options{FieldOwner: fieldmanager.Controller},
		Cache:                  allocation.CacheOptions(o.namespace),
		Metrics:                metricsOpts,
		HealthProbeBindAddress: o.serving.HealthProbeAddress(),
		LeaderElection:         o.leaderElect,
		LeaseDuration:          ptr.To(leaseDuration),
		RenewDeadline:          ptr.To(renewDeadline),
		RetryPeriod:            ptr.To(retryPeriod),
		// The process exits right after the manager stops: hand the lease
		// over at once instead of letting it expire.
		LeaderElectionReleaseOnCancel: true,
	}
	if o.leaderElect {
		id, err := leaderIdentity(o.podName)
		if err != nil {
			return err
		}
		if mopts.LeaderElectionResourceLockInterface, err = leaderLock(cfg, sch, o.namespace, id); err != nil {
			return err
		}
		log.Info("leader election", "lease", o.namespace+"/"+leaseName, "identity", id)
	}
	mgr, err := manager.New(cfg, mopts)
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	// herald_build_info on the metrics every replica serves (a standby
	// too: its version matters during a rollout).
	if err := serving.RegisterBuildInfo(crmetrics.Registry); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}

	if o.webhookMode != webhookDisabled {
		if err := webhook.Setup(mgr, webhook.Options{
			Namespace:         o.namespace,
			Port:              o.webhookPort,
			CertDir:           o.certDir,
			CertRotation:      !o.disableCertRot,
			ServiceName:       o.certService,
			SecretName:        o.webhookSecret,
			WebhookConfigName: o.webhookConfig,
			ConversionCRDs:    []string{"bgppeers.metallb.io"},
			TLSOpts:           tlsOpts,
			Logger:            log.With(logging.KeySubsystem, "webhook"),
		}); err != nil {
			return fmt.Errorf("webhooks: %w", err)
		}
	}
	var rec *eventrec.Recorder // nil: no events (webhook only)
	if o.webhookMode != webhookOnly {
		if rec, err = eventrec.For(mgr, eventrec.Controller, log.With(logging.KeySubsystem, "events")); err != nil {
			return err
		}
		if err := addAllocation(ctx, mgr, o, rec, log); err != nil {
			return err
		}
	}
	err = mgr.Start(ctx)
	// After every runnable: what they emitted while stopping is written
	// too, within eventStopTimeout.
	stopCtx, cancel := context.WithTimeout(context.Background(), eventStopTimeout)
	rec.Stop(stopCtx)
	cancel()
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	return nil
}

// eventStopTimeout bounds the writing of the events still queued at
// shutdown, within the controller Deployment's terminationGracePeriodSeconds
// (10 s in manifests/base/controller.yaml and the chart); what is left is
// counted in herald_events_dropped_total{reason="stopped"}.
const eventStopTimeout = 3 * time.Second

// addAllocation adds the allocation loop (Service IPs and pool counters) and
// the memberlist Secret keeper.
func addAllocation(ctx context.Context, mgr manager.Manager, o *options, rec *eventrec.Recorder, log *slog.Logger) error {
	// Uncached: the Reporter creates the ConfigurationState and reads it
	// back at once, before any cache could have seen it.
	uncached, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), FieldOwner: fieldmanager.Controller})
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	reporter := &configload.Reporter{
		Client: uncached, Namespace: o.namespace, Name: "controller",
		Labels: map[string]string{"metallb.io/component-type": "controller"},
	}
	if o.podName != "" {
		owner, err := configload.PodOwner(ctx, mgr.GetAPIReader(), o.namespace, o.podName)
		if err != nil {
			log.Warn("ConfigurationState will have no owner", "pod", o.podName, "error", err)
		}
		reporter.Owner = owner
	}
	ctl, err := allocation.New(allocation.Options{
		Client:    mgr.GetClient(),
		Cache:     mgr.GetCache(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  rec,
		// The binary names the parts (libraries add no identity keys):
		// Service IPs, and the pool counters.
		Log:           log.With(logging.KeySubsystem, "serviceip"),
		PoolStatusLog: log.With(logging.KeySubsystem, "poolstatus"),
		Namespace:     o.namespace,
		LBClass:       o.lbClass,
		Workers:       o.workers,
		Reporter:      reporter,
		// Registered when this replica starts leading (a standby has no
		// configuration loop).
		ConfigMetrics: configload.NewUnregisteredMetrics(), ConfigMetricsRegisterer: crmetrics.Registry,
		Registerer: crmetrics.Registry,
	})
	if err != nil {
		return err
	}
	if err := mgr.Add(ctl); err != nil {
		return err
	}
	// BGPSessionStates of nodes whose speaker is gone for good; Pods and
	// BGPSessionStates of the namespace are in the cache.
	if err := sessiongc.Setup(mgr, sessiongc.Options{
		Namespace: o.namespace, SpeakerSelector: o.speakerSelector, Grace: o.speakerGrace,
		Log: log.With(logging.KeySubsystem, "sessiongc"),
	}); err != nil {
		return fmt.Errorf("bgpsessionstate gc: %w", err)
	}
	// Kept (re-created when deleted) on every replica; Secrets of the
	// namespace are in the cache (allocation.CacheOptions).
	return mlsecret.Setup(mgr, mlsecret.Options{
		Client: uncached, Namespace: o.namespace, Name: o.mlSecretName, Deployment: o.deployment,
		Recorder: rec, Log: log.With(logging.KeySubsystem, "mlsecret"),
	})
}

// Command speaker is Herald's per-node daemon (a DaemonSet on the host
// network with NET_RAW): it announces the Services' load balancer IPs from
// this node in layer 2 (ARP/NDP) and over BGP, as MetalLB's speaker does.
//
// main only wires packages together: flags -> logger -> memberlist
// (internal/members), layer 2 announcer (internal/layer2), BGP speaker
// (internal/bgp/gobgp) -> controller-runtime manager with the reconcile loop
// (internal/k8s/speaker). Outside a cluster, point it at an API server with
// --kubeconfig.
//
// Shutdown on SIGTERM/SIGINT (run.go, within 4 s): close the BGP sessions at
// once (Cease NOTIFICATION, so routers withdraw the routes) and, in
// parallel, leave memberlist (the other speakers elect a successor at
// once), stop reconciling, then stop answering ARP/NDP.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/herald-lb/herald/internal/announce"
	"github.com/herald-lb/herald/internal/bgp"
	"github.com/herald-lb/herald/internal/bgp/gobgp"
	"github.com/herald-lb/herald/internal/k8s/apiretry"
	"github.com/herald-lb/herald/internal/k8s/eventrec"
	"github.com/herald-lb/herald/internal/k8s/fieldmanager"
	"github.com/herald-lb/herald/internal/k8s/scheme"
	"github.com/herald-lb/herald/internal/k8s/serving"
	"github.com/herald-lb/herald/internal/k8s/speaker"
	"github.com/herald-lb/herald/internal/layer2"
	"github.com/herald-lb/herald/internal/logging"
	"github.com/herald-lb/herald/internal/members"
	"github.com/herald-lb/herald/internal/version"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "speaker:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	var o options
	fs := flag.NewFlagSet("speaker", flag.ContinueOnError)
	o.register(fs, os.Getenv)
	ctrlconfig.RegisterFlags(fs) // --kubeconfig
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if o.version {
		fmt.Print(version.Line("speaker"))
		return nil
	}
	if err := o.complete(os.ReadFile); err != nil {
		return err
	}
	log, level, err := logging.NewLeveled(os.Stdout, o.logLevel, "speaker", slog.String(logging.KeyNode, o.nodeName))
	if err != nil {
		return err
	}
	log.Info("starting", "version", version.String(), "namespace", o.namespace,
		"layer2", o.enableL2, "bgp", o.enableBGP, "memberlist", o.memberlistEnabled())
	reg := ctrlmetrics.Registry
	if err := serving.RegisterBuildInfo(reg); err != nil {
		return err
	}

	sch, err := scheme.New()
	if err != nil {
		return err
	}

	sopts := speaker.Options{
		NodeName: o.nodeName, Namespace: o.namespace, PodName: o.podName,
		Logger: log, Registerer: reg,
		Announce:        o.announceOptions(),
		HandoverTimeout: o.handoverTimeout(),
		// --l2-election=balanced.
		BalancedL2: o.balancedL2(),
	}
	// spk is set before runAll starts memberlist and the announcer, whose
	// callbacks (releases received, conflicts, interface changes) call it.
	var spk *speaker.Controller

	// Memberlist.
	var ml *members.List
	var podSelector labels.Selector
	if o.memberlistEnabled() {
		bind, err := netip.ParseAddr(o.mlBindAddr)
		if err != nil {
			return fmt.Errorf("--ml-bindaddr %q: %w", o.mlBindAddr, err)
		}
		if podSelector, err = labels.Parse(o.mlLabels); err != nil {
			return fmt.Errorf("--ml-labels %q: %w", o.mlLabels, err)
		}
		secret, err := o.memberlistSecret(os.ReadFile)
		if err != nil {
			return err
		}
		previous, err := o.memberlistPreviousSecret(os.ReadFile)
		if err != nil {
			return err
		}
		ml, err = members.New(members.Config{
			NodeName: o.nodeName, BindAddr: bind, BindPort: o.mlBindPort,
			Secret: secret, SecretFile: o.memberlistSecretFile(), PreviousSecret: previous,
			Timings: o.mlTimings.Timings(), Registerer: reg,
			KeyDerivation: members.KeyDerivation(o.mlKeyDerivation),
			// Layer 2 hand-over: another speaker stopped answering these.
			OnReleased: func(node string, ips []netip.Addr) { spk.L2Released(node, ips) },
			// The layer 2 announcer below sends a release whenever it stops
			// answering addresses: say so, so that takers wait for it.
			SendsReleases: o.enableL2,
		}, log.With(logging.KeySubsystem, "memberlist"))
		if err != nil {
			return err
		}
		if members.KeyDerivation(o.mlKeyDerivation) == members.KeyDerivationMetalLB {
			log.Warn("memberlist key derivation is MetalLB's (--ml-key-derivation=metallb): its key is weak; for the migration window only, switch back to herald once no MetalLB speaker is left")
		}
		sopts.Members, sopts.MemberSelector, sopts.MemberPort = ml, podSelector, o.mlBindPort
	} else {
		log.Info("memberlist disabled (needs --ml-bindaddr and --ml-labels): liveness from Node conditions")
	}

	// Layer 2.
	var l2 *layer2.Announcer
	if o.enableL2 {
		exclude, err := excludeL2(o.excludeL2Config, os.ReadFile)
		if err != nil {
			return err
		}
		l2, err = layer2.New(log.With(logging.KeySubsystem, "layer2"), reg, layer2.Options{
			GratuitousCount: o.gratuitousCount, GratuitousInterval: o.gratuitousInterval, ExcludeInterfaces: exclude,
			OnConflict: func(ip netip.Addr, mac net.HardwareAddr, iface string) { spk.L2Conflict(ip, mac, iface) },
			// Decisions check the elected node's interfaces (noMatchingInterface).
			OnInterfaces: func(*announce.NodeInterfaces) { spk.L2InterfacesChanged() },
			// Layer 2 hand-over: tell the takers (none without memberlist).
			OnReleased: func(ips []netip.Addr) {
				if ml != nil {
					ml.Released(ips)
				}
			},
		})
		if err != nil {
			return fmt.Errorf("layer 2 announcer: %w", err)
		}
		sopts.L2 = l2
		// Layer 2 hand-over from a speaker that sends no release (MetalLB):
		// probe the address until nobody else answers it.
		sopts.L2Probe = func(ctx context.Context, ip netip.Addr, ifaces []string) (int, string, error) {
			r, err := l2.Probe(ctx, ip, ifaces)
			mac := ""
			if r.AnsweredBy != nil {
				mac = r.AnsweredBy.String()
			}
			return r.Answers, mac, err
		}
	}

	// BGP.
	var bgpSpeaker *gobgp.Speaker
	if o.enableBGP {
		states := bgp.NewStateChanges(0)
		if o.bgpMaxReceivedPrefixes > math.MaxUint32 {
			return fmt.Errorf("--bgp-max-received-prefixes %d: must be at most %d", o.bgpMaxReceivedPrefixes, uint32(math.MaxUint32))
		}
		bgpSpeaker, err = gobgp.New(gobgp.Options{
			Logger: log.With(logging.KeySubsystem, "bgp"), Registerer: reg,
			MaxReceivedPrefixes: uint32(o.bgpMaxReceivedPrefixes),
			OnPeerState:         states.Put, // never blocks gobgp; keeps each session's latest state
		})
		if err != nil {
			return fmt.Errorf("BGP speaker: %w", err)
		}
		sopts.BGP, sopts.PeerStates = bgpSpeaker, states

		// BFD (RFC 5880/5881/5883) for the peers naming a BFDProfile, in
		// the node's network namespace (the speaker runs with hostNetwork).
		// Closed after runAll, once the BGP sessions are closed: each peer
		// gets AdminDown (RFC 5880 §6.8.16).
		bfdS, err := newBFDSessions(log.With(logging.KeySubsystem, "bfd"), reg)
		if err != nil {
			return fmt.Errorf("BFD: %w", err)
		}
		defer func() {
			if err := bfdS.Close(); err != nil {
				log.Warn("closing BFD sessions", "error", err)
			}
		}()
		sopts.BFD, sopts.BFDChanges = bfdS, bfdS.changes
	}

	// Manager.
	restCfg, err := ctrlconfig.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	// Names the speaker in the API server's audit log, and in managedFields
	// for writes without their own field manager (internal/k8s/speaker sets it).
	restCfg.UserAgent = fieldmanager.Speaker + "/" + version.Version
	metricsOpts, err := o.serving.MetricsOptions()
	if err != nil {
		return err
	}
	// The log level changes at run time (a restart would move the layer 2
	// addresses being debugged): PUT /debug/loglevel, SIGUSR1/SIGUSR2.
	serving.AddHandler(&metricsOpts, logging.LevelPath, logging.LevelHandler(level, log))
	if o.pprof {
		serving.AddPprof(&metricsOpts)
	}
	sigCtx, stopLevelSignals := context.WithCancel(context.Background())
	defer stopLevelSignals()
	logging.HandleSignals(sigCtx, level, log)
	// Started during an API server outage (a rebooted node), wait for it
	// instead of exiting into the kubelet's growing CrashLoopBackOff.
	waitCtx, stopWait := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err = apiretry.WaitReachable(waitCtx, restCfg, o.serving.HealthProbeAddress(), log)
	stopWait()
	if err != nil {
		if waitCtx.Err() != nil {
			return nil // SIGTERM while waiting
		}
		return err
	}
	mgr, err := manager.New(restCfg, manager.Options{
		Scheme:                 sch,
		Metrics:                metricsOpts,
		HealthProbeBindAddress: o.serving.HealthProbeAddress(),
		Cache:                  speaker.CacheOptions(o.namespace, o.nodeName, podSelector),
		Client:                 client.Options{Cache: &client.CacheOptions{DisableFor: speaker.UncachedObjects()}},
	})
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	// speaker.Setup adds the readiness check "configuration" (ready once a
	// configuration snapshot is in force; see speaker.Controller.Ready).
	rec, err := eventrec.For(mgr, eventrec.Speaker, log.With(logging.KeySubsystem, "events"))
	if err != nil {
		return err
	}
	sopts.Recorder = rec
	if spk, err = speaker.Setup(mgr, sopts); err != nil {
		return err
	}

	return runAll(log, ml, l2, bgpSpeaker, func(ctx context.Context) error {
		err := mgr.Start(ctx)
		// After every runnable: the events they emitted are written
		// within eventStopTimeout, inside runAll's shutdown budget.
		stopCtx, cancel := context.WithTimeout(context.Background(), eventStopTimeout)
		defer cancel()
		rec.Stop(stopCtx)
		return err
	})
}

// eventStopTimeout bounds the writing of the events still queued when the
// manager has stopped (shutdownBudget leaves it room); what is left is
// counted in herald_events_dropped_total{reason="stopped"}.
const eventStopTimeout = 500 * time.Millisecond

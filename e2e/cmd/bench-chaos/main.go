// Command bench-chaos runs Herald's chaos scenarios (e2e/chaos) in full in
// one lab (`make bench-chaos`) and prints the table: per scenario, what was
// lost (target 0) and how long recovery took.
//
// Usage:
//
//	bench-chaos [--scenarios restarts,rollout,controller,ctlrollout,linkcut,cpuload,apiserver,mlkey,prefixes]
//	            [--restarts 20] [--rollout-rounds 3] [--rollout-down 2s] [--kills 20] [--burst 1000]
//	            [--ctl-rollouts 3] [--ctl-rollout-burst 1000]
//	            [--cut-trials 3] [--cut 60s] [--cut-observe 90s] [--load 60s] [--outage 60s]
//	            [--ml-rotations 3] [--ml-stagger 10s] [--ml-alone-after 10s] [--prefixes 200000]
//	            [--record docs/reliability.md]
//
// The scenarios and what they count are described in package e2e/chaos
// (and in the intro it writes above the table).
//
// With --record and every scenario the table replaces the "## Chaos
// results" section of that file (appended when missing), with the date and
// the machine. With a subset of --scenarios (`make bench-chaos
// CHAOS_ARGS=--scenarios=rollout,mlkey`) only their rows and notes in that
// section are replaced, the other scenarios' stay, and a paragraph above
// the table says which scenarios were re-run when (chaos.RecordScenarios);
// a scenario that did not complete keeps its old rows. The exit
// status is 0 when every scenario ran, whether or not its targets were met
// (the table says so); 1 when a scenario could not run. The lab's logs
// (state directory) are kept when a scenario failed or missed a target.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/herald-lb/herald/e2e/chaos"
	"github.com/herald-lb/herald/e2e/lab"
)

type options struct {
	scenarios []string
	nodes     int
	record    string
	binDir    string
	restarts  chaos.RestartOptions
	burst     chaos.BurstOptions
	linkCut   chaos.LinkCutOptions
	cpuLoad   chaos.CPULoadOptions
	outage    chaos.APIOutageOptions
	rollout   chaos.RolloutOptions
	ctlRoll   chaos.ControllerRolloutOptions
	mlKey     chaos.MLKeyOptions
	flood     chaos.PrefixFloodOptions
}

// scenarioNames in the order they run.
var scenarioNames = []string{"restarts", "rollout", "controller", "ctlrollout", "linkcut", "cpuload", "apiserver", "mlkey", "prefixes"}

// scenarioTitles are the scenarios' names in the table (chaos.Result.Scenario).
var scenarioTitles = map[string]string{
	"restarts": chaos.ScenarioRestarts, "rollout": chaos.ScenarioRollout, "controller": chaos.ScenarioBurst,
	"ctlrollout": chaos.ScenarioControllerRollout, "linkcut": chaos.ScenarioLinkCut, "cpuload": chaos.ScenarioCPULoad,
	"apiserver": chaos.ScenarioAPIOutage, "mlkey": chaos.ScenarioMLKey, "prefixes": chaos.ScenarioPrefixFlood,
}

// allScenarios reports whether scenarios names every scenario: the run
// then replaces the whole recorded table.
func allScenarios(scenarios []string) bool {
	for _, s := range scenarioNames {
		if !slices.Contains(scenarios, s) {
			return false
		}
	}
	return true
}

func main() {
	chaos.RunAnnouncerIfAsked() // the prefix flood's router, when started as it
	var o options
	scen := flag.String("scenarios", strings.Join(scenarioNames, ","), "comma-separated scenarios: "+strings.Join(scenarioNames, ", "))
	flag.IntVar(&o.nodes, "nodes", 3, "lab nodes")
	flag.StringVar(&o.record, "record", "", "Markdown file whose \""+chaos.SectionTitle+"\" section gets the table")
	flag.StringVar(&o.binDir, "bin-dir", "", "prebuilt controller and speaker (default: $"+lab.BinDirEnv+" or go build)")
	flag.IntVar(&o.restarts.Restarts, "restarts", 20, "speaker restarts (alternating TERM and KILL)")
	flag.IntVar(&o.restarts.Addresses, "restart-addresses", 12, "layer 2 addresses in the restart scenario")
	flag.IntVar(&o.burst.Kills, "kills", 20, "controller SIGKILLs during the burst")
	flag.IntVar(&o.burst.Services, "burst", 1000, "Services in the burst")
	flag.IntVar(&o.linkCut.Trials, "cut-trials", 3, "link cuts")
	flag.DurationVar(&o.linkCut.Cut, "cut", 60*time.Second, "how long the node's link stays cut")
	flag.DurationVar(&o.linkCut.Observe, "cut-observe", 90*time.Second, "how long the client probes after the link is back")
	flag.DurationVar(&o.cpuLoad.Load, "load", 60*time.Second, "how long every node runs busy loops")
	flag.DurationVar(&o.outage.Outage, "outage", 60*time.Second, "how long the API server stays stopped")
	flag.IntVar(&o.rollout.Rounds, "rollout-rounds", 3, "rolling updates of every speaker")
	flag.DurationVar(&o.rollout.Down, "rollout-down", 2*time.Second, "how long each speaker stays stopped during the rolling update")
	flag.IntVar(&o.ctlRoll.Rounds, "ctl-rollouts", 3, "controller rollout rounds (two overlapping rollouts each)")
	flag.IntVar(&o.ctlRoll.Services, "ctl-rollout-burst", 1000, "Services in the burst during the controller rollouts")
	flag.IntVar(&o.mlKey.Rotations, "ml-rotations", 3, "memberlist Secret deletions (each a key rotation)")
	flag.DurationVar(&o.mlKey.Stagger, "ml-stagger", 10*time.Second, "time between two nodes getting the new memberlist key")
	flag.DurationVar(&o.mlKey.AloneAfter, "ml-alone-after", 10*time.Second, "the speakers' --ml-alone-after; the speaker restarted mid-rotation is watched 5 s past it")
	flag.IntVar(&o.flood.Prefixes, "prefixes", 200_000, "IPv6 prefixes the flooding peer sends")
	flag.Parse()
	o.scenarios = strings.Split(*scen, ",")
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	crlog.SetLogger(logr.FromSlogHandler(log.Handler()))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench-chaos:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, o options) (err error) {
	for _, s := range o.scenarios {
		if !slices.Contains(scenarioNames, s) {
			return fmt.Errorf("unknown scenario %q (want %s)", s, strings.Join(scenarioNames, ", "))
		}
	}
	missed := false // a target not met: the logs are kept
	cfg := lab.Config{Prefix: lab.RandomPrefix(), Nodes: o.nodes}
	l, finish, err := lab.UpTemp(ctx, cfg, "bench-chaos-")
	if err != nil {
		return err
	}
	log.Info("lab up", "prefix", cfg.Prefix, "state", l.StateDir())
	defer func() {
		var kept string
		if kept, err = finish(err, missed); kept != "" {
			log.Info("logs kept", "dir", kept)
		}
	}()
	h, err := l.InstallHerald(ctx, lab.InstallOptions{BinDir: o.binDir})
	if err != nil {
		return err
	}
	e := &chaos.Env{Lab: l, Herald: h, Log: log}
	var results []chaos.Result
	var errs []error
	for _, s := range o.scenarios {
		log.Info("scenario", "name", s)
		var res chaos.Result
		var serr error
		switch s {
		case "restarts":
			res, serr = chaos.SpeakerRestarts(ctx, e, o.restarts)
		case "rollout":
			res, serr = chaos.Rollout(ctx, e, o.rollout)
		case "controller":
			res, serr = chaos.ControllerKills(ctx, e, o.burst)
		case "ctlrollout":
			res, serr = chaos.ControllerRollout(ctx, e, o.ctlRoll)
		case "mlkey":
			res, serr = chaos.MLKeyRotation(ctx, e, o.mlKey)
		case "prefixes":
			res, serr = chaos.PrefixFlood(ctx, e, o.flood)
		case "linkcut":
			res, serr = chaos.LinkCut(ctx, e, o.linkCut)
		case "cpuload":
			res, serr = chaos.CPULoad(ctx, e, o.cpuLoad)
		case "apiserver":
			res, serr = chaos.APIOutage(ctx, e, o.outage)
		}
		if res.Scenario == "" {
			// It failed before it named its result: its notes need the name.
			res.Scenario = scenarioTitles[s]
		}
		if serr != nil {
			log.Error("scenario failed", "name", s, "error", serr)
			errs = append(errs, fmt.Errorf("%s: %w", s, serr))
			res.Notes = append(res.Notes, "did not complete: "+serr.Error())
		}
		results = append(results, res)
		missed = missed || slices.ContainsFunc(res.Rows, func(r chaos.Row) bool { return !r.Met })
	}
	table := chaos.Table(results, o.nodes)
	fmt.Print(table)
	switch {
	case o.record == "":
	case allScenarios(o.scenarios):
		if err := chaos.RecordSection(o.record, chaos.Intro, table); err != nil {
			return err
		}
	default:
		stale, err := chaos.RecordScenarios(o.record, chaos.Intro, table)
		if err != nil {
			return err
		}
		if stale {
			log.Warn("the text above the table in "+o.record+" is not the current chaos.Intro; a run of every scenario rewrites it", "file", o.record)
		}
	}
	return errors.Join(errs...)
}

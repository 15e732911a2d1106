// Command bench-migration runs the migration test with the real MetalLB in
// full (`make bench-migration`; e2e TestMigration is the short form): MetalLB
// v0.16.2 installed in a lab from its own manifests, its own speaker rollout
// for comparison, then --rounds times the in-place node-by-node migration to
// Herald and the rollback to MetalLB, and prints the table (package
// e2e/migration says what each row counts).
//
// Usage:
//
//	bench-migration [--rounds 3] [--observe 3s] [--interval 100ms] [--helm] [--record docs/migrating-from-metallb.md]
//
// --helm installs Herald with its chart and
// manifests/metallb-migration/helm-values.yaml instead of the kustomize
// overlay (the guide's "Node by node with Helm"). With --record the table,
// with the date and the machine (date, uname -a, nproc), replaces the "##
// Measured" section of that file ("## Measured with Helm" with --helm;
// appended when missing). The exit status is 0 when the run completed, whether or not a
// target was met (the table says so), 1 when it could not run.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/herald-lb/herald/e2e/lab"
	"github.com/herald-lb/herald/e2e/migration"
)

// SectionTitle is the heading of the section --record owns;
// HelmSectionTitle with --helm.
const (
	SectionTitle     = "## Measured"
	HelmSectionTitle = "## Measured with Helm"
)

func main() {
	var o migration.Options
	flag.IntVar(&o.Rounds, "rounds", 3, "migrate-and-roll-back rounds")
	flag.DurationVar(&o.Observe, "observe", 3*time.Second, "polling after each node's swap, once converged")
	flag.DurationVar(&o.Interval, "interval", 100*time.Millisecond, "pause between two requests of one address")
	flag.BoolVar(&o.Helm, "helm", false, "install Herald with its chart and "+migration.HelmValues+" instead of the overlay "+migration.Manifests)
	keepLogs := flag.Bool("keep-logs", false, "keep the lab's state directory (the speakers' and controllers' logs) after a successful run too, and print its path")
	record := flag.String("record", "", "Markdown file whose \""+SectionTitle+"\" section (\""+HelmSectionTitle+"\" with --helm) gets the table")
	flag.Parse()
	crlog.SetLogger(logr.Discard())
	o.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(o, *record, *keepLogs); err != nil {
		fmt.Fprintln(os.Stderr, "bench-migration:", err)
		os.Exit(1)
	}
}

func run(o migration.Options, record string, keepLogs bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	cfg := lab.Config{Nodes: 3, Prefix: lab.RandomPrefix()}
	l, finish, err := lab.UpTemp(ctx, cfg, "bench-migration-")
	if err != nil {
		return err
	}
	res, err := migration.Run(ctx, l, o)
	kept, err := finish(err, keepLogs)
	if err != nil {
		if kept != "" {
			return fmt.Errorf("%w (lab logs kept in %s)", err, kept)
		}
		return err
	}
	if kept != "" {
		fmt.Fprintln(os.Stderr, "bench-migration: lab logs kept in", kept)
	}
	out := machine() + "\n\n" + fmt.Sprintf("Full form: %d rounds, %s observation after each node, requests every %s per address.\n\n",
		o.Rounds, o.Observe, o.Interval) + res.Table()
	fmt.Println(out)
	if record != "" {
		intro := "Figures of `make bench-migration` (e2e/cmd/bench-migration, package e2e/migration), MetalLB v0.16.2 in the lab, the procedure of [Node by node](#node-by-node-migration-mode)."
		title := SectionTitle
		if o.Helm {
			intro = "Figures of `make bench-migration-helm` (e2e/cmd/bench-migration --helm, package e2e/migration), MetalLB v0.16.2 in the lab, the procedure of [Node by node with Helm](#node-by-node-with-helm): Herald installed by its chart with `manifests/metallb-migration/helm-values.yaml`."
			title = HelmSectionTitle
		}
		return lab.ReplaceSection(record, title, "# Migrating from MetalLB", intro+"\n\n"+out)
	}
	return nil
}

// machine is the date and machine line: `date -u`, `uname -a`, `nproc`.
func machine() string {
	sh := func(args ...string) string {
		b, err := exec.Command(args[0], args[1:]...).Output()
		if err != nil {
			return "(" + err.Error() + ")"
		}
		return strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("Measured %s on `%s`, %s CPUs (nproc; shared with other work, noisy).",
		sh("date", "-u", "+%Y-%m-%d %H:%M UTC"), sh("uname", "-a"), sh("nproc"))
}

// Command herald-lab brings Herald's lab up and down (`make lab`,
// `make lab-down`) and hosts the lab's own helper processes.
//
// Usage:
//
//	herald-lab up [--nodes 3] [--speaker-args "--ml-probe-interval=100ms ..."] [--herald=true] [--install kubectl|helm] [--bin-dir DIR]
//	                             build the lab (cleaning leftovers first), install Herald from
//	                             its manifests (kubectl apply) or its chart (helm install, release
//	                             "herald") with the samples and demo Services, print a summary
//	herald-lab down              remove everything the lab made, also after a crash
//	herald-lab status            print the summary (with the demo Services) and any problem; exit 1 if unhealthy
//	herald-lab diagnose          what the client, FRR and the speakers see (neighbours, routes, announcements, logs)
//	herald-lab kubectl ARGS...   kubectl against the lab's API server (inside its namespace)
//	herald-lab restart-speaker [--kill] NODE
//	                             restart NODE's speaker as the kubelet restarts a container: SIGTERM
//	                             (SIGKILL with --kill), the same binary and flags again, the Pod's
//	                             container status Terminated, then Running with restartCount+1
//	herald-lab stop-speaker [--kill] NODE    the first half: the speaker stays down
//	herald-lab start-speaker NODE            the second half: start a stopped speaker again
//	herald-lab backend ...       lab scaffolding: the HTTP backend of one node
//	herald-lab proxy ...         loopback proxy from the root namespace to the API server
//
// Common flags: --state-dir (default $HERALD_LAB_DIR, else <repo>/.lab) and
// --prefix (default "herald-lab"). kubectl takes no flags of its own (all
// go to kubectl): for a lab with another state directory set
// HERALD_LAB_DIR.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/herald-lb/herald/e2e/lab"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	crlog.SetLogger(logr.FromSlogHandler(log.Handler()))
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := dispatch(ctx, log, os.Args[1], os.Args[2:]); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			os.Exit(ee.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "herald-lab:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: herald-lab up|down|status|diagnose|kubectl|restart-speaker|stop-speaker|start-speaker|backend|proxy [flags]")
}

// parseNode parses args, flags before or after the one positional
// argument, the node's name.
func parseNode(fs *flag.FlagSet, args []string) (string, error) {
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	if fs.NArg() == 0 {
		return "", fmt.Errorf("%s: want a node name (n1, n2, ...)", fs.Name())
	}
	node := fs.Arg(0)
	if err := fs.Parse(fs.Args()[1:]); err != nil {
		return "", err
	}
	if fs.NArg() > 0 {
		return "", fmt.Errorf("%s: want one node name, got %q and %q", fs.Name(), node, strings.Join(fs.Args(), " "))
	}
	return node, nil
}

func defaultStateDir() string {
	if d := os.Getenv("HERALD_LAB_DIR"); d != "" {
		return d
	}
	// The repository root is where go.mod is, above the working directory.
	d, _ := os.Getwd()
	for p := d; ; p = filepath.Dir(p) {
		if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
			return filepath.Join(p, ".lab")
		}
		if filepath.Dir(p) == p {
			return filepath.Join(d, ".lab")
		}
	}
}

// printRelease says which Helm release Herald is, when it was installed
// with helm.
func printRelease(h *lab.Herald) {
	if r := h.Release(); r != "" {
		fmt.Printf("\nHerald: Helm release %q in namespace %s (KUBECONFIG=%s bin/helm list -n %s)\n",
			r, lab.HeraldNamespace, h.Lab().HostKubeconfig(), lab.HeraldNamespace)
	}
}

func dispatch(ctx context.Context, log *slog.Logger, cmd string, args []string) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	stateDir := fs.String("state-dir", defaultStateDir(), "lab state directory")
	prefix := fs.String("prefix", lab.PersistentPrefix, "network namespace prefix")
	switch cmd {
	case "up":
		nodes := fs.Int("nodes", 3, fmt.Sprintf("number of nodes, 1-%d (speakers start 16 at a time)", lab.MaxNodes))
		speakerArgs := fs.String("speaker-args", "", "space-separated args appended to the speaker DaemonSet's, e.g. memberlist timings \"--ml-probe-interval=100ms\"")
		herald := fs.Bool("herald", true, "install and run Herald, its samples and demo Services")
		binDir := fs.String("bin-dir", "", "prebuilt controller, speaker (and helm) binaries (default: $"+lab.BinDirEnv+", else go build them)")
		install := fs.String("install", string(lab.InstallKubectl), "how Herald gets into the API server: kubectl (apply manifests/base) or helm (install charts/herald)")
		release := fs.String("release", "", "install from this release directory (make release) alone: its herald.yaml (--install kubectl) or packaged chart (--install helm) and its binaries, instead of the checkout's")
		if err := fs.Parse(args); err != nil {
			return err
		}
		method := lab.InstallMethod(*install)
		if method != lab.InstallKubectl && method != lab.InstallHelm {
			return fmt.Errorf("--install %q: want %s or %s", *install, lab.InstallKubectl, lab.InstallHelm)
		}
		opts := lab.InstallOptions{Method: method, BinDir: *binDir}
		if *release != "" {
			dir, err := filepath.Abs(*release)
			if err != nil {
				return err
			}
			if opts, err = lab.ReleaseOptions(dir, method, filepath.Join(*stateDir, "release-bin"), *binDir); err != nil {
				return err
			}
		}
		opts.Samples = lab.DemoSamples
		opts.SpeakerArgs = strings.Fields(*speakerArgs)
		opts.StartConcurrency = 16
		start := time.Now()
		l, err := lab.Up(ctx, lab.Config{Prefix: *prefix, Nodes: *nodes, StateDir: *stateDir, LoopbackProxy: true})
		if err != nil {
			return err
		}
		// Lab scaffolding (plays the kubelets): the nodes register themselves.
		if err := l.RegisterNodes(ctx, nil); err != nil {
			return errors.Join(err, l.Down())
		}
		log.Info("lab up", "prefix", l.Prefix(), "took", time.Since(start).Round(time.Millisecond))
		if !*herald {
			fmt.Print(l.Summary())
			return nil
		}
		h, err := l.InstallHerald(ctx, opts)
		if err != nil {
			return fmt.Errorf("install herald (lab stays up for inspection, logs in %s; make lab-down removes it): %w", l.StateDir(), err)
		}
		log.Info("herald running", "install", method, "took", time.Since(start).Round(time.Millisecond))
		demos, err := h.CreateDemoServices(ctx)
		if err != nil {
			return fmt.Errorf("demo services (lab stays up; make lab-down removes it): %w", err)
		}
		fmt.Print(l.Summary())
		printRelease(h)
		fmt.Println()
		summary, failed := h.ServicesSummary(ctx, demos, 20*time.Second)
		fmt.Print(summary)
		if failed > 0 {
			return fmt.Errorf("%d demo checks failed (lab stays up; hack/lab.sh diagnose shows more, make lab-down removes it)", failed)
		}
		log.Info("lab ready", "took", time.Since(start).Round(time.Millisecond))
		return nil
	case "down":
		if err := fs.Parse(args); err != nil {
			return err
		}
		return lab.Cleanup(*stateDir, *prefix)
	case "status":
		if err := fs.Parse(args); err != nil {
			return err
		}
		l, err := lab.Open(*stateDir)
		if err != nil {
			return fmt.Errorf("no lab recorded in %s (run `make lab`): %w", *stateDir, err)
		}
		fmt.Print(l.Summary())
		probs := l.Check(ctx)
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		h, err := l.OpenHerald(octx)
		cancel()
		running := 0
		if err == nil {
			// A speaker stopped with stop-speaker (or crashed) is a
			// problem to report, not a reason to skip the Services: the
			// others answer for its addresses meanwhile.
			for _, n := range h.SpeakerNodes() {
				if p := h.Speaker(n); p != nil && p.Alive() {
					running++
				} else {
					probs = append(probs, fmt.Sprintf("speaker on %s not running (hack/lab.sh start-speaker %s starts it)", n, n))
				}
			}
		}
		if running > 0 {
			printRelease(h)
			summary, failed := h.ServicesSummary(ctx, lab.DemoServices(), 5*time.Second)
			fmt.Println()
			fmt.Print(summary)
			if failed > 0 {
				probs = append(probs, fmt.Sprintf("%d demo Service checks failed (see above)", failed))
			}
		}
		if len(probs) > 0 {
			fmt.Println("\nProblems:")
			for _, p := range probs {
				fmt.Println("  " + p)
			}
			return errors.New("lab unhealthy")
		}
		fmt.Println("\nAll parts answer.")
		return nil
	case "diagnose":
		if err := fs.Parse(args); err != nil {
			return err
		}
		h, err := openHerald(ctx, *stateDir)
		if err != nil {
			return err
		}
		fmt.Print(h.Diagnose(ctx))
		return nil
	case "restart-speaker", "stop-speaker", "start-speaker":
		kill := false
		if cmd != "start-speaker" {
			fs.BoolVar(&kill, "kill", false, "SIGKILL (a crash) instead of SIGTERM with the Pod's grace period")
		}
		node, err := parseNode(fs, args)
		if err != nil {
			return err
		}
		h, err := openHerald(ctx, *stateDir)
		if err != nil {
			return err
		}
		if !slices.Contains(h.SpeakerNodes(), node) {
			return fmt.Errorf("%s: no speaker Pod on node %q (speakers on %s)", cmd, node, strings.Join(h.SpeakerNodes(), ", "))
		}
		start := time.Now()
		switch cmd {
		case "restart-speaker":
			err = h.RestartSpeakerContainer(ctx, node, kill)
		case "stop-speaker":
			err = h.StopSpeakerContainer(ctx, node, kill)
		default:
			err = h.StartSpeakerContainer(ctx, node)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", cmd, node, err)
		}
		msg := []any{"node", node, "took", time.Since(start).Round(time.Millisecond)}
		if p := h.Speaker(node); p != nil {
			msg = append(msg, "pid", p.PID, "log", p.Log)
		}
		log.Info(cmd, msg...)
		return nil
	case "kubectl":
		// No flags of our own: everything goes to kubectl.
		l, err := lab.Open(*stateDir)
		if err != nil {
			return fmt.Errorf("no lab recorded in %s (run `make lab`): %w", *stateDir, err)
		}
		k, err := lab.KubectlPath()
		if err != nil {
			return err
		}
		c := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", l.ControlNamespace(),
			k, "--kubeconfig", l.LabKubeconfig()}, args...)...)
		c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
		return c.Run()
	case "backend":
		node := fs.String("node", "", "node name to answer with")
		listen := fs.String("listen", ":80", "listen address")
		if err := fs.Parse(args); err != nil {
			return err
		}
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			return err
		}
		log.Info("lab backend", "node", *node, "listen", ln.Addr().String())
		return lab.ServeBackend(ctx, ln, *node)
	case "proxy":
		ns := fs.String("netns", "", "network namespace to dial the target in")
		listen := fs.String("listen", "127.0.0.1:0", "listen address in this namespace")
		target := fs.String("target", "", "address to forward to")
		portFile := fs.String("port-file", "", "file to write the listening port to")
		if err := fs.Parse(args); err != nil {
			return err
		}
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			return err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		if *portFile != "" {
			if err := os.WriteFile(*portFile, []byte(strconv.Itoa(port)+"\n"), 0o644); err != nil {
				return err
			}
		}
		log.Info("lab proxy", "listen", ln.Addr().String(), "netns", *ns, "target", *target)
		return lab.RunProxy(ctx, ln, *ns, *target)
	default:
		usage()
		return fmt.Errorf("unknown command %q", cmd)
	}
}

// openHerald opens the lab recorded in stateDir and the Herald installed in
// it, for the subcommands that act on a running lab.
func openHerald(ctx context.Context, stateDir string) (*lab.Herald, error) {
	l, err := lab.Open(stateDir)
	if err != nil {
		return nil, fmt.Errorf("no lab recorded in %s (run `make lab`): %w", stateDir, err)
	}
	return l.OpenHerald(ctx)
}

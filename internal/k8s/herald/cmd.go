package herald

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/herald-lb/herald/internal/explain"
	"github.com/herald-lb/herald/internal/k8s/scheme"
	"github.com/herald-lb/herald/internal/version"
)

// Exit statuses of Main.
const (
	ExitOK       = 0
	ExitProblems = 1
	ExitError    = 2
)

// DefaultHeraldNamespace is the namespace of manifests/herald.yaml and the
// chart's default.
const DefaultHeraldNamespace = "herald-system"

// errProblems: the report lists problems (exit status 1).
var errProblems = errors.New("problems found")

// options are the flags shared by every subcommand.
type options struct {
	kubeconfig string
	overrides  clientcmd.ConfigOverrides
	heraldNS   string
	output     string
}

// Main runs kubectl herald with args (without the program name) and
// returns the exit status (ExitOK, ExitProblems, ExitError).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := &options{}
	root := &cobra.Command{
		Use:   "kubectl-herald",
		Short: "Explain Herald's decisions from the objects in the API server (read-only)",
		Long: `kubectl herald recomputes what Herald's controller and speakers decide, with their own code, from the
objects in the API server, and compares it with what they report.

Exit status: 0 nothing wrong, 1 problems listed (pending Service, unannounced address,
disagreement, invalid configuration, session not established), 2 usage or API error.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// --version: "kubectl-herald <version> (<commit>, <go version>)",
		// stamped by the build like the controller's and speaker's.
		Version: version.String(),
	}
	root.SetVersionTemplate("kubectl-herald {{.Version}}\n")
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetContext(ctx)
	fs := root.PersistentFlags()
	fs.StringVar(&o.kubeconfig, clientcmd.RecommendedConfigPathFlag, "", "Path to the kubeconfig file (default: $KUBECONFIG or ~/.kube/config).")
	clientcmd.BindOverrideFlags(&o.overrides, fs, clientcmd.RecommendedConfigOverrideFlags(""))
	fs.StringVar(&o.heraldNS, "herald-namespace", DefaultHeraldNamespace, "Namespace Herald runs in (configuration, status objects, speaker Pods).")
	fs.StringVarP(&o.output, "output", "o", "", "Output format: empty for tables, json or yaml.")

	root.AddCommand(&cobra.Command{
		Use:   "why svc/NAME",
		Short: "Explain a Service: its allocation, who announces each address and why, and what the speakers report",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, ok := serviceName(args[0])
			if !ok {
				return usageError(fmt.Errorf("want svc/NAME (or service/NAME, NAME), got %q", args[0]))
			}
			ns, cl, err := o.read(cmd.Context(), true)
			if err != nil {
				return err
			}
			r, err := explain.Why(cl, ns, name)
			if err != nil {
				return err
			}
			return o.print(stdout, r, r.Problems, func(w io.Writer) { renderWhy(w, r) })
		},
	})
	root.AddCommand(&cobra.Command{
		Use:   "pools",
		Short: "Per pool and family: size, used, free, advertisements, who may use it; pending Services",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, cl, err := o.read(cmd.Context(), false)
			if err != nil {
				return err
			}
			r := explain.Pools(cl)
			return o.print(stdout, r, r.Problems, func(w io.Writer) { renderPools(w, r) })
		},
	})
	root.AddCommand(&cobra.Command{
		Use:   "peers",
		Short: "Per node and BGP peer: the sessions that should exist and their state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, cl, err := o.read(cmd.Context(), false)
			if err != nil {
				return err
			}
			var src explain.SessionSource = explain.NewEventSessions(cl.Events, cl.Namespace)
			if cl.SessionStates != nil {
				src = explain.NewObjectSessions(cl.SessionStates, src)
			}
			r := explain.Peers(cl, src)
			return o.print(stdout, r, r.Problems, func(w io.Writer) { renderPeers(w, r) })
		},
	})
	root.AddCommand(&cobra.Command{
		Use:   "config",
		Short: "The ConfigurationState of every component and its errors",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, cl, err := o.read(cmd.Context(), false)
			if err != nil {
				return err
			}
			r := explain.Config(cl)
			return o.print(stdout, r, r.Problems, func(w io.Writer) { renderConfig(w, r) })
		},
	})
	err := root.Execute()
	var ue *usageErr
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, errProblems):
		return ExitProblems
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, "error:", err)
		return ExitError
	}
	fmt.Fprintln(stderr, "error:", err)
	if strings.Contains(err.Error(), "unknown command") || strings.Contains(err.Error(), "flag") || strings.Contains(err.Error(), "arg") {
		fmt.Fprintln(stderr, "see kubectl herald --help")
	}
	return ExitError
}

type usageErr struct{ error }

func usageError(err error) error { return &usageErr{err} }

// serviceName accepts svc/NAME, service/NAME, services/NAME and NAME.
func serviceName(arg string) (string, bool) {
	kind, name, found := strings.Cut(arg, "/")
	if !found {
		return arg, arg != ""
	}
	switch kind {
	case "svc", "service", "services":
		return name, name != ""
	}
	return "", false
}

// read loads the kubeconfig and reads the cluster; it returns the
// namespace of -n (else the context's, else "default").
func (o *options) read(ctx context.Context, withEvents bool) (string, *explain.Cluster, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &o.overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return "", nil, fmt.Errorf("kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return "", nil, fmt.Errorf("kubeconfig: %w", err)
	}
	sch, err := scheme.New()
	if err != nil {
		return "", nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: sch})
	if err != nil {
		return "", nil, fmt.Errorf("client: %w", err)
	}
	eventNS := ""
	if withEvents {
		eventNS = ns
	}
	cl, err := Read(ctx, c, o.heraldNS, eventNS)
	if err != nil {
		return "", nil, err
	}
	return ns, cl, nil
}

// print writes the report as a table or in o.output's format, and returns
// errProblems when problems is not empty.
func (o *options) print(w io.Writer, report any, problems []string, table func(io.Writer)) error {
	switch o.output {
	case "":
		table(w)
	case "json":
		b, err := json.MarshalIndent(report, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintln(w, string(b))
	case "yaml":
		b, err := yaml.Marshal(report)
		if err != nil {
			return err
		}
		fmt.Fprint(w, string(b))
	default:
		return usageError(fmt.Errorf("--output %q: want json or yaml (or nothing for tables)", o.output))
	}
	if len(problems) > 0 {
		return errProblems
	}
	return nil
}

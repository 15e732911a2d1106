package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/herald-lb/herald/internal/k8s/serving"
	"github.com/herald-lb/herald/internal/k8s/sessiongc"
	"github.com/herald-lb/herald/internal/k8s/webhook"
)

// Webhook modes (--webhook-mode), as MetalLB's.
const (
	webhookEnabled  = "enabled"     // webhooks and allocation
	webhookDisabled = "disabled"    // allocation only
	webhookOnly     = "onlywebhook" // webhooks only, no allocation
)

// options are the controller's command line, after environment fallbacks.
type options struct {
	namespace      string
	mlSecretName   string
	deployment     string
	podName        string
	lbClass        string
	logLevel       string
	leaderElect    bool
	apiQPS         float64
	apiBurst       int
	workers        int
	webhookMode    string
	webhookPort    int
	certDir        string
	disableCertRot bool
	certService    string
	webhookSecret  string
	webhookConfig  string
	serving        serving.Flags
	// pprofAddress is --pprof-address: where net/http/pprof listens
	// ("" = off).
	pprofAddress string
	// speakerLabels is --speaker-labels: the label selector of the
	// speaker Pods ("" = do not delete BGPSessionStates of nodes without
	// a speaker); speakerSelector is it parsed.
	speakerLabels   string
	speakerSelector labels.Selector
	// speakerGrace is --speaker-gone-grace.
	speakerGrace time.Duration
	// version is --version: print internal/version.Line and exit 0.
	version bool
}

// register defines the flags on fs. Flags with a METALLB_* variable take it
// as their default, so an explicit flag wins over the environment.
// controller-runtime registers --kubeconfig on the default FlagSet itself.
func (o *options) register(fs *flag.FlagSet, getenv func(string) string) {
	str := func(p *string, name, env, usage string) {
		serving.EnvString(fs, getenv, p, name, env, "", usage)
	}
	str(&o.namespace, "namespace", "METALLB_NAMESPACE", "Herald's namespace: configuration objects and the memberlist Secret (default: the service account's).")
	str(&o.mlSecretName, "ml-secret-name", "METALLB_ML_SECRET_NAME", "Name of the memberlist Secret to create when missing, also after it is deleted (empty: none).")
	str(&o.deployment, "deployment", "METALLB_DEPLOYMENT", "Name of the controller Deployment; Herald removes it as owner of the memberlist Secret (MetalLB sets it), so the key outlives it.")
	str(&o.podName, "pod-name", "METALLB_POD_NAME", "Name of the controller Pod, owner of the ConfigurationState \"controller\".")
	serving.EnvString(fs, getenv, &o.speakerLabels, "speaker-labels", "HERALD_SPEAKER_LABELS", "",
		"Label selector of the speaker Pods in --namespace (the speakers' METALLB_ML_LABELS): the BGPSessionStates of a node without one for --speaker-gone-grace are deleted (empty: never).")
	fs.DurationVar(&o.speakerGrace, "speaker-gone-grace", sessiongc.DefaultGrace, "How long a node may be without a speaker Pod (a rollout re-creates it) before its BGPSessionStates are deleted; they are marked bgpStatus Unknown as soon as no speaker runs there.")
	fs.BoolVar(&o.version, "version", false, "Print the version, commit and Go version, then exit.")
	fs.StringVar(&o.lbClass, "lb-class", "", "loadBalancerClass handled by this controller (empty: Services without a class).")
	fs.StringVar(&o.logLevel, "log-level", "info", "Log level: all, debug, info, warn, error, none.")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "Elect a leader among controller replicas (Lease herald-controller in --namespace): only the leader allocates; every replica serves the webhooks, metrics and health. false only with a single replica and a rollout that never overlaps two (Recreate).")
	fs.Float64Var(&o.apiQPS, "kube-api-qps", 500, "Client-side rate limit towards the API server, requests per second.")
	fs.IntVar(&o.apiBurst, "kube-api-burst", 1000, "Client-side burst towards the API server, requests.")
	fs.IntVar(&o.workers, "workers", 8, "Concurrent Service workers (allocation itself is serialised).")
	fs.StringVar(&o.webhookMode, "webhook-mode", webhookEnabled, "enabled (webhooks and allocation), disabled (allocation only) or onlywebhook.")
	fs.IntVar(&o.webhookPort, "webhook-port", webhook.DefaultPort, "Port of the validating webhook server.")
	fs.StringVar(&o.certDir, "cert-dir", webhook.DefaultCertDir, "Directory of the webhook serving certificate (tls.crt, tls.key).")
	fs.BoolVar(&o.disableCertRot, "disable-cert-rotation", false, "Do not manage the webhook certificate (use cert-manager or similar).")
	fs.StringVar(&o.certService, "cert-service-name", webhook.DefaultServiceName, "Webhook Service name, the certificate's DNS name <name>.<namespace>.svc.")
	fs.StringVar(&o.webhookSecret, "webhook-secret", webhook.DefaultSecretName, "Secret holding the webhook certificate.")
	fs.StringVar(&o.webhookConfig, "webhook-configuration-name", webhook.DefaultWebhookConfigName, "ValidatingWebhookConfiguration whose caBundle is kept current.")
	fs.StringVar(&o.pprofAddress, "pprof-address", "", "host:port of a net/http/pprof server (/debug/pprof/: heap and CPU profiles), without authentication; empty (default) disables it. Bind it to localhost.")
	o.serving.Register(fs, 9120)
}

// complete fills defaults that need the file system and checks the result.
func (o *options) complete(readFile func(string) ([]byte, error)) error {
	var errs []error
	if o.namespace == "" {
		b, err := readFile(serving.ServiceAccountNamespaceFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("--namespace (METALLB_NAMESPACE) is unset and %s is unreadable: %w", serving.ServiceAccountNamespaceFile, err))
		}
		o.namespace = strings.TrimSpace(string(b))
	}
	switch o.webhookMode {
	case webhookEnabled, webhookDisabled, webhookOnly:
	default:
		errs = append(errs, fmt.Errorf("--webhook-mode %q: must be enabled, disabled or onlywebhook", o.webhookMode))
	}
	if o.apiQPS <= 0 || o.apiBurst <= 0 {
		errs = append(errs, errors.New("--kube-api-qps and --kube-api-burst must be positive"))
	}
	if o.workers <= 0 {
		errs = append(errs, errors.New("--workers must be positive"))
	}
	if o.speakerLabels != "" {
		sel, err := labels.Parse(o.speakerLabels)
		if err != nil {
			errs = append(errs, fmt.Errorf("--speaker-labels (HERALD_SPEAKER_LABELS) %q: %w", o.speakerLabels, err))
		}
		o.speakerSelector = sel
	}
	if o.speakerGrace <= 0 {
		errs = append(errs, errors.New("--speaker-gone-grace must be positive"))
	}
	if _, err := o.serving.TLSOptions(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/conversion"

	"github.com/herald-lb/herald/internal/k8s/fieldmanager"
)

// Defaults of Options (the names of manifests/webhook, listed in docs/install.md).
const (
	DefaultPort              = 9443
	DefaultCertDir           = "/tmp/k8s-webhook-server/serving-certs"
	DefaultServiceName       = "herald-webhook-service"
	DefaultSecretName        = "herald-webhook-cert"
	DefaultWebhookConfigName = "herald-webhook-configuration"
	// PathConvert serves CRD conversion (BGPPeer v1beta1 <-> v1beta2 through
	// the api/v1beta1 ConvertTo/ConvertFrom functions).
	PathConvert = "/convert"
	// ReadyzCheckName is the readiness check Setup adds to the manager: it
	// fails until the webhook server is serving.
	ReadyzCheckName = "webhook"
)

// Options configure Setup. Zero values take the defaults above.
type Options struct {
	// Namespace is Herald's namespace (required): objects elsewhere are
	// refused, and the Service and Secret live there.
	Namespace string
	// Host is the address the webhook server binds ("" = every address).
	Host string
	// Port is the webhook server's port (--webhook-port, 9443).
	Port int
	// CertDir holds tls.crt and tls.key (--cert-dir). Herald copies them
	// there from Secret SecretName itself (CertDir must be writable, e.g. an
	// emptyDir as in manifests/base), unless SecretMounted.
	CertDir string
	// SecretMounted says CertDir is Secret SecretName mounted as a volume,
	// kept current by the kubelet (which can take a minute after a
	// renewal), or files provided otherwise: Herald writes nothing there.
	SecretMounted bool
	// CertRotation makes Herald manage its own serving certificate (the
	// default; --disable-cert-rotation turns it off): a self-signed CA and a
	// serving certificate for ServiceName.Namespace.svc are kept in Secret
	// SecretName (CA valid 10 years, serving certificate 1 year, renewed 90
	// days before expiry, checked every 12 hours), and the CA is injected as
	// caBundle into every webhook of the ValidatingWebhookConfiguration
	// WebhookConfigName. The webhook server starts once the certificate is
	// in CertDir and the caBundle injected. Without it, something else
	// (cert-manager) must provide CertDir and the caBundle.
	CertRotation bool
	// ServiceName is the webhook Service (--cert-service-name).
	ServiceName string
	// SecretName is the Secret holding the certificate (--webhook-secret).
	// Setup creates it, empty, when it does not exist.
	SecretName string
	// WebhookConfigName is the ValidatingWebhookConfiguration whose caBundle
	// rotation keeps current (--webhook-configuration-name).
	WebhookConfigName string
	// ConversionCRDs are CRDs whose spec.conversion.webhook.clientConfig
	// also gets the caBundle (manifests/base patches bgppeers.metallb.io to
	// convert at /convert, so the controller passes "bgppeers.metallb.io").
	// Setup reads each (30 s timeout) and skips, with a warning, a CRD
	// without a conversion webhook; a CRD that does not exist is an error.
	ConversionCRDs []string
	// ExtraDNSNames are added to the serving certificate besides
	// ServiceName.Namespace.svc (tests and out-of-cluster runs use
	// "localhost").
	ExtraDNSNames []string
	// SecretPollInterval is how often the copier re-reads the Secret once
	// the files exist (default 10 s; 1 s until they exist).
	SecretPollInterval time.Duration
	// Reader lists the stored objects for each review. Default: the
	// manager's API reader (uncached, so an object created a moment before
	// is seen; 9 list requests per admission).
	Reader client.Reader
	// TLSOpts adjust the server's TLS configuration (--tls-min-version).
	// HTTP/1.1 only is set first, as MetalLB does.
	TLSOpts []func(*tls.Config)
	// Logger receives admission decisions and certificate file updates
	// (Setup adds no attributes; pass one tagged component=webhook).
	Logger *slog.Logger
}

func (o *Options) setDefaults(mgr manager.Manager) {
	if o.Port == 0 {
		o.Port = DefaultPort
	}
	if o.CertDir == "" {
		o.CertDir = DefaultCertDir
	}
	if o.ServiceName == "" {
		o.ServiceName = DefaultServiceName
	}
	if o.SecretName == "" {
		o.SecretName = DefaultSecretName
	}
	if o.WebhookConfigName == "" {
		o.WebhookConfigName = DefaultWebhookConfigName
	}
	if o.SecretPollInterval == 0 {
		o.SecretPollInterval = 10 * time.Second
	}
	if o.Reader == nil {
		o.Reader = mgr.GetAPIReader()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Setup adds Herald's validating webhook server to mgr: the handlers of
// Webhooks on their paths, CRD conversion at PathConvert, certificate
// rotation (Options.CertRotation), the certificate file copier (unless
// Options.SecretMounted), and the readiness check ReadyzCheckName. The
// server is its own runnable: callers must not also use
// mgr.GetWebhookServer() on the same port. With CertRotation, Setup creates
// the Secret when missing and reads the Options.ConversionCRDs (API
// requests, 30 s timeout each); the manager then needs RBAC for Secrets in
// Namespace, for ValidatingWebhookConfigurations and for those CRDs. It
// returns an error for a missing Namespace, a failed request or a failed
// registration.
func Setup(mgr manager.Manager, opts Options) error {
	if opts.Namespace == "" {
		return errors.New("webhook setup: Options.Namespace is required")
	}
	opts.setDefaults(mgr)
	log := opts.Logger

	http1 := func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }
	srv := webhook.NewServer(webhook.Options{
		Host:    opts.Host,
		Port:    opts.Port,
		CertDir: opts.CertDir,
		TLSOpts: append([]func(*tls.Config){http1}, opts.TLSOpts...),
	})
	rev := NewReviewer(opts.Reader, opts.Namespace, log)
	for path, wh := range Webhooks(rev, mgr.GetScheme()) {
		srv.Register(path, wh)
	}
	srv.Register(PathConvert, explainConversion(mgr.GetScheme(), conversion.NewWebhookHandler(mgr.GetScheme(), conversion.NewRegistry())))

	ready := make(chan struct{})
	secret := types.NamespacedName{Namespace: opts.Namespace, Name: opts.SecretName}
	if opts.CertRotation {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := ensureSecret(ctx, mgr.GetClient(), secret)
		cancel()
		if err != nil {
			return fmt.Errorf("webhook setup: %w", err)
		}
		dns := opts.ServiceName + "." + opts.Namespace + ".svc"
		hooks := []rotator.WebhookInfo{{Name: opts.WebhookConfigName, Type: rotator.Validating}}
		for _, crd := range opts.ConversionCRDs {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			ok, err := hasConversionWebhook(ctx, mgr.GetAPIReader(), crd)
			cancel()
			switch {
			case err != nil:
				return fmt.Errorf("webhook setup: %w", err)
			case !ok:
				// Injecting into it would fail forever and the rotator
				// would never report ready.
				log.Warn("CRD has no conversion webhook; no caBundle injected into it", "crd", crd)
				continue
			}
			hooks = append(hooks, rotator.WebhookInfo{Name: crd, Type: rotator.CRDConversion})
		}
		err = rotator.AddRotator(mgr, &rotator.CertRotator{
			SecretKey:            secret,
			CertDir:              opts.CertDir,
			CAName:               "herald-webhook-ca",
			CAOrganization:       "herald",
			DNSName:              dns,
			ExtraDNSNames:        append([]string{opts.ServiceName + "." + opts.Namespace + ".svc.cluster.local"}, opts.ExtraDNSNames...),
			IsReady:              ready,
			Webhooks:             hooks,
			FieldOwner:           fieldmanager.Controller,
			EnableReadinessCheck: true,
			ControllerName:       "herald-webhook-cert-rotator",
		})
		if err != nil {
			return fmt.Errorf("webhook setup: certificate rotation: %w", err)
		}
	}
	if !opts.SecretMounted {
		// Without rotation, the first copy of the (cert-manager) Secret
		// is what the server waits for; with rotation the rotator waits
		// for the files itself before it reports ready.
		written := make(chan struct{})
		if !opts.CertRotation {
			ready = written
		}
		if err := mgr.Add(&certFiles{reader: mgr.GetAPIReader(), secret: secret, dir: opts.CertDir, every: opts.SecretPollInterval, written: written, log: log}); err != nil {
			return fmt.Errorf("webhook setup: %w", err)
		}
	} else if !opts.CertRotation {
		close(ready)
	}
	if err := mgr.Add(&gatedServer{srv: srv, ready: ready, log: log}); err != nil {
		return fmt.Errorf("webhook setup: %w", err)
	}
	if err := mgr.AddReadyzCheck(ReadyzCheckName, srv.StartedChecker()); err != nil {
		return fmt.Errorf("webhook setup: readiness check: %w", err)
	}
	return nil
}

// ensureSecret creates the (empty) certificate Secret when it is missing:
// the rotator only updates an existing one.
func ensureSecret(ctx context.Context, c client.Client, key types.NamespacedName) error {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: key.Namespace, Name: key.Name,
			Labels: map[string]string{"app.kubernetes.io/name": "herald", "app.kubernetes.io/component": "controller"},
		},
		Type: corev1.SecretTypeOpaque,
	}
	if err := c.Create(ctx, s, client.FieldOwner(fieldmanager.Controller)); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Secret %s: %w", key, err)
	}
	return nil
}

// hasConversionWebhook reports whether CRD name has
// spec.conversion.webhook.clientConfig (read as unstructured, so the
// manager's scheme needs no apiextensions types).
func hasConversionWebhook(ctx context.Context, r client.Reader, name string) (bool, error) {
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	if err := r.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
		return false, fmt.Errorf("read CRD %s: %w", name, err)
	}
	_, found, err := unstructured.NestedMap(crd.Object, "spec", "conversion", "webhook", "clientConfig")
	return found && err == nil, nil
}

// gatedServer starts the webhook server once ready is closed (certificates
// in place), so that it never serves without a certificate the API server
// trusts. It runs on every replica (no leader election).
type gatedServer struct {
	srv   webhook.Server
	ready <-chan struct{}
	log   *slog.Logger
}

func (g *gatedServer) Start(ctx context.Context) error {
	select {
	case <-g.ready:
	case <-ctx.Done():
		return nil
	}
	g.log.Info("webhook server starting")
	return g.srv.Start(ctx)
}

func (g *gatedServer) NeedLeaderElection() bool { return false }

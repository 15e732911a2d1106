// Package testenv starts a real kube-apiserver and etcd for tests (through
// controller-runtime's envtest) with Herald's CRDs from manifests/crds
// installed, and returns a client that knows Herald's types.
//
// The binaries are read from KUBEBUILDER_ASSETS, or from bin/k8s at the
// repository root when it is unset; `make test-assets` builds them. Start
// fails the test (it does not skip) when they are missing, and skips only
// under `go test -short`. Each Start runs its own API server (a few seconds
// to start); share one per package where possible:
//
//	func TestX(t *testing.T) {
//		env := testenv.Start(t)
//		ns := env.Namespace(t)
//		err := env.Client.Create(ctx, &v1beta1.IPAddressPool{...Namespace: ns...})
//	}
//
// StartWith installs admission webhooks too: with Options.WebhookPaths (for
// example manifests/webhook) the API server calls the webhooks at
// https://Env.Webhook.Host:Port/<path> with a certificate in
// Env.Webhook.CertDir, where the test serves its handlers in-process.
package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/herald-lb/herald/internal/k8s/scheme"
)

// modulePath identifies Herald's go.mod when looking for the repository root.
const modulePath = "module github.com/herald-lb/herald\n"

// Env is a running API server with Herald's CRDs installed.
type Env struct {
	// Config reaches the API server as a cluster admin (system:masters).
	Config *rest.Config
	// Client is a controller-runtime client over Config using Scheme.
	Client client.Client
	// Scheme holds the client-go built-in types and Herald's API types.
	Scheme *runtime.Scheme
	// KubeConfig is a kubeconfig file's content for Config, for kubectl.
	KubeConfig []byte
	// Webhook is where the API server calls the installed webhooks; nil
	// without Options.WebhookPaths.
	Webhook *WebhookServing

	te *envtest.Environment
}

// Options tune StartWith. The zero value is what Start does.
type Options struct {
	// WebhookPaths are files or directories (relative to the repository
	// root, or absolute) holding ValidatingWebhookConfigurations and
	// MutatingWebhookConfigurations to install. Their service clientConfig
	// is rewritten to call a local server (Env.Webhook) with a test CA;
	// other kinds in the files are ignored.
	WebhookPaths []string
	// APIServerFlags are set on kube-apiserver's command line (flag name
	// without dashes, e.g. "service-cluster-ip-range"), over envtest's
	// defaults.
	APIServerFlags map[string]string
}

// WebhookServing is where a test must serve the webhooks it installed: the
// API server calls https://Host:Port/<service path> and trusts the
// certificate tls.crt/tls.key in CertDir.
type WebhookServing struct {
	Host    string
	Port    int
	CertDir string
	// CAData is the PEM CA that signed the certificate in CertDir (for
	// tests that call the webhook server directly).
	CAData []byte
}

// NewScheme returns a scheme with the Kubernetes built-in types and every
// kind of api/v1beta1 and api/v1beta2.
// It is internal/k8s/scheme.New, the scheme the binaries use.
func NewScheme() (*runtime.Scheme, error) {
	return scheme.New()
}

// RepoRoot returns the root of the Herald repository (the directory of its
// go.mod), found by walking up from the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte(modulePath)) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of github.com/herald-lb/herald above the working directory")
		}
		dir = parent
	}
}

// Start starts etcd and kube-apiserver, installs manifests/crds, and stops
// them when the test ends. It fails the test when the binaries are missing
// ("run make test-assets") and skips it under -short.
func Start(t testing.TB) *Env {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with webhooks installed and API server flags set (see
// Options).
func StartWith(t testing.TB, opts Options) *Env {
	t.Helper()
	if testing.Short() {
		t.Skip("testenv: needs a real API server; skipped under -short")
	}
	env, err := Launch(opts)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("testenv: stop API server: %v", err)
		}
	})
	return env
}

// Launch is StartWith outside a test (benchmark tools): it returns an error
// instead of failing a test, and the caller stops the API server with
// [Env.Stop].
func Launch(opts Options) (*Env, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(root, "bin", "k8s")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			return nil, fmt.Errorf("%s missing in %s (KUBEBUILDER_ASSETS): run make test-assets", bin, assets)
		}
	}
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	te := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		Scheme:                scheme,
		CRDInstallOptions: envtest.CRDInstallOptions{
			Paths:              []string{filepath.Join(root, "manifests", "crds")},
			ErrorIfPathMissing: true,
		},
	}
	for _, p := range opts.WebhookPaths {
		if !filepath.IsAbs(p) {
			p = filepath.Join(root, p)
		}
		te.WebhookInstallOptions.Paths = append(te.WebhookInstallOptions.Paths, p)
	}
	if len(opts.APIServerFlags) > 0 {
		args := te.ControlPlane.GetAPIServer().Configure()
		for k, v := range opts.APIServerFlags {
			args.Set(k, v)
		}
	}
	if os.Getenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT") == "" {
		// envtest's 60 s default is too short on a loaded 2-core CI machine.
		te.ControlPlaneStartTimeout = 3 * time.Minute
	}
	cfg, err := te.Start()
	if err != nil {
		_ = te.Stop()
		return nil, fmt.Errorf("start API server from %s: %w", assets, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = te.Stop()
		return nil, fmt.Errorf("client: %w", err)
	}
	env := &Env{Config: cfg, Client: c, Scheme: scheme, KubeConfig: te.KubeConfig, te: te}
	if len(opts.WebhookPaths) > 0 {
		w := te.WebhookInstallOptions
		env.Webhook = &WebhookServing{Host: w.LocalServingHost, Port: w.LocalServingPort, CertDir: w.LocalServingCertDir, CAData: w.LocalServingCAData}
	}
	return env, nil
}

// Stop stops the API server and etcd. Start and StartWith call it when the
// test ends; call it after Launch.
func (e *Env) Stop() error { return e.te.Stop() }

// Namespace creates a namespace with a unique name for the test and returns
// its name. Nothing deletes it: the API server dies with the test.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "herald-test-"}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("testenv: create namespace: %v", err)
	}
	return ns.Name
}

package webhook_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/k8s/serving"
	"github.com/herald-lb/herald/internal/k8s/webhook"
	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

// heraldNS is the namespace the samples use and the webhooks accept.
const heraldNS = "herald-system"

// startWebhooks runs a manager with webhook.Setup(opts) until the test ends.
func startWebhooks(t *testing.T, env *testenv.Env, opts webhook.Options) {
	t.Helper()
	logf.SetLogger(logr.Discard()) // controller-runtime's own logs (rotator, server)
	mgr, err := manager.New(env.Config, manager.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatalf("manager: %v", err)
	}
	opts.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	if opts.TLSOpts == nil {
		// The binaries' default (--tls-min-version=VersionTLS13): every
		// admission the API server sends in these tests is TLS 1.3.
		var f serving.Flags
		tlsOpts, err := f.TLSOptions()
		if err != nil {
			t.Fatal(err)
		}
		opts.TLSOpts = tlsOpts
	}
	if err := webhook.Setup(mgr, opts); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}

// createNamespace creates namespace name (AlreadyExists is fine).
func createNamespace(t *testing.T, c client.Client, name string) {
	t.Helper()
	err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// kubectl runs kubectl (testenv.Kubectl: $KUBECTL, else bin/k8s/kubectl,
// else PATH) against the test API server.
type kubectl struct {
	bin, kubeconfig string
}

func newKubectl(t *testing.T, env *testenv.Env) kubectl {
	t.Helper()
	bin, err := testenv.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return kubectl{bin: bin, kubeconfig: kc}
}

// run returns kubectl's combined output and whether it exited 0.
func (k kubectl) run(t *testing.T, stdin string, args ...string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.bin, append([]string{"--kubeconfig", k.kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("kubectl %v: %v", args, err)
	}
	return out.String(), err == nil
}

func (k kubectl) apply(t *testing.T, yaml string) (string, bool) {
	t.Helper()
	return k.run(t, yaml, "apply", "-f", "-")
}

// stored returns "Kind/name" -> resourceVersion of every metallb.io
// configuration object in Herald's namespace.
func stored(t *testing.T, c client.Client) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	lists := map[string]client.ObjectList{
		"IPAddressPool":    &v1beta1.IPAddressPoolList{},
		"L2Advertisement":  &v1beta1.L2AdvertisementList{},
		"BGPAdvertisement": &v1beta1.BGPAdvertisementList{},
		"BGPPeer":          &v1beta2.BGPPeerList{},
		"Community":        &v1beta1.CommunityList{},
		"BFDProfile":       &v1beta1.BFDProfileList{},
	}
	for kind, l := range lists {
		if err := c.List(ctx, l, client.InNamespace(heraldNS)); err != nil {
			t.Fatalf("list %s: %v", kind, err)
		}
		var items []client.Object
		switch l := l.(type) {
		case *v1beta1.IPAddressPoolList:
			for i := range l.Items {
				items = append(items, &l.Items[i])
			}
		case *v1beta1.L2AdvertisementList:
			for i := range l.Items {
				items = append(items, &l.Items[i])
			}
		case *v1beta1.BGPAdvertisementList:
			for i := range l.Items {
				items = append(items, &l.Items[i])
			}
		case *v1beta2.BGPPeerList:
			for i := range l.Items {
				items = append(items, &l.Items[i])
			}
		case *v1beta1.CommunityList:
			for i := range l.Items {
				items = append(items, &l.Items[i])
			}
		case *v1beta1.BFDProfileList:
			for i := range l.Items {
				items = append(items, &l.Items[i])
			}
		}
		for _, o := range items {
			out[kind+"/"+o.GetName()] = o.GetResourceVersion()
		}
	}
	return out
}

// deleteAll removes every configuration object from Herald's namespace,
// advertisements first so that no DELETE leaves a reference dangling, plus
// the objects the samples create besides (a Secret, Services in demo).
func deleteAll(t *testing.T, c client.Client) {
	t.Helper()
	ctx := context.Background()
	in := client.InNamespace(heraldNS)
	for _, o := range []client.Object{
		&v1beta1.BGPAdvertisement{}, &v1beta1.L2Advertisement{}, &v1beta2.BGPPeer{},
		&v1beta1.IPAddressPool{}, &v1beta1.Community{}, &v1beta1.BFDProfile{},
	} {
		if err := c.DeleteAllOf(ctx, o, in); err != nil {
			t.Fatalf("delete all %T: %v", o, err)
		}
	}
	for _, key := range []client.ObjectKey{{Namespace: heraldNS, Name: "upstream-bgp-password"}} {
		if err := c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("delete Secret %s: %v", key, err)
		}
	}
	var svcs corev1.ServiceList
	if err := c.List(ctx, &svcs, client.InNamespace("demo")); err != nil {
		t.Fatalf("list Services in demo: %v", err)
	}
	for i := range svcs.Items {
		if err := c.Delete(ctx, &svcs.Items[i]); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("delete Service demo/%s: %v", svcs.Items[i].Name, err)
		}
	}
	poll.Until(t, 30*time.Second, "configuration objects deleted", func() error {
		if s := stored(t, c); len(s) > 0 {
			return errors.New("still stored: " + strings.Join(keys(s), ", "))
		}
		return nil
	})
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

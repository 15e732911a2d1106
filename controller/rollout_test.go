package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/k8s/allocation/allocationtest"
	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

// process is one controller binary run against the test API server.
type process struct {
	cmd     *exec.Cmd
	health  string // host:port of /healthz and /readyz
	metrics string // host:port of /metrics (plain HTTP)
	log     string
	done    chan error
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startController runs the controller binary with its default flags (as
// the manifests run it: webhooks with their own certificate rotation,
// whose caBundle goes into ValidatingWebhookConfiguration vwc; metrics
// over plain HTTP on a port of its own).
func startController(t *testing.T, bin, kubeconfig, namespace, vwc, name string, extra ...string) *process {
	t.Helper()
	port, metricsPort := freePort(t), freePort(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--kubeconfig=" + kubeconfig, "--namespace=" + namespace,
		fmt.Sprintf("--webhook-port=%d", freePort(t)), "--cert-dir=" + filepath.Join(dir, "certs"),
		"--webhook-configuration-name=" + vwc,
		fmt.Sprintf("--port=%d", metricsPort), "--metrics-secure=false", "--metrics-bind-host=127.0.0.1",
		fmt.Sprintf("--health-probe-port=%d", port), "--log-level=info"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, health: fmt.Sprintf("127.0.0.1:%d", port), metrics: fmt.Sprintf("127.0.0.1:%d", metricsPort),
		log: logPath, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); logFile.Close() }()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("%s log:\n%s", name, b)
		}
	})
	return p
}

// stop sends SIGTERM (a Pod's termination) and waits for the exit.
func (p *process) stop(t *testing.T) {
	select {
	case <-p.done:
		p.done <- nil
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		p.done <- nil
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		t.Errorf("controller did not stop within 60 s of SIGTERM")
	}
}

// metric returns the lines of the process's /metrics that start with name
// (its samples), or an error.
func (p *process) metric(name string) ([]string, error) {
	resp, err := http.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, name+" ") || strings.HasPrefix(l, name+"{") {
			out = append(out, l)
		}
	}
	return out, nil
}

// buildController builds this package's binary into dir and returns its path.
// controllerEnv starts a real API server (allocationtest's flags: a Service
// range for hundreds of Services), stopped at the end of the test, builds
// the controller binary and writes a kubeconfig for it; it returns the
// environment, the binary and the kubeconfig's path.
func controllerEnv(t *testing.T) (env *testenv.Env, bin, kubeconfig string) {
	t.Helper()
	env, err := allocationtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop API server: %v", err)
		}
	})
	dir := t.TempDir()
	bin = buildController(t, dir)
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return env, bin, kubeconfig
}

func buildController(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "controller")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// heraldFixture creates a Herald namespace with IPAddressPool "pool" of
// addrs, an application namespace, and an empty ValidatingWebhookConfiguration
// "herald-webhook-<herald namespace>" for the controller's certificate
// rotation (deleted at the end of the test).
func heraldFixture(t *testing.T, c client.Client, addrs string) (herald, app string, vwc *admissionregistrationv1.ValidatingWebhookConfiguration) {
	t.Helper()
	ctx := context.Background()
	newNS := func() string {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "herald-test-"}}
		if err := c.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
		return ns.Name
	}
	herald, app = newNS(), newNS()
	if err := c.Create(ctx, &v1beta1.IPAddressPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: herald, Name: "pool"},
		Spec:       v1beta1.IPAddressPoolSpec{Addresses: []string{addrs}},
	}); err != nil {
		t.Fatal(err)
	}
	vwc = &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "herald-webhook-" + herald}}
	if err := c.Create(ctx, vwc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), vwc) })
	return herald, app, vwc
}

// ready reports whether the process answers /readyz with 200.
func (p *process) ready() bool {
	resp, err := http.Get("http://" + p.health + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func lbService(ns, name string) *corev1.Service {
	f := false
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: &f,
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
}

func ingress(s *corev1.Service) string {
	var ips []string
	for _, i := range s.Status.LoadBalancer.Ingress {
		ips = append(ips, i.IP)
	}
	return strings.Join(ips, ",")
}

// history watches every Service of a namespace and records, event by
// event, addresses that changed once given (flaps) and addresses shown by
// two Services at once (duplicates).
type history struct {
	mu    sync.Mutex
	first map[string]string
	cur   map[string]string
	flaps []string
	dups  []string
}

func watchHistory(t *testing.T, env *testenv.Env, ns string) *history {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := wc.Watch(ctx, &corev1.ServiceList{}, client.InNamespace(ns))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	h := &history{first: map[string]string{}, cur: map[string]string{}}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*corev1.Service)
			switch {
			case !ok:
			case ev.Type == watch.Deleted:
				h.mu.Lock()
				delete(h.cur, s.Name)
				h.mu.Unlock()
			default:
				h.observe(s.Name, ingress(s))
			}
		}
	}()
	t.Cleanup(func() { w.Stop(); cancel(); <-stopped })
	return h
}

func (h *history) observe(name, ips string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if f, ok := h.first[name]; ok && f != ips {
		h.flaps = append(h.flaps, fmt.Sprintf("%s: %s -> %q", name, f, ips))
	}
	if _, ok := h.first[name]; !ok && ips != "" {
		h.first[name] = ips
	}
	h.cur[name] = ips
	if ips == "" {
		return
	}
	for other, o := range h.cur {
		if other != name && o != "" && overlap(o, ips) {
			h.dups = append(h.dups, fmt.Sprintf("%s and %s both show %s/%s", other, name, o, ips))
		}
	}
}

func overlap(a, b string) bool {
	for _, x := range strings.Split(a, ",") {
		for _, y := range strings.Split(b, ",") {
			if x == y {
				return true
			}
		}
	}
	return false
}

// A controller rollout during a burst of Service creations, as a
// Deployment does it (maxSurge 1): the new controller process starts while
// the old one still runs, and the old one gets SIGTERM once the new one is
// ready. Both run with their default flags. No Service's address ever
// changes once given and no address is shown by two Services at once
// (issue 11 item 3: without leader election both allocated and each
// rewrote the other's writes). The standby is ready (it stays in the
// webhook Service's endpoints) while it is not the leader.
func TestRolloutDuringBurst(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real API server; skipped under -short")
	}
	env, bin, kc := controllerEnv(t) // a Service range for hundreds of Services
	ctx := context.Background()
	newNS := func() string {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "herald-test-"}}
		if err := env.Client.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
		return ns.Name
	}
	herald, app := newNS(), newNS()
	if err := env.Client.Create(ctx, &v1beta1.IPAddressPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: herald, Name: "pool"},
		Spec:       v1beta1.IPAddressPoolSpec{Addresses: []string{"198.51.100.0/24"}},
	}); err != nil {
		t.Fatal(err)
	}
	// The webhook configuration whose caBundle the controllers' certificate
	// rotation keeps; its rule matches nothing the test writes.
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "herald-webhook-" + herald},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "probe.test.herald.io",
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
				Namespace: herald, Name: "herald-webhook-service", Path: ptr.To("/validate-metallb-io-v1beta1-ipaddresspool"),
			}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"test.herald.io"}, APIVersions: []string{"v1"}, Resources: []string{"nothing"}},
			}},
		}},
	}
	if err := env.Client.Create(ctx, vwc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), vwc) })
	extra := strings.Fields(os.Getenv("HERALD_TEST_CONTROLLER_ARGS")) // e.g. --leader-elect=false, to see the failure
	hist := watchHistory(t, env, app)

	listIPs := func() map[string]string {
		var list corev1.ServiceList
		if err := env.Client.List(ctx, &list, client.InNamespace(app)); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for i := range list.Items {
			if ips := ingress(&list.Items[i]); ips != "" {
				out[list.Items[i].Name] = ips
			}
		}
		return out
	}

	old := startController(t, bin, kc, herald, vwc.Name, "old", extra...)
	if err := env.Client.Create(ctx, lbService(app, "warm")); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 60*time.Second, "the old controller addresses a Service", func() error {
		if ips := listIPs(); ips["warm"] == "" {
			return fmt.Errorf("addresses %v", ips)
		}
		return nil
	})

	// The burst runs before, during and after the overlap of the two
	// processes (a Pod's readiness takes seconds; the overlap is long).
	// During the overlap, Services are deleted too: which new Service gets
	// a freed address depends on timing, so two allocators would disagree.
	next := 0
	burst := func(k int, deletes ...string) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, k+len(deletes))
		first := next
		next += k
		wg.Go(func() {
			for _, name := range deletes {
				if err := env.Client.Delete(ctx, lbService(app, name)); err != nil {
					errs <- err
				}
			}
		})
		for w := range 4 {
			wg.Go(func() {
				for i := first + w; i < first+k; i += 4 {
					if err := env.Client.Create(ctx, lbService(app, fmt.Sprintf("svc-%03d", i))); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("create or delete: %v", err)
		}
	}
	burst(40)
	// The new process starts while Services keep coming in.
	var during sync.WaitGroup
	during.Go(func() { burst(80) })
	surge := startController(t, bin, kc, herald, vwc.Name, "new", extra...)
	// Ready while not the leader (its webhook server runs): it stays in
	// the webhook Service's endpoints.
	poll.Until(t, 60*time.Second, "the new controller ready", surge.ready)
	if !old.ready() {
		t.Errorf("the old controller (leader) is not ready")
	}
	if electing := !strings.Contains(strings.Join(extra, " "), "--leader-elect=false"); electing {
		b, err := os.ReadFile(surge.log)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "webhook server starting") {
			t.Errorf("the standby does not serve the webhook")
		}
		if strings.Contains(string(b), "imported existing assignments") {
			t.Errorf("the standby allocates while the old controller leads")
		}
		if b, _ := os.ReadFile(old.log); !strings.Contains(string(b), "imported existing assignments") {
			t.Errorf("the leader's log lacks the line the standby's is checked for")
		}
		// The standby runs no configuration loop, so it exports no
		// config_loaded_bool (a 0 from it fired MetalLBConfigNotLoaded for
		// as long as it waited); the leader exports 1.
		const loaded = "metallb_k8s_client_config_loaded_bool"
		if got, err := surge.metric(loaded); err != nil || len(got) != 0 {
			t.Errorf("standby %s = %v (%v), want no series", loaded, got, err)
		}
		if got, err := old.metric(loaded); err != nil || len(got) != 1 || !strings.HasSuffix(got[0], " 1") {
			t.Errorf("leader %s = %v (%v), want 1", loaded, got, err)
		}
	}
	var deletes []string
	for i := 0; i < 40; i += 2 {
		deletes = append(deletes, fmt.Sprintf("svc-%03d", i))
	}
	during.Wait()
	burst(80, deletes...)
	old.stop(t)
	burst(40)
	const n = 240 - 20
	poll.Until(t, 120*time.Second, "every Service addressed", func() error {
		if got := len(listIPs()); got != n+1 {
			return fmt.Errorf("%d addressed, want %d", got, n+1)
		}
		return nil
	})
	// One more change after the handover: the new leader serves it.
	if err := env.Client.Create(ctx, lbService(app, "after")); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 60*time.Second, "a Service created after the rollout addressed", func() error {
		if ips := listIPs(); ips["after"] == "" {
			return fmt.Errorf("not addressed (%d addressed)", len(ips))
		}
		return nil
	})

	hist.mu.Lock()
	defer hist.mu.Unlock()
	if len(hist.flaps) > 0 {
		t.Errorf("%d address changes during the rollout, e.g. %v", len(hist.flaps), hist.flaps[:min(5, len(hist.flaps))])
	}
	if len(hist.dups) > 0 {
		t.Errorf("%d duplicate addresses during the rollout, e.g. %v", len(hist.dups), hist.dups[:min(5, len(hist.dups))])
	}
}

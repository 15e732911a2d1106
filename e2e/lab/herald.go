package lab

// Running Herald in the lab: its own manifests applied with kubectl (or its
// Helm chart installed with helm, see helm.go), its controller and speakers
// run as lab processes with the args, env and volumes of the Deployment's
// and DaemonSet's Pod templates (so the lab and the manifests or chart
// cannot drift apart). Only the kubelet's part is played here.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
)

// Names of Herald's objects in its manifests (see manifests/base), which
// the chart uses too with the release name "herald". InstallHerald finds
// the workloads by label (see Herald.findWorkloads), so other release names
// work as well; the names here are for callers that know they installed the
// manifests.
const (
	HeraldNamespace      = "herald-system"
	ControllerDeployment = "herald-controller"
	SpeakerDaemonSet     = "herald-speaker"
	WebhookService       = "herald-webhook-service"
	controllerContainer  = "controller"
	speakerContainer     = "speaker"
	// healthPort is --health-probe-port in the manifests; the speaker binds
	// it on 127.0.0.1 of its node namespace.
	healthPort = 17472
)

// BinDirEnv names the environment variable that points InstallHerald at
// prebuilt controller and speaker binaries (see InstallOptions.BinDir).
const BinDirEnv = "HERALD_LAB_BIN_DIR"

// DefaultManifests is the kustomize directory InstallHerald applies by
// default, relative to the module root.
const DefaultManifests = "manifests/base"

// InstallMethod says how InstallHerald puts Herald's objects into the lab's
// API server.
type InstallMethod string

const (
	// InstallKubectl applies InstallOptions.Manifests with `kubectl apply
	// --server-side` (the default).
	InstallKubectl InstallMethod = "kubectl"
	// InstallHelm installs InstallOptions.Chart with `helm upgrade
	// --install` as release InstallOptions.Release (see helm.go).
	InstallHelm InstallMethod = "helm"
)

// InstallOptions says what InstallHerald installs and runs.
type InstallOptions struct {
	// Method is InstallKubectl (empty) or InstallHelm.
	Method InstallMethod
	// Manifests is a kustomize directory or a YAML file (e.g.
	// "manifests/herald.yaml"), relative to the module root unless
	// absolute. Empty means DefaultManifests. Only for InstallKubectl.
	Manifests string
	// Chart is the Helm chart directory, relative to the module root unless
	// absolute; empty means DefaultChart. Only for InstallHelm.
	Chart string
	// Release is the Helm release name; empty means DefaultRelease, whose
	// object names are those of the manifests. Only for InstallHelm.
	Release string
	// HelmSet are extra "key=value" chart values (helm --set). Only for
	// InstallHelm.
	HelmSet []string
	// Samples are YAML files (relative to the module root unless absolute)
	// applied once the controller's webhook answers, so the webhook
	// validates them, e.g. "manifests/samples/l2.yaml".
	Samples []string
	// ControllerNode is the lab node the controller Pod is scheduled on
	// (its process runs in the control namespace); empty means n1.
	ControllerNode string
	// SpeakerNodes are the nodes that run a speaker; nil means every node.
	SpeakerNodes []string
	// BinDir holds prebuilt controller and speaker binaries (and helm, for
	// InstallHelm); empty means $HERALD_LAB_BIN_DIR, and when that is empty
	// too they are built with `go build` into StateDir/bin (helm from
	// hack/tools/helm, as `make tools` does).
	BinDir string
	// Timeout bounds each wait for readiness; 0 means 90 s.
	Timeout time.Duration
}

// Herald is Herald installed in a lab: one controller process and one
// speaker process per node, each playing its Pod. Its methods are safe for
// concurrent use.
type Herald struct {
	lab    *Lab
	opts   InstallOptions
	binDir string
	client client.Client
	// ctlDeploy and spkDS name the controller Deployment and the speaker
	// DaemonSet that the install created (see findWorkloads).
	ctlDeploy, spkDS string
	mu               sync.Mutex
	helmBin          string // see helmBinary
	ctlPod           *corev1.Pod
	spkPods          map[string]*corev1.Pod // by node name
}

// Scheme returns a scheme with the core Kubernetes types and Herald's API
// (metallb.io v1beta1 and v1beta2).
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1beta1.AddToScheme(s)
	_ = v1beta2.AddToScheme(s)
	return s
}

// BuildHerald builds the controller and speaker binaries into dir with
// `go build` from the module root and returns dir.
func BuildHerald(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", abs+"/", "./controller", "./speaker")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./controller ./speaker: %w\n%s", err, out)
	}
	return abs, nil
}

// InstallHerald installs Herald into the lab from its manifests or its
// Helm chart (opts.Method) and runs it: it builds the binaries (unless
// opts.BinDir), registers the Node objects if missing, applies the
// manifests with `kubectl apply --server-side` or installs the chart with
// `helm upgrade --install`, finds the controller Deployment and speaker
// DaemonSet it created by their labels, starts the controller from the
// Deployment's template, points the Services that select it (the webhook
// and metrics Services) at it, waits until the webhook refuses an invalid
// object, starts one speaker per node from the DaemonSet's template, points
// the Services that select the speakers at them, waits until each answers
// /readyz, then applies opts.Samples and waits until the
// ConfigurationState "controller" is Valid.
func (l *Lab) InstallHerald(ctx context.Context, opts InstallOptions) (*Herald, error) {
	switch opts.Method {
	case "":
		opts.Method = InstallKubectl
	case InstallKubectl, InstallHelm:
	default:
		return nil, fmt.Errorf("install herald: unknown method %q (want %q or %q)", opts.Method, InstallKubectl, InstallHelm)
	}
	if opts.Manifests == "" {
		opts.Manifests = DefaultManifests
	}
	if opts.Chart == "" {
		opts.Chart = DefaultChart
	}
	if opts.Release == "" {
		opts.Release = DefaultRelease
	}
	if opts.ControllerNode == "" {
		opts.ControllerNode = NodeName(1)
	}
	if opts.SpeakerNodes == nil {
		for _, n := range l.Nodes {
			opts.SpeakerNodes = append(opts.SpeakerNodes, n.Name)
		}
	}
	if opts.Timeout == 0 {
		opts.Timeout = 90 * time.Second
	}
	cl, err := client.New(l.RESTConfig(), client.Options{Scheme: Scheme()})
	if err != nil {
		return nil, fmt.Errorf("install herald: %w", err)
	}
	h := &Herald{lab: l, opts: opts, client: cl, spkPods: map[string]*corev1.Pod{}}
	h.binDir = opts.BinDir
	if h.binDir == "" {
		h.binDir = os.Getenv(BinDirEnv)
	}
	if h.binDir == "" {
		if h.binDir, err = BuildHerald(ctx, filepath.Join(l.StateDir(), "bin")); err != nil {
			return nil, fmt.Errorf("install herald: %w", err)
		}
	}
	if err := h.ensureNodes(ctx); err != nil {
		return nil, fmt.Errorf("install herald: %w", err)
	}
	if opts.Method == InstallHelm {
		err = h.installChart(ctx)
	} else {
		err = h.applyManifests(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("install herald: %w", err)
	}
	if err := h.findWorkloads(ctx); err != nil {
		return h, fmt.Errorf("install herald: %w", err)
	}
	if err := h.StartController(ctx); err != nil {
		return h, err
	}
	pods, err := l.CreateDaemonSetPods(ctx, HeraldNamespace, h.spkDS)
	if err != nil {
		return h, fmt.Errorf("install herald: %w", err)
	}
	want := map[string]bool{}
	for _, n := range opts.SpeakerNodes {
		want[n] = true
	}
	var run []*corev1.Pod
	for _, p := range pods {
		if !want[p.Spec.NodeName] {
			// No speaker on this node: the Pod object goes too.
			_ = l.Client().CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
			continue
		}
		h.mu.Lock()
		h.spkPods[p.Spec.NodeName] = p
		h.mu.Unlock()
		run = append(run, p)
	}
	if err := h.pointServices(ctx, run); err != nil {
		return h, fmt.Errorf("install herald: %w", err)
	}
	for _, p := range run {
		if err := h.StartSpeaker(ctx, p.Spec.NodeName); err != nil {
			return h, err
		}
	}
	if len(opts.Samples) > 0 {
		if err := h.Apply(ctx, opts.Samples...); err != nil {
			return h, err
		}
		if err := h.WaitConfigValid(ctx, "controller"); err != nil {
			return h, fmt.Errorf("install herald: samples: %w", err)
		}
	}
	return h, nil
}

// applyManifests applies opts.Manifests (a kustomize directory or a YAML
// file) with `kubectl apply --server-side`.
func (h *Herald) applyManifests(ctx context.Context) error {
	manifests, err := fromRoot(h.opts.Manifests)
	if err != nil {
		return err
	}
	if st, err := os.Stat(manifests); err != nil {
		return err
	} else if st.IsDir() {
		_, err = h.lab.ApplyKustomize(ctx, manifests)
	} else {
		_, err = h.lab.Apply(ctx, manifests)
	}
	if err != nil {
		return fmt.Errorf("apply %s: %w", h.opts.Manifests, err)
	}
	return nil
}

// componentLabel is the label that tells Herald's controller objects from
// its speaker objects, in the manifests and in the chart.
const componentLabel = "app.kubernetes.io/component"

// installSelector returns the labels that all of this install's objects
// carry: app.kubernetes.io/name=herald for the manifests,
// app.kubernetes.io/instance=<release> for the chart.
func (h *Herald) installSelector() map[string]string {
	if h.opts.Method == InstallHelm {
		return map[string]string{"app.kubernetes.io/instance": h.opts.Release}
	}
	return map[string]string{"app.kubernetes.io/name": "herald"}
}

// findWorkloads finds, by label in HeraldNamespace, the controller
// Deployment and the speaker DaemonSet that the install created (one each)
// and records their names: the lab runs what the manifests or the chart
// actually rendered, whatever the release name made of the names.
func (h *Herald) findWorkloads(ctx context.Context) error {
	sel := func(component string) string {
		m := map[string]string{componentLabel: component}
		for k, v := range h.installSelector() {
			m[k] = v
		}
		return labels.SelectorFromSet(m).String()
	}
	apps := h.lab.Client().AppsV1()
	ds, err := apps.Deployments(HeraldNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel("controller")})
	if err != nil {
		return fmt.Errorf("find the controller deployment: %w", err)
	}
	if len(ds.Items) != 1 {
		return fmt.Errorf("find the controller deployment: %d deployments in %s match %s, want 1", len(ds.Items), HeraldNamespace, sel("controller"))
	}
	dss, err := apps.DaemonSets(HeraldNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel("speaker")})
	if err != nil {
		return fmt.Errorf("find the speaker daemonset: %w", err)
	}
	if len(dss.Items) != 1 {
		return fmt.Errorf("find the speaker daemonset: %d daemonsets in %s match %s, want 1", len(dss.Items), HeraldNamespace, sel("speaker"))
	}
	h.ctlDeploy, h.spkDS = ds.Items[0].Name, dss.Items[0].Name
	return nil
}

// pointServices gives every Service in HeraldNamespace whose selector
// matches some of pods (the webhook and metrics Services, whatever their
// names) those pods as endpoints (lab scaffolding: plays the EndpointSlice
// controller).
func (h *Herald) pointServices(ctx context.Context, pods []*corev1.Pod) error {
	svcs, err := h.lab.Client().CoreV1().Services(HeraldNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("point services at pods: %w", err)
	}
	for _, svc := range svcs.Items {
		if len(svc.Spec.Selector) == 0 {
			continue
		}
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		var match []*corev1.Pod
		for _, p := range pods {
			if sel.Matches(labels.Set(p.Labels)) {
				match = append(match, p)
			}
		}
		if len(match) == 0 {
			continue
		}
		if err := h.lab.SetPodEndpoints(ctx, HeraldNamespace, svc.Name, match); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// fromRoot resolves a path relative to the module root.
func fromRoot(p string) (string, error) {
	if filepath.IsAbs(p) {
		return p, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, p), nil
}

// ensureNodes registers the lab's Node objects unless they exist.
func (h *Herald) ensureNodes(ctx context.Context) error {
	nodes, err := h.lab.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	if len(nodes.Items) >= len(h.lab.Nodes) {
		return nil
	}
	return h.lab.RegisterNodes(ctx, nil)
}

// Lab returns the lab Herald runs in.
func (h *Herald) Lab() *Lab { return h.lab }

// Client returns a controller-runtime client for the lab's API server that
// knows Herald's API types (see Scheme).
func (h *Herald) Client() client.Client { return h.client }

// BinDir returns the directory holding the controller and speaker binaries.
func (h *Herald) BinDir() string { return h.binDir }

// Apply applies YAML files (relative to the module root unless absolute)
// with `kubectl apply --server-side`, through Herald's webhook.
func (h *Herald) Apply(ctx context.Context, files ...string) error {
	var abs []string
	for _, f := range files {
		a, err := fromRoot(f)
		if err != nil {
			return err
		}
		abs = append(abs, a)
	}
	if _, err := h.lab.Apply(ctx, abs...); err != nil {
		return fmt.Errorf("apply %s: %w", strings.Join(files, " "), err)
	}
	return nil
}

// ControllerProcessName is the lab process name of the controller (its
// Pod's name).
func (h *Herald) ControllerProcessName() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctlPod != nil {
		return h.ctlPod.Name
	}
	return TemplatePodName(h.ctlDeploy, h.opts.ControllerNode)
}

// SpeakerProcessName is the lab process name of node's speaker (its Pod's
// name).
func (h *Herald) SpeakerProcessName(node string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p := h.spkPods[node]; p != nil {
		return p.Name
	}
	return TemplatePodName(h.spkDS, node)
}

// Controller returns the controller's lab process, or nil when it is not
// running.
func (h *Herald) Controller() *Process { return h.lab.Process(h.ControllerProcessName()) }

// Speaker returns node's speaker process, or nil when it is not running.
func (h *Herald) Speaker(node string) *Process { return h.lab.Process(h.SpeakerProcessName(node)) }

// SpeakerNodes returns the nodes that have a speaker Pod, sorted.
func (h *Herald) SpeakerNodes() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ns []string
	for n := range h.spkPods {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

// StartController creates the controller Pod (once) from the Deployment's
// template, runs it, points the Services that select it (webhook, metrics)
// at it and waits until it is ready (see WaitControllerReady).
func (h *Herald) StartController(ctx context.Context) error {
	h.mu.Lock()
	pod := h.ctlPod
	h.mu.Unlock()
	if pod == nil {
		p, err := h.lab.CreateDeploymentPod(ctx, HeraldNamespace, h.ctlDeploy, h.opts.ControllerNode)
		if err != nil {
			return fmt.Errorf("start controller: %w", err)
		}
		pod = p
		h.mu.Lock()
		h.ctlPod = p
		h.mu.Unlock()
		if err := h.pointServices(ctx, []*corev1.Pod{p}); err != nil {
			return fmt.Errorf("start controller: %w", err)
		}
	}
	if _, err := h.lab.StartPod(ctx, pod, controllerContainer, filepath.Join(h.binDir, "controller")); err != nil {
		return fmt.Errorf("start controller: %w", err)
	}
	return h.WaitControllerReady(ctx)
}

// WaitControllerReady waits until the controller's webhook answers: a dry
// run of an invalid IPAddressPool is refused by it (not by a connection
// error, and not accepted). It fails early when the controller exits.
func (h *Herald) WaitControllerReady(ctx context.Context) error {
	bad := &v1beta1.IPAddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: "lab-readiness-probe", Namespace: HeraldNamespace},
		Spec:       v1beta1.IPAddressPoolSpec{Addresses: []string{"not-an-address"}},
	}
	err := poll(ctx, h.opts.Timeout, func() error {
		if p := h.Controller(); p == nil || !p.Alive() {
			return permanent(fmt.Errorf("the controller process is not running (log %s)",
				filepath.Join(h.lab.StateDir(), h.ControllerProcessName()+".log")))
		}
		err := h.client.Create(ctx, bad.DeepCopy(), client.DryRunAll)
		switch {
		case err == nil:
			return errors.New("the API server accepted an invalid IPAddressPool: the webhook is not configured")
		case !strings.Contains(err.Error(), "denied the request"):
			return fmt.Errorf("webhook not answering yet: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("controller not ready: %w", err)
	}
	return nil
}

// WaitConfigValid waits until ConfigurationState name ("controller" or
// "speaker-<node>") reports Valid, and returns its error summary when it
// reports Invalid for longer than the timeout.
func (h *Herald) WaitConfigValid(ctx context.Context, name string) error {
	err := poll(ctx, h.opts.Timeout, func() error {
		var cs v1beta1.ConfigurationState
		if err := h.client.Get(ctx, client.ObjectKey{Namespace: HeraldNamespace, Name: name}, &cs); err != nil {
			return fmt.Errorf("ConfigurationState %s: %w", name, err)
		}
		if cs.Status.Result != v1beta1.ConfigurationResultValid {
			return fmt.Errorf("ConfigurationState %s: result %q: %s", name, cs.Status.Result, cs.Status.ErrorSummary)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("configuration not valid: %w", err)
	}
	return nil
}

// StartSpeaker runs node's speaker from its Pod (created by InstallHerald)
// and waits until its /readyz answers 200 inside the node's namespace.
func (h *Herald) StartSpeaker(ctx context.Context, node string) error {
	h.mu.Lock()
	pod := h.spkPods[node]
	h.mu.Unlock()
	if pod == nil {
		return fmt.Errorf("start speaker: no speaker pod on node %q", node)
	}
	if _, err := h.lab.StartPod(ctx, pod, speakerContainer, filepath.Join(h.binDir, "speaker")); err != nil {
		return fmt.Errorf("start speaker %s: %w", node, err)
	}
	return h.WaitSpeakerReady(ctx, node)
}

// WaitSpeakerReady waits until node's speaker answers /readyz on
// 127.0.0.1:17472 of the node's namespace with 200.
func (h *Herald) WaitSpeakerReady(ctx context.Context, node string) error {
	n, ok := h.lab.Node(node)
	if !ok {
		return fmt.Errorf("speaker %s: no such lab node", node)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", healthPort)
	err := poll(ctx, h.opts.Timeout, func() error {
		if p := h.Speaker(node); p == nil || !p.Alive() {
			return permanent(fmt.Errorf("the speaker process on %s is not running (log %s)",
				node, filepath.Join(h.lab.StateDir(), h.SpeakerProcessName(node)+".log")))
		}
		out, err := h.lab.Exec(ctx, n.Namespace, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "2", url)
		if err != nil || strings.TrimSpace(out) != "200" {
			return fmt.Errorf("readyz: %q %v", strings.TrimSpace(out), err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("speaker %s not ready: %w", node, err)
	}
	return nil
}

// StopSpeaker stops node's speaker gracefully (SIGTERM, as the kubelet on
// Pod deletion; SIGKILL after the Pod's terminationGracePeriodSeconds) and
// waits until it is gone. The Pod object is left as it is.
func (h *Herald) StopSpeaker(node string) error {
	if h.Speaker(node) == nil {
		return fmt.Errorf("stop speaker %s: not running", node)
	}
	return h.lab.StopProcess(h.SpeakerProcessName(node))
}

// KillSpeaker sends SIGKILL to node's speaker (a crash: no goodbye) and
// waits until it is gone. The Pod object is left as it is.
func (h *Herald) KillSpeaker(node string) error {
	return h.kill(h.SpeakerProcessName(node))
}

// StopController stops the controller gracefully (SIGTERM) and waits until
// it is gone.
func (h *Herald) StopController() error {
	if h.Controller() == nil {
		return errors.New("stop controller: not running")
	}
	return h.lab.StopProcess(h.ControllerProcessName())
}

// KillController sends SIGKILL to the controller and waits until it is
// gone.
func (h *Herald) KillController() error { return h.kill(h.ControllerProcessName()) }

func (h *Herald) kill(name string) error {
	p := h.lab.Process(name)
	if p == nil {
		return fmt.Errorf("kill %s: not running", name)
	}
	_ = syscall.Kill(-p.PID, syscall.SIGKILL)
	_ = syscall.Kill(p.PID, syscall.SIGKILL)
	if d := p.Done(); d != nil {
		select {
		case <-d:
		case <-time.After(5 * time.Second):
		}
	}
	// Forget it (StopProcess finds it dead and only updates the records).
	return h.lab.StopProcess(name)
}

// CutLink takes node's cable out: the switch side of its veth goes down,
// so the node and its speaker see no traffic (the node's own eth0 stays
// up, as with a broken switch port).
func (h *Herald) CutLink(ctx context.Context, node string) error {
	return h.setLink(ctx, node, "down")
}

// RestoreLink undoes CutLink.
func (h *Herald) RestoreLink(ctx context.Context, node string) error {
	return h.setLink(ctx, node, "up")
}

func (h *Herald) setLink(ctx context.Context, node, state string) error {
	if _, ok := h.lab.Node(node); !ok {
		return fmt.Errorf("link %s: no such lab node", node)
	}
	_, err := h.lab.Exec(ctx, h.lab.SwitchNamespace(), "ip", "link", "set", "v-"+node, state)
	return err
}

// Logs returns the last lines (at most lines each) of the controller's and
// every speaker's log, for test failure reports.
func (h *Herald) Logs(lines int) string {
	names := []string{h.ControllerProcessName()}
	for _, n := range h.SpeakerNodes() {
		names = append(names, h.SpeakerProcessName(n))
	}
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "--- %s.log (tail)\n%s\n", n, tailFile(filepath.Join(h.lab.StateDir(), n+".log"), lines))
	}
	return b.String()
}

// tailFile returns the last n lines of a file, or a note why it cannot.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// ServiceIPs returns the addresses in Service namespace/name's
// status.loadBalancer.ingress (none while it has none).
func (h *Herald) ServiceIPs(ctx context.Context, namespace, name string) ([]netip.Addr, error) {
	svc, err := h.lab.Client().CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var ips []netip.Addr
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(in.IP); err == nil {
			ips = append(ips, a)
		}
	}
	return ips, nil
}

// WaitServiceIPs waits until Service namespace/name has n ingress
// addresses (n > 0) and returns them.
func (h *Herald) WaitServiceIPs(ctx context.Context, namespace, name string, n int) ([]netip.Addr, error) {
	var ips []netip.Addr
	err := poll(ctx, h.opts.Timeout, func() error {
		var err error
		ips, err = h.ServiceIPs(ctx, namespace, name)
		if err != nil {
			return err
		}
		if len(ips) < n {
			return fmt.Errorf("service %s/%s has %d of %d addresses %v", namespace, name, len(ips), n, ips)
		}
		return nil
	})
	return ips, err
}

// NodeByMAC returns the name of the lab node whose eth0 has mac, or "".
func (l *Lab) NodeByMAC(mac net.HardwareAddr) string {
	for _, n := range l.Nodes {
		if bytes.Equal(n.MAC, mac) {
			return n.Name
		}
	}
	return ""
}

// Resolve asks the segment who has addr from the client: an ARP request
// (RFC 826) for IPv4, a neighbor solicitation (RFC 4861) for IPv6. It
// returns the node whose MAC answered (or the MAC itself when it is no
// node's).
func (l *Lab) Resolve(ctx context.Context, addr netip.Addr) (string, error) {
	var mac net.HardwareAddr
	var err error
	if addr.Is4() {
		mac, err = l.Arping(ctx, addr)
	} else {
		mac, err = l.NeighborSolicit(ctx, addr)
	}
	if err != nil {
		return "", err
	}
	if n := l.NodeByMAC(mac); n != "" {
		return n, nil
	}
	return mac.String(), nil
}

// L2Statuses returns the ServiceL2Status objects of Service
// namespace/name: the nodes that say they announce it in layer 2.
func (h *Herald) L2Statuses(ctx context.Context, namespace, name string) ([]v1beta1.ServiceL2Status, error) {
	var l v1beta1.ServiceL2StatusList
	err := h.client.List(ctx, &l, client.InNamespace(HeraldNamespace), client.MatchingLabels{
		v1beta1.LabelServiceName: name, v1beta1.LabelServiceNamespace: namespace,
	})
	return l.Items, err
}

// BGPStatuses returns the ServiceBGPStatus objects of Service
// namespace/name: the nodes that say they advertise it over BGP.
func (h *Herald) BGPStatuses(ctx context.Context, namespace, name string) ([]v1beta1.ServiceBGPStatus, error) {
	var l v1beta1.ServiceBGPStatusList
	err := h.client.List(ctx, &l, client.InNamespace(HeraldNamespace), client.MatchingLabels{
		v1beta1.LabelServiceName: name, v1beta1.LabelServiceNamespace: namespace,
	})
	return l.Items, err
}

// Diagnose describes what the client, the router and the speakers see, for
// a test failure: the client's neighbour cache, FRR's BGP summary and
// tables, every ServiceL2Status and ServiceBGPStatus, every Service's
// addresses, the ConfigurationStates, and the tail of Herald's logs.
func (h *Herald) Diagnose(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var b strings.Builder
	section := func(title, body string, err error) {
		fmt.Fprintf(&b, "=== %s\n", title)
		if err != nil {
			fmt.Fprintf(&b, "(error: %v)\n", err)
		}
		b.WriteString(strings.TrimRight(body, "\n") + "\n")
	}
	out, err := h.lab.Exec(ctx, h.lab.ClientNamespace(), "ip", "neigh", "show")
	section("client: ip neigh", out, err)
	out, err = h.lab.Vtysh(ctx, "show bgp summary")
	section("router: show bgp summary", out, err)
	for _, af := range []string{"ipv4", "ipv6"} {
		out, err = h.lab.Vtysh(ctx, "show bgp "+af+" unicast")
		section("router: show bgp "+af+" unicast", out, err)
	}
	out, err = h.lab.Kubectl(ctx, "get", "services", "-A", "-o", "wide")
	section("services", out, err)
	out, err = h.lab.Kubectl(ctx, "-n", HeraldNamespace, "get", "servicel2statuses,servicebgpstatuses", "-o",
		"custom-columns=KIND:.kind,NAME:.metadata.name,SERVICE:.status.serviceName,NS:.status.serviceNamespace,NODE:.status.node,IFACES:.status.interfaces[*].name,PEERS:.status.peers")
	section("speakers: announcements", out, err)
	out, err = h.lab.Kubectl(ctx, "-n", HeraldNamespace, "get", "configurationstates")
	section("configuration states", out, err)
	b.WriteString(h.Logs(30))
	return b.String()
}

// AcceptLocal makes every node accept addr as a local address (a local
// route on lo, as the lab does for its Service ranges) unless one of
// ServiceLocalPrefixes covers it already (lab scaffolding: plays
// kube-proxy, which accepts every load-balancer address it is given, e.g.
// from a sample pool outside the lab's ranges). The kernel still does not
// answer ARP or NDP for it: only a speaker makes it reachable.
func (l *Lab) AcceptLocal(ctx context.Context, addr netip.Addr) error {
	for _, p := range ServiceLocalPrefixes() {
		if p.Contains(addr) {
			return nil
		}
	}
	pfx := netip.PrefixFrom(addr, addr.BitLen()).String()
	var errs []error
	for _, n := range l.Nodes {
		if _, err := l.Exec(ctx, n.Namespace, "ip", "route", "replace", "local", pfx, "dev", "lo", "table", "local"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ARPAnswerers sends count ARP requests for addr from the client and
// returns every node (or foreign MAC) that answered any of them, sorted and
// without duplicates: one entry means exactly one node announces addr;
// none means nobody does.
func (l *Lab) ARPAnswerers(ctx context.Context, addr netip.Addr, count int) ([]string, error) {
	if !addr.Is4() {
		return nil, fmt.Errorf("arping %s: not an IPv4 address", addr)
	}
	// arping exits non-zero when nothing answered; that is an answer here.
	out, _ := l.Exec(ctx, l.ClientNamespace(), "arping", "-c", fmt.Sprint(count), "-w", fmt.Sprint(count+1), "-i", "eth0", addr.String())
	seen := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, "bytes from") {
			continue
		}
		for _, f := range strings.Fields(line) {
			mac, err := net.ParseMAC(f)
			if err != nil {
				continue
			}
			who := l.NodeByMAC(mac)
			if who == "" {
				who = mac.String()
			}
			seen[who] = true
		}
	}
	var who []string
	for w := range seen {
		who = append(who, w)
	}
	sort.Strings(who)
	return who, nil
}

// OpenHerald returns the Herald that InstallHerald started earlier in l
// (possibly in another program, with l from Open): its controller and
// speaker Pods are found in the API by label (the lab's Pods of component
// controller and speaker in HeraldNamespace), their processes by the Pods'
// names, and the install method and release by the Pods' labels
// (app.kubernetes.io/instance is set by the chart only).
func (l *Lab) OpenHerald(ctx context.Context) (*Herald, error) {
	cl, err := client.New(l.RESTConfig(), client.Options{Scheme: Scheme()})
	if err != nil {
		return nil, err
	}
	h := &Herald{lab: l, client: cl, spkPods: map[string]*corev1.Pod{}, binDir: filepath.Join(l.StateDir(), "bin"),
		ctlDeploy: ControllerDeployment, spkDS: SpeakerDaemonSet,
		opts: InstallOptions{Method: InstallKubectl, Manifests: DefaultManifests, Chart: DefaultChart, Release: DefaultRelease,
			ControllerNode: NodeName(1), Timeout: 90 * time.Second}}
	pods, err := l.Client().CoreV1().Pods(HeraldNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: ManagedByLabel + "=" + ManagedByValue + "," + componentLabel + " in (controller,speaker)"})
	if err != nil {
		return nil, fmt.Errorf("open herald: %w", err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		if r := p.Labels["app.kubernetes.io/instance"]; r != "" {
			h.opts.Method, h.opts.Release = InstallHelm, r
		}
		owner := ""
		if len(p.OwnerReferences) > 0 {
			owner = p.OwnerReferences[0].Name
		}
		switch p.Labels[componentLabel] {
		case "speaker":
			h.spkPods[p.Spec.NodeName] = p
			h.opts.SpeakerNodes = append(h.opts.SpeakerNodes, p.Spec.NodeName)
			if owner != "" {
				h.spkDS = owner
			}
		case "controller":
			// Prefer the one whose process runs.
			if h.ctlPod == nil || l.Process(p.Name) != nil {
				h.ctlPod = p
				h.opts.ControllerNode = p.Spec.NodeName
				if owner != "" {
					h.ctlDeploy = owner
				}
			}
		}
	}
	sort.Strings(h.opts.SpeakerNodes)
	return h, nil
}

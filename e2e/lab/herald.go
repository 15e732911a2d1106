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
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/poll"
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

// Namespace returns the namespace Herald runs in (InstallOptions.Namespace,
// HeraldNamespace by default).
func (h *Herald) Namespace() string {
	if h.opts.Namespace == "" {
		return HeraldNamespace
	}
	return h.opts.Namespace
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
		p, err := h.lab.CreateDeploymentPod(ctx, h.Namespace(), h.ctlDeploy, h.opts.ControllerNode)
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
		ObjectMeta: metav1.ObjectMeta{Name: "lab-readiness-probe", Namespace: h.Namespace()},
		Spec:       v1beta1.IPAddressPoolSpec{Addresses: []string{"not-an-address"}},
	}
	_, err := poll.Wait(ctx, h.opts.Timeout, "", func() error {
		if p := h.Controller(); p == nil || !p.Alive() {
			return poll.Stop(fmt.Errorf("the controller process is not running (log %s)",
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
	}, labEvery)
	if err != nil {
		return fmt.Errorf("controller not ready: %w", err)
	}
	return nil
}

// WaitConfigValid waits until ConfigurationState name ("controller" or
// "speaker-<node>") reports Valid, and returns its error summary when it
// reports Invalid for longer than the timeout.
func (h *Herald) WaitConfigValid(ctx context.Context, name string) error {
	_, err := poll.Wait(ctx, h.opts.Timeout, "", func() error {
		var cs v1beta1.ConfigurationState
		if err := h.client.Get(ctx, client.ObjectKey{Namespace: h.Namespace(), Name: name}, &cs); err != nil {
			return fmt.Errorf("ConfigurationState %s: %w", name, err)
		}
		if cs.Status.Result != v1beta1.ConfigurationResultValid {
			return fmt.Errorf("ConfigurationState %s: result %q: %s", name, cs.Status.Result, cs.Status.ErrorSummary)
		}
		return nil
	}, labEvery)
	if err != nil {
		return fmt.Errorf("configuration not valid: %w", err)
	}
	return nil
}

// StartSpeaker runs node's speaker from its Pod (created by InstallHerald)
// and waits until its /readyz answers 200 inside the node's namespace.
func (h *Herald) StartSpeaker(ctx context.Context, node string) error {
	if err := h.runSpeakerPod(ctx, node); err != nil {
		return err
	}
	return h.WaitSpeakerReady(ctx, node)
}

// runSpeakerPod starts node's speaker process from its Pod (binary from
// the lab's binary directory, the Pod's args, env and volumes).
func (h *Herald) runSpeakerPod(ctx context.Context, node string) error {
	h.mu.Lock()
	pod := h.spkPods[node]
	h.mu.Unlock()
	if pod == nil {
		return fmt.Errorf("start speaker: no speaker pod on node %q", node)
	}
	if _, err := h.lab.StartPod(ctx, pod, speakerContainer, filepath.Join(h.binDir, "speaker")); err != nil {
		return fmt.Errorf("start speaker %s: %w", node, err)
	}
	return nil
}

// WaitSpeakerReady waits until node's speaker answers /readyz on
// 127.0.0.1:17472 of the node's namespace with 200.
func (h *Herald) WaitSpeakerReady(ctx context.Context, node string) error {
	n, ok := h.lab.Node(node)
	if !ok {
		return fmt.Errorf("speaker %s: no such lab node", node)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", healthPort)
	_, err := poll.Wait(ctx, h.opts.Timeout, "", func() error {
		if p := h.Speaker(node); p == nil || !p.Alive() {
			return poll.Stop(fmt.Errorf("the speaker process on %s is not running (log %s)",
				node, filepath.Join(h.lab.StateDir(), h.SpeakerProcessName(node)+".log")))
		}
		out, err := h.lab.Exec(ctx, n.Namespace, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "2", url)
		if err != nil || strings.TrimSpace(out) != "200" {
			return fmt.Errorf("readyz: %q %v", strings.TrimSpace(out), err)
		}
		return nil
	}, labEvery)
	if err != nil {
		return fmt.Errorf("speaker %s not ready: %w", node, err)
	}
	return nil
}

// StopSpeaker stops node's speaker gracefully (SIGTERM, as the kubelet on
// Pod deletion; SIGKILL after the Pod's terminationGracePeriodSeconds) and
// waits until it is gone. The Pod object is left as it is.
func (h *Herald) StopSpeaker(node string) error {
	p := h.Speaker(node)
	if p == nil {
		return fmt.Errorf("stop speaker %s: not running", node)
	}
	err := p.Stop(h.SpeakerGracePeriod(node))
	// Forget it (StopProcess finds it dead and only updates the records).
	return errors.Join(err, h.lab.StopProcess(h.SpeakerProcessName(node)))
}

// SpeakerGracePeriod is the terminationGracePeriodSeconds of node's speaker
// Pod (from the installed DaemonSet's template), or Kubernetes' default of
// 30 s when unset.
func (h *Herald) SpeakerGracePeriod(node string) time.Duration {
	h.mu.Lock()
	pod := h.spkPods[node]
	h.mu.Unlock()
	if pod == nil || pod.Spec.TerminationGracePeriodSeconds == nil {
		return 30 * time.Second
	}
	return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
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

// RestartControllerIfExited does what the kubelet does for the
// controller's Pod (restartPolicy Always) when its process has ended on
// its own: a crash, or "leader election lost" when an overloaded API
// server let its lease lapse (the controller exits then, as in a
// cluster). It starts the controller again from the same Pod and waits
// until it is ready (StartController). It reports whether it did; a
// running controller, or none started, is left alone.
func (h *Herald) RestartControllerIfExited(ctx context.Context) (bool, error) {
	p := h.Controller()
	if p == nil || p.Alive() {
		return false, nil
	}
	// Forget the ended process (StopProcess finds it dead and only
	// updates the records), then start the container again.
	if err := h.lab.StopProcess(h.ControllerProcessName()); err != nil {
		return false, fmt.Errorf("restart controller: %w", err)
	}
	return true, h.StartController(ctx)
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
	_, err := poll.Wait(ctx, h.opts.Timeout, "", func() error {
		var err error
		ips, err = h.ServiceIPs(ctx, namespace, name)
		if err != nil {
			return err
		}
		if len(ips) < n {
			return fmt.Errorf("service %s/%s has %d of %d addresses %v", namespace, name, len(ips), n, ips)
		}
		return nil
	}, labEvery)
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
	err := h.client.List(ctx, &l, client.InNamespace(h.Namespace()), client.MatchingLabels{
		v1beta1.LabelServiceName: name, v1beta1.LabelServiceNamespace: namespace,
	})
	return l.Items, err
}

// BGPStatuses returns the ServiceBGPStatus objects of Service
// namespace/name: the nodes that say they advertise it over BGP.
func (h *Herald) BGPStatuses(ctx context.Context, namespace, name string) ([]v1beta1.ServiceBGPStatus, error) {
	var l v1beta1.ServiceBGPStatusList
	err := h.client.List(ctx, &l, client.InNamespace(h.Namespace()), client.MatchingLabels{
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
	out, err = h.lab.Kubectl(ctx, "-n", h.Namespace(), "get", "servicel2statuses,servicebgpstatuses", "-o",
		"custom-columns=KIND:.kind,NAME:.metadata.name,SERVICE:.status.serviceName,NS:.status.serviceNamespace,NODE:.status.node,IFACES:.status.interfaces[*].name,PEERS:.status.peers")
	section("speakers: announcements", out, err)
	out, err = h.lab.Kubectl(ctx, "-n", h.Namespace(), "get", "configurationstates")
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

// AddSpeaker creates node's speaker Pod from the DaemonSet's template (a
// DaemonSet rolled onto the nodes one at a time, e.g. during a migration
// from MetalLB), runs it and waits until it is ready.
func (h *Herald) AddSpeaker(ctx context.Context, node string) error {
	h.mu.Lock()
	pod := h.spkPods[node]
	h.mu.Unlock()
	if pod == nil {
		p, err := h.lab.CreateDaemonSetPod(ctx, h.Namespace(), h.spkDS, node)
		if err != nil {
			return fmt.Errorf("add speaker %s: %w", node, err)
		}
		h.mu.Lock()
		h.spkPods[node] = p
		h.mu.Unlock()
	}
	return h.StartSpeaker(ctx, node)
}

// AddSpeakers is AddSpeaker for every node in nodes, concurrency at a
// time (0 or 1: one after the other). It returns the errors of all that
// failed; the others keep running.
func (h *Herald) AddSpeakers(ctx context.Context, nodes []string, concurrency int) error {
	return h.eachNode(ctx, nodes, concurrency, h.AddSpeaker)
}

// startSpeakers is StartSpeaker for every node in nodes, concurrency at a
// time.
func (h *Herald) startSpeakers(ctx context.Context, nodes []string, concurrency int) error {
	return h.eachNode(ctx, nodes, concurrency, h.StartSpeaker)
}

func (h *Herald) eachNode(ctx context.Context, nodes []string, concurrency int, fn func(context.Context, string) error) error {
	if concurrency <= 1 {
		for _, n := range nodes {
			if err := fn(ctx, n); err != nil {
				return err
			}
		}
		return nil
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	sem := make(chan struct{}, concurrency)
	for _, n := range nodes {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := fn(ctx, n); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// RemoveSpeaker stops node's speaker as StopSpeaker does and deletes its
// Pod (the node leaves the DaemonSet).
func (h *Herald) RemoveSpeaker(ctx context.Context, node string) error {
	var errs []error
	if h.Speaker(node) != nil {
		errs = append(errs, h.StopSpeaker(node))
	}
	h.mu.Lock()
	pod := h.spkPods[node]
	delete(h.spkPods, node)
	h.mu.Unlock()
	if pod != nil {
		err := h.lab.Client().CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

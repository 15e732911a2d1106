package lab

// Running the real MetalLB in the lab, for the migration test (e2e
// TestMigration, make bench-migration): MetalLB's controller and speaker
// built from their Go module (hack/metallb-assets.sh into bin/metallb),
// installed from MetalLB's own manifests of the same version
// (bin/metallb/metallb-native.yaml: CRDs, RBAC, webhook, Deployment
// "controller", DaemonSet "speaker" in metallb-system) and run as lab
// processes from those templates, as Herald's are (see herald.go). The
// speaker runs in MetalLB's native BGP mode (no FRR of its own).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/k8s/scheme"
	"github.com/herald-lb/herald/internal/poll"
)

// Names of MetalLB's objects in its native manifests.
const (
	MetalLBNamespace         = "metallb-system"
	MetalLBController        = "controller"
	MetalLBSpeaker           = "speaker"
	MetalLBWebhookService    = "metallb-webhook-service"
	MetalLBWebhookConfig     = "metallb-webhook-configuration"
	MetalLBWebhookCertSecret = "metallb-webhook-cert"
	// MetalLBMemberlistSecret is the Secret MetalLB's controller creates
	// (key "secretkey") and its speakers read.
	MetalLBMemberlistSecret = "memberlist"
	// MetalLBSpeakerLabels is METALLB_ML_LABELS of MetalLB's speakers: the
	// selector of the Pods that form the memberlist group.
	MetalLBSpeakerLabels = "app=metallb,component=speaker"
)

// MetalLBBinDir returns the directory holding MetalLB's controller,
// speaker and metallb-native.yaml: $HERALD_LAB_BIN_DIR/metallb when
// HERALD_LAB_BIN_DIR is set (make test, make e2e), else bin/metallb at the
// module root. When a file is missing it runs hack/metallb-assets.sh, which
// builds them into bin/metallb (a few minutes when cold).
func MetalLBBinDir(ctx context.Context) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "bin", "metallb")
	if d := os.Getenv(BinDirEnv); d != "" {
		dir = filepath.Join(d, "metallb")
	}
	complete := func() bool {
		for _, f := range []string{"controller", "speaker", "metallb-native.yaml"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				return false
			}
		}
		return true
	}
	if complete() {
		return dir, nil
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "metallb-assets.sh"))
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("hack/metallb-assets.sh: %w\n%s", err, out)
	}
	dir = filepath.Join(root, "bin", "metallb")
	if !complete() {
		return "", fmt.Errorf("hack/metallb-assets.sh left %s incomplete", dir)
	}
	return dir, nil
}

// MetalLB is MetalLB installed in a lab: its controller process and one
// speaker process per node, each playing its Pod. Its methods are safe for
// concurrent use.
type MetalLB struct {
	lab    *Lab
	binDir string
	client client.Client
	mu     sync.Mutex
	ctlPod *corev1.Pod
	// spkPods are the speaker Pods by node.
	spkPods map[string]*corev1.Pod
}

// InstallMetalLB applies MetalLB's native manifests (server-side, forcing
// conflicts: on a rollback the CRDs were last written by Herald's install),
// registers the lab's Node objects if missing, starts MetalLB's controller
// (it creates the memberlist Secret and its webhook certificate; the lab
// copies the certificate into the Pod's volume as the kubelet would) and
// waits until its webhook refuses an invalid IPAddressPool, then starts a
// speaker on each of nodes (nil: every node) and waits until each answers
// /readyz.
func (l *Lab) InstallMetalLB(ctx context.Context, nodes []string) (*MetalLB, error) {
	bin, err := MetalLBBinDir(ctx)
	if err != nil {
		return nil, fmt.Errorf("install metallb: %w", err)
	}
	sch, err := scheme.New()
	if err != nil {
		return nil, err
	}
	cl, err := client.New(l.RESTConfig(), client.Options{Scheme: sch})
	if err != nil {
		return nil, fmt.Errorf("install metallb: %w", err)
	}
	m := &MetalLB{lab: l, binDir: bin, client: cl, spkPods: map[string]*corev1.Pod{}}
	if err := m.ApplyManifests(ctx); err != nil {
		return m, err
	}
	list, err := l.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return m, fmt.Errorf("install metallb: %w", err)
	}
	if len(list.Items) < len(l.Nodes) {
		if err := l.RegisterNodes(ctx, nil); err != nil {
			return m, fmt.Errorf("install metallb: %w", err)
		}
	}
	if err := m.StartController(ctx); err != nil {
		return m, err
	}
	if nodes == nil {
		for _, n := range l.Nodes {
			nodes = append(nodes, n.Name)
		}
	}
	for _, n := range nodes {
		if err := m.StartSpeaker(ctx, n); err != nil {
			return m, err
		}
	}
	return m, nil
}

// ApplyManifests applies metallb-native.yaml with `kubectl apply
// --server-side --force-conflicts` (what a rollback does: MetalLB's CRDs,
// whose BGPPeer conversion webhook points at MetalLB's webhook Service,
// replace Herald's).
func (m *MetalLB) ApplyManifests(ctx context.Context) error {
	f := filepath.Join(m.binDir, "metallb-native.yaml")
	if _, err := m.lab.Kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-f", f); err != nil {
		return fmt.Errorf("apply %s: %w", f, err)
	}
	return nil
}

// Client returns a controller-runtime client for the lab's API server that
// knows the metallb.io types.
func (m *MetalLB) Client() client.Client { return m.client }

// ControllerProcessName is the lab process name of MetalLB's controller.
func (m *MetalLB) ControllerProcessName() string {
	return TemplatePodName(MetalLBController, NodeName(1))
}

// SpeakerProcessName is the lab process name of node's MetalLB speaker.
func (m *MetalLB) SpeakerProcessName(node string) string {
	return TemplatePodName(MetalLBSpeaker, node)
}

// StartController creates the controller Pod from the Deployment's template
// (if it has none), points the webhook Service at it, runs it, copies the
// webhook certificate its rotator writes into the Pod's volume (the
// rotator waits for that, as for the kubelet) and waits until MetalLB's
// webhook refuses an invalid IPAddressPool.
func (m *MetalLB) StartController(ctx context.Context) error {
	m.mu.Lock()
	pod := m.ctlPod
	m.mu.Unlock()
	if pod == nil {
		p, err := m.lab.CreateDeploymentPod(ctx, MetalLBNamespace, MetalLBController, NodeName(1))
		if err != nil {
			return fmt.Errorf("start metallb controller: %w", err)
		}
		pod = withCertDirArg(withNamespaceEnv(p))
		m.mu.Lock()
		m.ctlPod = pod
		m.mu.Unlock()
	}
	if err := m.lab.SetPodEndpoints(ctx, MetalLBNamespace, MetalLBWebhookService, []*corev1.Pod{pod}); err != nil {
		return fmt.Errorf("start metallb controller: %w", err)
	}
	if _, err := m.lab.StartPod(ctx, pod, MetalLBController, filepath.Join(m.binDir, "controller")); err != nil {
		return fmt.Errorf("start metallb controller: %w", err)
	}
	_, err := poll.Wait(ctx, 90*time.Second, "", func() error {
		if p := m.lab.Process(m.ControllerProcessName()); p == nil || !p.Alive() {
			return poll.Stop(fmt.Errorf("the metallb controller is not running (log %s)", m.logPath(m.ControllerProcessName())))
		}
		s, err := m.lab.Client().CoreV1().Secrets(MetalLBNamespace).Get(ctx, MetalLBWebhookCertSecret, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(s.Data["tls.crt"]) == 0 {
			return errors.New("webhook certificate not written yet")
		}
		return nil
	}, labEvery)
	if err != nil {
		return fmt.Errorf("metallb controller: %w", err)
	}
	if err := m.lab.SyncPodSecrets(ctx, pod, MetalLBController); err != nil {
		return fmt.Errorf("metallb controller: %w", err)
	}
	bad := &v1beta1.IPAddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: "lab-readiness-probe", Namespace: MetalLBNamespace},
		Spec:       v1beta1.IPAddressPoolSpec{Addresses: []string{"not-an-address"}},
	}
	_, err = poll.Wait(ctx, 90*time.Second, "", func() error {
		if p := m.lab.Process(m.ControllerProcessName()); p == nil || !p.Alive() {
			return poll.Stop(fmt.Errorf("the metallb controller is not running (log %s)", m.logPath(m.ControllerProcessName())))
		}
		// The rotator may write the certificate again (CA first): keep the
		// Pod's copy current until the webhook answers.
		_ = m.lab.SyncPodSecrets(ctx, pod, MetalLBController)
		err := m.client.Create(ctx, bad.DeepCopy(), client.DryRunAll)
		switch {
		case err == nil:
			return errors.New("the API server accepted an invalid IPAddressPool: MetalLB's webhook is not answering")
		case !strings.Contains(err.Error(), "denied the request"):
			return fmt.Errorf("webhook not answering yet: %w", err)
		}
		return nil
	}, labEvery)
	if err != nil {
		return fmt.Errorf("metallb controller not ready: %w", err)
	}
	return nil
}

// StopController stops MetalLB's controller (SIGTERM) and deletes its Pod
// (as scaling the Deployment to 0 does). The Deployment stays: it owns the
// memberlist Secret, which a real cluster's garbage collector deletes with
// it.
func (m *MetalLB) StopController(ctx context.Context) error {
	m.mu.Lock()
	pod := m.ctlPod
	m.ctlPod = nil
	m.mu.Unlock()
	var errs []error
	if m.lab.Process(m.ControllerProcessName()) != nil {
		errs = append(errs, m.lab.StopProcess(m.ControllerProcessName()))
	}
	if pod != nil {
		errs = append(errs, m.deletePod(ctx, pod.Name))
	}
	return errors.Join(errs...)
}

// StartSpeaker creates node's speaker Pod from the DaemonSet's template (if
// it has none), runs it and waits until it answers /readyz.
func (m *MetalLB) StartSpeaker(ctx context.Context, node string) error {
	n, ok := m.lab.Node(node)
	if !ok {
		return fmt.Errorf("start metallb speaker: no lab node %q", node)
	}
	m.mu.Lock()
	pod := m.spkPods[node]
	m.mu.Unlock()
	if pod == nil {
		p, err := m.lab.CreateDaemonSetPod(ctx, MetalLBNamespace, MetalLBSpeaker, node)
		if err != nil {
			return fmt.Errorf("start metallb speaker: %w", err)
		}
		pod = withNamespaceEnv(p)
		m.mu.Lock()
		m.spkPods[node] = pod
		m.mu.Unlock()
	}
	if _, err := m.lab.StartPod(ctx, pod, MetalLBSpeaker, filepath.Join(m.binDir, "speaker")); err != nil {
		return fmt.Errorf("start metallb speaker %s: %w", node, err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", healthPort)
	_, err := poll.Wait(ctx, 90*time.Second, "", func() error {
		if p := m.lab.Process(m.SpeakerProcessName(node)); p == nil || !p.Alive() {
			return poll.Stop(fmt.Errorf("the metallb speaker on %s is not running (log %s)", node, m.logPath(m.SpeakerProcessName(node))))
		}
		out, err := m.lab.Exec(ctx, n.Namespace, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "2", url)
		if err != nil || strings.TrimSpace(out) != "200" {
			return fmt.Errorf("readyz: %q %v", strings.TrimSpace(out), err)
		}
		return nil
	}, labEvery)
	if err != nil {
		return fmt.Errorf("metallb speaker %s not ready: %w", node, err)
	}
	return nil
}

// StopSpeaker stops node's MetalLB speaker as the kubelet does when its Pod
// is deleted (SIGTERM, SIGKILL after terminationGracePeriodSeconds, 2 s in
// MetalLB's manifests) and deletes the Pod (so the other speakers' member
// list, which follows the Pods, drops it).
func (m *MetalLB) StopSpeaker(ctx context.Context, node string) error {
	m.mu.Lock()
	pod := m.spkPods[node]
	delete(m.spkPods, node)
	m.mu.Unlock()
	if pod == nil {
		return fmt.Errorf("stop metallb speaker %s: no pod", node)
	}
	grace := 30 * time.Second
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	var errs []error
	if p := m.lab.Process(pod.Name); p != nil {
		errs = append(errs, p.Stop(grace), m.lab.StopProcess(pod.Name))
	}
	errs = append(errs, m.deletePod(ctx, pod.Name))
	return errors.Join(errs...)
}

// SpeakerNodes returns the nodes running a MetalLB speaker, sorted.
func (m *MetalLB) SpeakerNodes() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ns []string
	for n := range m.spkPods {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

func (m *MetalLB) deletePod(ctx context.Context, name string) error {
	err := m.lab.Client().CoreV1().Pods(MetalLBNamespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func (m *MetalLB) logPath(process string) string {
	return filepath.Join(m.lab.StateDir(), process+".log")
}

// Logs returns the last lines (at most lines each) of MetalLB's
// controller's and speakers' logs, for test failure reports.
func (m *MetalLB) Logs(lines int) string {
	names := []string{m.ControllerProcessName()}
	for _, n := range m.lab.Nodes {
		names = append(names, m.SpeakerProcessName(n.Name))
	}
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "--- %s.log (tail)\n%s\n", n, tailFile(m.logPath(n), lines))
	}
	return b.String()
}

// withNamespaceEnv returns a copy of pod whose containers get
// METALLB_NAMESPACE=<pod namespace> (lab scaffolding: MetalLB reads its
// namespace from the service account volume's namespace file, which the lab
// has no kubelet to mount; METALLB_NAMESPACE is what MetalLB reads first).
// Only the lab's copy changes, not the Pod in the API.
func withNamespaceEnv(pod *corev1.Pod) *corev1.Pod {
	p := pod.DeepCopy()
	for i := range p.Spec.Containers {
		c := &p.Spec.Containers[i]
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "METALLB_NAMESPACE" }) {
			c.Env = append(c.Env, corev1.EnvVar{Name: "METALLB_NAMESPACE", Value: p.Namespace})
		}
	}
	return p
}

// withCertDirArg returns a copy of MetalLB's controller Pod whose
// container gets --cert-dir=<the mount path of its webhook certificate
// volume> (lab scaffolding: the default, /tmp/k8s-webhook-server/serving-certs,
// is where the manifests mount the volume; made explicit, the lab rewrites
// it to the volume's directory, as it does for every mount path in the
// arguments and environment).
func withCertDirArg(pod *corev1.Pod) *corev1.Pod {
	p := pod.DeepCopy()
	for i := range p.Spec.Containers {
		c := &p.Spec.Containers[i]
		for _, vm := range c.VolumeMounts {
			if vm.Name == "cert" && !slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--cert-dir") }) {
				c.Args = append(c.Args, "--cert-dir="+vm.MountPath)
				// The webhook server itself reads controller-runtime's
				// default, $TMPDIR/k8s-webhook-server/serving-certs: TMPDIR
				// is the volume's directory two levels up.
				c.Env = append(c.Env, corev1.EnvVar{Name: "TMPDIR", Value: vm.MountPath + "/../.."})
			}
		}
	}
	return p
}

// CreateDaemonSetPod creates the Pod of DaemonSet namespace/name on lab
// node node (see CreateDaemonSetPods), for a DaemonSet that is rolled onto
// the nodes one at a time.
func (l *Lab) CreateDaemonSetPod(ctx context.Context, namespace, name, node string) (*corev1.Pod, error) {
	ds, err := l.Client().AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("daemonset %s/%s: %w", namespace, name, err)
	}
	n, ok := l.Node(node)
	if !ok {
		return nil, fmt.Errorf("daemonset pod: no lab node %q", node)
	}
	owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: ptr.To(true)}
	return l.createTemplatePod(ctx, namespace, TemplatePodName(ds.Name, n.Name), ds.Spec.Template, owner, n)
}

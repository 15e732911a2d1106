package lab

// Getting Herald into the lab: its objects into the API server (kubectl
// apply of the manifests, or the Helm chart, see helm.go), then the same
// code for both: the workloads found by label, the controller and speakers
// run from their templates, the Services that select them given endpoints.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/internal/k8s/scheme"
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
	// HelmValues are chart values files (helm -f), relative to the module
	// root unless absolute, given before HelmSet. Only for InstallHelm.
	HelmValues []string
	// AdoptMetalLBCRDs runs hack/adopt-metallb-crds.sh <Release>
	// <Namespace> before the chart is installed, as
	// docs/migrating-from-metallb.md says for CRDs a MetalLB install
	// created. Only for InstallHelm.
	AdoptMetalLBCRDs bool
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
	// SpeakerArgs are appended to the speaker container's args in the
	// installed DaemonSet before its Pods are created (what `kubectl edit`
	// of the DaemonSet would do), e.g. memberlist timings
	// "--ml-probe-interval=100ms".
	SpeakerArgs []string
	// StartConcurrency is how many speakers InstallHerald starts at once
	// (each waits for its /readyz); 0 or 1 starts them one after the other.
	StartConcurrency int
	// Namespace is the namespace the manifests put Herald in; empty means
	// HeraldNamespace. "metallb-system" with Manifests
	// "manifests/herald-metallb-system.yaml" is the in-place migration
	// (docs/migrating-from-metallb.md); with InstallHelm, the release's
	// namespace.
	Namespace string
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
	if opts.Namespace == "" {
		opts.Namespace = HeraldNamespace
	}
	sch, err := scheme.New()
	if err != nil {
		return nil, err
	}
	cl, err := client.New(l.RESTConfig(), client.Options{Scheme: sch})
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
	if err := l.recordHeraldBinDir(h.binDir); err != nil {
		return nil, fmt.Errorf("install herald: %w", err)
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
	if err := h.appendSpeakerArgs(ctx, opts.SpeakerArgs); err != nil {
		return h, fmt.Errorf("install herald: %w", err)
	}
	if err := h.StartController(ctx); err != nil {
		return h, err
	}
	pods, err := l.CreateDaemonSetPods(ctx, h.Namespace(), h.spkDS)
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
			// Grace 0: the lab has no kubelet to finish a graceful deletion.
			_ = l.Client().CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
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
	var nodes []string
	for _, p := range run {
		nodes = append(nodes, p.Spec.NodeName)
	}
	if err := h.startSpeakers(ctx, nodes, opts.StartConcurrency); err != nil {
		return h, err
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

// appendSpeakerArgs appends args to the speaker container's args in the
// speaker DaemonSet's template (nothing when args is empty).
func (h *Herald) appendSpeakerArgs(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return nil
	}
	dsc := h.lab.Client().AppsV1().DaemonSets(h.Namespace())
	ds, err := dsc.Get(ctx, h.spkDS, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("speaker args: %w", err)
	}
	found := false
	for i, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == speakerContainer {
			ds.Spec.Template.Spec.Containers[i].Args = append(c.Args, args...)
			found = true
		}
	}
	if !found {
		return fmt.Errorf("speaker args: daemonset %s has no container %q", h.spkDS, speakerContainer)
	}
	if _, err := dsc.Update(ctx, ds, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("speaker args: %w", err)
	}
	return nil
}

// applyManifests applies opts.Manifests (a kustomize directory or a YAML
// file) with `kubectl apply --server-side`.
func (h *Herald) applyManifests(ctx context.Context) error {
	manifests, err := fromRoot(h.opts.Manifests)
	if err != nil {
		return err
	}
	st, err := os.Stat(manifests)
	if err != nil {
		return err
	}
	if st.IsDir() {
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
	ds, err := apps.Deployments(h.Namespace()).List(ctx, metav1.ListOptions{LabelSelector: sel("controller")})
	if err != nil {
		return fmt.Errorf("find the controller deployment: %w", err)
	}
	if len(ds.Items) != 1 {
		return fmt.Errorf("find the controller deployment: %d deployments in %s match %s, want 1", len(ds.Items), h.Namespace(), sel("controller"))
	}
	dss, err := apps.DaemonSets(h.Namespace()).List(ctx, metav1.ListOptions{LabelSelector: sel("speaker")})
	if err != nil {
		return fmt.Errorf("find the speaker daemonset: %w", err)
	}
	if len(dss.Items) != 1 {
		return fmt.Errorf("find the speaker daemonset: %d daemonsets in %s match %s, want 1", len(dss.Items), h.Namespace(), sel("speaker"))
	}
	h.ctlDeploy, h.spkDS = ds.Items[0].Name, dss.Items[0].Name
	return nil
}

// pointServices gives every Service in HeraldNamespace whose selector
// matches some of pods (the webhook and metrics Services, whatever their
// names) those pods as endpoints (lab scaffolding: plays the EndpointSlice
// controller).
func (h *Herald) pointServices(ctx context.Context, pods []*corev1.Pod) error {
	svcs, err := h.lab.Client().CoreV1().Services(h.Namespace()).List(ctx, metav1.ListOptions{})
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
		if err := h.lab.SetPodEndpoints(ctx, h.Namespace(), svc.Name, match); err != nil && !apierrors.IsNotFound(err) {
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

// OpenHerald returns the Herald that InstallHerald started earlier in l
// (possibly in another program, with l from Open): its controller and
// speaker Pods are found in the API by label (the lab's Pods of component
// controller and speaker in HeraldNamespace), their processes by the Pods'
// names, and the install method and release by the Pods' labels
// (app.kubernetes.io/instance is set by the chart only). Its binaries are
// those InstallHerald ran (recorded in the lab's state), else
// StateDir/bin.
func (l *Lab) OpenHerald(ctx context.Context) (*Herald, error) {
	sch, err := scheme.New()
	if err != nil {
		return nil, err
	}
	cl, err := client.New(l.RESTConfig(), client.Options{Scheme: sch})
	if err != nil {
		return nil, err
	}
	h := &Herald{lab: l, client: cl, spkPods: map[string]*corev1.Pod{}, binDir: filepath.Join(l.StateDir(), "bin"),
		ctlDeploy: ControllerDeployment, spkDS: SpeakerDaemonSet,
		opts: InstallOptions{Method: InstallKubectl, Manifests: DefaultManifests, Chart: DefaultChart, Release: DefaultRelease,
			ControllerNode: NodeName(1), Timeout: 90 * time.Second}}
	pods, err := l.Client().CoreV1().Pods(h.Namespace()).List(ctx, metav1.ListOptions{
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
	l.mu.Lock()
	if d := l.st.HeraldBinDir; d != "" {
		h.binDir = d
	}
	l.mu.Unlock()
	return h, nil
}

// recordHeraldBinDir writes dir, made absolute, into the lab's state as
// the binaries Herald runs from (see OpenHerald).
func (l *Lab) recordHeraldBinDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.st.HeraldBinDir = abs
	return l.st.save()
}

// ReleaseOptions returns the InstallOptions that install Herald from a
// release directory (make release; docs/install.md, "Installing a
// release") alone, as a user who downloaded it would: herald.yaml with
// InstallKubectl, the packaged chart herald-X.Y.Z.tgz with InstallHelm, and
// the release's own binaries for this machine (herald-controller-linux-ARCH,
// herald-speaker-linux-ARCH), linked into binDir (created) with helm from
// helmDir when it has one. Every file it uses must match the release's
// SHA256SUMS, as docs/install.md asks a user to check first. The error
// names what the directory lacks or which file does not match.
func ReleaseOptions(dir string, method InstallMethod, binDir, helmDir string) (InstallOptions, error) {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return InstallOptions{}, fmt.Errorf("release directory %s: not a directory (make release VERSION=vX.Y.Z writes one)", dir)
	}
	sums, err := readSHA256SUMS(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		return InstallOptions{}, fmt.Errorf("release %s: %w", dir, err)
	}
	opts := InstallOptions{Method: method, BinDir: binDir}
	switch method {
	case InstallKubectl:
		opts.Manifests = filepath.Join(dir, "herald.yaml")
		if _, err := os.Stat(opts.Manifests); err != nil {
			return opts, fmt.Errorf("release %s: %w", dir, err)
		}
	case InstallHelm:
		charts, _ := filepath.Glob(filepath.Join(dir, "herald-*.tgz"))
		if len(charts) != 1 {
			return opts, fmt.Errorf("release %s: want one packaged chart herald-X.Y.Z.tgz, found %d", dir, len(charts))
		}
		opts.Chart = charts[0]
	default:
		return opts, fmt.Errorf("install method %q: want %s or %s", method, InstallKubectl, InstallHelm)
	}
	used := []string{filepath.Base(opts.Manifests), filepath.Base(opts.Chart)}
	for _, b := range []string{"controller", "speaker"} {
		used = append(used, "herald-"+b+"-linux-"+runtime.GOARCH)
	}
	for _, name := range used {
		if name == "." {
			continue
		}
		if err := checkSHA256(filepath.Join(dir, name), sums); err != nil {
			return opts, fmt.Errorf("release %s: %w", dir, err)
		}
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return opts, err
	}
	for _, b := range []string{"controller", "speaker"} {
		src := filepath.Join(dir, "herald-"+b+"-linux-"+runtime.GOARCH)
		if _, err := os.Stat(src); err != nil {
			return opts, fmt.Errorf("release %s: no %s binary for this machine: %w", dir, b, err)
		}
		dst := filepath.Join(binDir, b)
		_ = os.Remove(dst)
		if err := os.Symlink(src, dst); err != nil {
			return opts, err
		}
	}
	if h := filepath.Join(helmDir, "helm"); helmDir != "" {
		if _, err := os.Stat(h); err == nil {
			dst := filepath.Join(binDir, "helm")
			_ = os.Remove(dst)
			if err := os.Symlink(h, dst); err != nil {
				return opts, err
			}
		}
	}
	return opts, nil
}

// readSHA256SUMS reads a sha256sum listing ("<hex>  <name>" per line) into
// name -> digest.
func readSHA256SUMS(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sums := map[string]string{}
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != sha256.Size*2 {
			return nil, fmt.Errorf("%s line %d: want \"<sha256>  <file>\", got %q", path, i+1, line)
		}
		sums[strings.TrimPrefix(name, "*")] = sum
	}
	return sums, nil
}

// checkSHA256 reports an error unless the file's SHA-256 is its entry in sums.
func checkSHA256(path string, sums map[string]string) error {
	name := filepath.Base(path)
	want, ok := sums[name]
	if !ok {
		return fmt.Errorf("%s is not in SHA256SUMS", name)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("%s: SHA-256 %s, SHA256SUMS says %s (a changed or damaged file)", name, got, want)
	}
	return nil
}

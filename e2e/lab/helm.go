package lab

// Installing Herald with its Helm chart (InstallOptions.Method InstallHelm):
// helm, built from its Go module (hack/tools/helm), runs inside the control
// namespace against the lab's API server, as a user runs it against a
// cluster. Everything after that (running the workloads the chart created,
// endpoints, samples, waits) is shared with the kubectl method.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

const (
	// DefaultChart is the chart InstallHerald installs with InstallHelm,
	// relative to the module root.
	DefaultChart = "charts/herald"
	// DefaultRelease is the release name InstallHerald uses with
	// InstallHelm: the chart then names its objects as the manifests do
	// (herald-controller, herald-speaker, herald-webhook-service, ...).
	DefaultRelease = "herald"
)

// helmBinary returns the helm to run: "helm" in opts.BinDir or
// $HERALD_LAB_BIN_DIR when it is there (`make tools` puts it next to the
// controller and speaker in bin/), else one built from hack/tools/helm into
// StateDir/bin as `make tools` builds it. It fails when neither works.
func (h *Herald) helmBinary(ctx context.Context) (string, error) {
	h.mu.Lock()
	bin := h.helmBin
	h.mu.Unlock()
	if bin != "" {
		return bin, nil
	}
	dir := h.opts.BinDir
	if dir == "" {
		dir = os.Getenv(BinDirEnv)
	}
	if dir != "" {
		if p, err := filepath.Abs(filepath.Join(dir, "helm")); err == nil {
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				bin = p
			}
		}
	}
	if bin == "" {
		root, err := moduleRoot()
		if err != nil {
			return "", fmt.Errorf("helm: %w", err)
		}
		out := filepath.Join(h.lab.StateDir(), "bin", "helm")
		cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "helm.sh/helm/v3/cmd/helm")
		cmd.Dir = filepath.Join(root, "hack", "tools", "helm")
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("helm: no helm in the bin directory %q, and building it from hack/tools/helm failed "+
				"(`make tools` builds bin/helm): %w\n%s", dir, err, b)
		}
		bin = out
	}
	h.mu.Lock()
	h.helmBin = bin
	h.mu.Unlock()
	return bin, nil
}

// Helm runs helm with args against the lab's API server (inside the control
// namespace, with the lab's admin kubeconfig, and Helm's cache,
// configuration and data under StateDir/helm) and returns its combined
// output; a non-zero exit is an error that includes the output.
func (h *Herald) Helm(ctx context.Context, args ...string) (string, error) {
	bin, err := h.helmBinary(ctx)
	if err != nil {
		return "", err
	}
	home := filepath.Join(h.lab.StateDir(), "helm")
	argv := []string{"env",
		"HELM_CACHE_HOME=" + filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(home, "config"),
		"HELM_DATA_HOME=" + filepath.Join(home, "data"),
		bin, "--kubeconfig", h.lab.LabKubeconfig()}
	return run(ctx, h.lab.ControlNamespace(), append(argv, args...)...)
}

// Release returns the Helm release name, or "" when Herald was installed
// with kubectl.
func (h *Herald) Release() string {
	if h.opts.Method != InstallHelm {
		return ""
	}
	return h.opts.Release
}

// installChart installs opts.Chart as the chart's README says: the
// namespace created first and labelled for the "privileged" Pod Security
// level the speaker needs (as manifests/base/namespace.yaml labels it),
// then `helm upgrade --install <release> <chart> --namespace herald-system`
// with opts.HelmSet. Without --wait: there is no Deployment controller or
// kubelet to make the workloads ready; the lab plays them afterwards.
func (h *Herald) installChart(ctx context.Context) error {
	chart, err := fromRoot(h.opts.Chart)
	if err != nil {
		return err
	}
	if err := h.lab.EnsureNamespace(ctx, h.Namespace()); err != nil {
		return err
	}
	patch := []byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"privileged",` +
		`"pod-security.kubernetes.io/audit":"privileged","pod-security.kubernetes.io/warn":"privileged"}}}`)
	if _, err := h.lab.Client().CoreV1().Namespaces().Patch(ctx, h.Namespace(), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("label namespace %s: %w", h.Namespace(), err)
	}
	if h.opts.AdoptMetalLBCRDs {
		root, err := ModuleRoot()
		if err != nil {
			return err
		}
		k, err := KubectlPath()
		if err != nil {
			return err
		}
		if _, err := run(ctx, h.lab.ControlNamespace(), "env", "KUBECONFIG="+h.lab.LabKubeconfig(), "KUBECTL="+k,
			filepath.Join(root, "hack", "adopt-metallb-crds.sh"), h.opts.Release, h.Namespace()); err != nil {
			return fmt.Errorf("adopt MetalLB's CRDs: %w", err)
		}
	}
	args := []string{"upgrade", "--install", h.opts.Release, chart, "--namespace", h.Namespace()}
	for _, f := range h.opts.HelmValues {
		p, err := fromRoot(f)
		if err != nil {
			return err
		}
		args = append(args, "-f", p)
	}
	for _, s := range h.opts.HelmSet {
		args = append(args, "--set", s)
	}
	if _, err := h.Helm(ctx, args...); err != nil {
		return fmt.Errorf("helm install %s: %w", h.opts.Chart, err)
	}
	return nil
}

// UpgradeChart runs the install's `helm upgrade --install` again with the
// same options (after hack/adopt-metallb-crds.sh when AdoptMetalLBCRDs),
// e.g. once a rollback re-applied MetalLB's manifests over the CRDs. It
// starts nothing: StartController and AddSpeaker do.
func (h *Herald) UpgradeChart(ctx context.Context) error {
	if h.opts.Method != InstallHelm {
		return fmt.Errorf("upgrade herald: installed with %s, not helm", h.opts.Method)
	}
	return h.installChart(ctx)
}

// Uninstall removes a Helm install (InstallHelm) as a cluster sees `helm
// uninstall`: it runs `helm uninstall --wait`, then plays the garbage
// collector and the kubelets for what the release owned: each of Herald's
// lab Pods has its process stopped (SIGTERM) and its object deleted, and
// the EndpointSlices the lab made for Services that are gone are deleted.
// What the chart marks helm.sh/resource-policy: keep stays (the CRDs, so
// every pool and peer, and the webhook certificate Secret), as does what
// is not the release's (the namespace, objects Herald wrote at run time).
// The Herald is not usable afterwards; InstallHerald installs again.
func (h *Herald) Uninstall(ctx context.Context) error {
	if h.opts.Method != InstallHelm {
		return fmt.Errorf("uninstall herald: installed with %s; only a helm install can be uninstalled", h.opts.Method)
	}
	if _, err := h.Helm(ctx, "uninstall", h.opts.Release, "--namespace", h.Namespace(), "--wait", "--timeout", "2m"); err != nil {
		return fmt.Errorf("uninstall herald: %w", err)
	}
	h.mu.Lock()
	var pods []*corev1.Pod
	if h.ctlPod != nil {
		pods = append(pods, h.ctlPod)
	}
	for _, p := range h.spkPods {
		pods = append(pods, p)
	}
	h.ctlPod, h.spkPods = nil, map[string]*corev1.Pod{}
	h.mu.Unlock()
	var errs []error
	for _, p := range pods {
		if h.lab.Process(p.Name) != nil {
			if err := h.lab.StopProcess(p.Name); err != nil {
				errs = append(errs, err)
			}
		}
		// The kubelet has stopped it: no grace period left to wait for.
		err := h.lab.Client().CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete pod %s/%s: %w", p.Namespace, p.Name, err))
		}
	}
	slices, err := h.lab.Client().DiscoveryV1().EndpointSlices(h.Namespace()).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelManagedBy + "=" + ManagedByValue})
	if err != nil {
		errs = append(errs, err)
	} else {
		for _, s := range slices.Items {
			_, err := h.lab.Client().CoreV1().Services(h.Namespace()).Get(ctx, s.Labels[discoveryv1.LabelServiceName], metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				continue
			}
			if err := h.lab.Client().DiscoveryV1().EndpointSlices(h.Namespace()).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("uninstall herald: %w", err)
	}
	return nil
}

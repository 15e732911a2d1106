package lab

// Lab scaffolding: plays the DaemonSet and Deployment controllers and the
// kubelet for Herald's own workloads. The Pod objects exist in the API (so
// discovery by label, owner references and RBAC work as on a cluster); the
// containers run as lab processes with the args and env the Pod template
// gives them.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/herald-lb/herald/internal/poll"
)

// Apply runs `kubectl apply --server-side -f <file>` for each file (or
// directory) against the lab's API server, from the control namespace.
// podsDir is the directory under StateDir holding each Pod's files (its
// service account token, mounted Secrets, serving certificates).
const podsDir = "pods"

func (l *Lab) Apply(ctx context.Context, files ...string) (string, error) {
	args := []string{"apply", "--server-side", "--force-conflicts"}
	for _, f := range files {
		abs, err := filepath.Abs(f)
		if err != nil {
			return "", err
		}
		args = append(args, "-f", abs)
	}
	return l.Kubectl(ctx, args...)
}

// ApplyKustomize runs `kubectl apply --server-side -k dir` (e.g.
// manifests/base) against the lab's API server.
func (l *Lab) ApplyKustomize(ctx context.Context, dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	return l.Kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-k", abs)
}

// CreateDaemonSetPods creates one Pod per lab node from DaemonSet
// namespace/name's template (labels, serviceAccountName, containers,
// hostNetwork), owned by the DaemonSet, with a Running and Ready status and
// the node's addresses as pod IPs when hostNetwork is set (lab scaffolding:
// plays the DaemonSet controller and kubelet). Pods are named
// "<daemonset>-<node>".
func (l *Lab) CreateDaemonSetPods(ctx context.Context, namespace, name string) ([]*corev1.Pod, error) {
	ds, err := l.Client().AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("daemonset %s/%s: %w", namespace, name, err)
	}
	owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: ptr.To(true)}
	var pods []*corev1.Pod
	for _, n := range l.Nodes {
		p, err := l.createTemplatePod(ctx, namespace, TemplatePodName(ds.Name, n.Name), ds.Spec.Template, owner, n)
		if err != nil {
			return nil, err
		}
		pods = append(pods, p)
	}
	return pods, nil
}

// CreateDeploymentPod creates one Pod from Deployment namespace/name's
// template on lab node node, Running and Ready (lab scaffolding: plays the
// Deployment and ReplicaSet controllers, the scheduler and kubelet). The
// Pod is named "<deployment>-<node>". Without hostNetwork the pod has no
// network of its own here: [Lab.StartPod] runs it in the control namespace
// and its pod IP is 198.51.100.254.
func (l *Lab) CreateDeploymentPod(ctx context.Context, namespace, name, node string) (*corev1.Pod, error) {
	d, err := l.Client().AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("deployment %s/%s: %w", namespace, name, err)
	}
	n, ok := l.Node(node)
	if !ok {
		return nil, fmt.Errorf("deployment pod: no lab node %q", node)
	}
	owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID}
	return l.createTemplatePod(ctx, namespace, TemplatePodName(d.Name, n.Name), d.Spec.Template, owner, n)
}

func (l *Lab) createTemplatePod(ctx context.Context, namespace, name string, tmpl corev1.PodTemplateSpec, owner metav1.OwnerReference, n Node) (*corev1.Pod, error) {
	lbls := map[string]string{ManagedByLabel: ManagedByValue}
	for k, v := range tmpl.Labels {
		lbls[k] = v
	}
	spec := *tmpl.Spec.DeepCopy()
	spec.NodeName = n.Name
	spec.NodeSelector = nil
	spec.Affinity = nil
	pod, err := l.Client().CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: lbls,
			Annotations: tmpl.Annotations, OwnerReferences: []metav1.OwnerReference{owner}},
		Spec: spec,
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create pod %s/%s: %w", namespace, name, err)
	}
	return l.setPodRunning(ctx, pod, n, true)
}

// ContainerProcess turns container of pod into a lab process command line
// and environment, as the kubelet would run it: argv is binary followed by
// the container's command[1:] and args, with $(VAR) references expanded;
// env resolves value, fieldRef (metadata.name, metadata.namespace,
// metadata.uid, metadata.labels['k'], metadata.annotations['k'],
// spec.nodeName, spec.serviceAccountName, status.podIP, status.hostIP), and
// secretKeyRef / configMapKeyRef (read from the API). KUBECONFIG=kubeconfig
// is added, as the lab has no in-cluster service account mount.
//
// Volume mounts (emptyDir, secret, configMap, and the projected
// ServiceAccount token volume) are materialized under
// StateDir/pods/<pod>/<mountPath> once, at this call (the lab does not sync
// later changes as a kubelet would), and every occurrence of a mountPath in
// argv and env values is rewritten to that directory. A secret or configMap
// that does not exist yet is waited for (until ctx ends) unless optional.
func (l *Lab) ContainerProcess(ctx context.Context, pod *corev1.Pod, container, binary, kubeconfig string) (argv, env []string, err error) {
	var c *corev1.Container
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == container {
			c = &pod.Spec.Containers[i]
		}
	}
	if c == nil {
		return nil, nil, fmt.Errorf("pod %s/%s has no container %q", pod.Namespace, pod.Name, container)
	}
	mounts, err := l.materializeVolumes(ctx, pod, c)
	if err != nil {
		return nil, nil, err
	}
	vars := map[string]string{}
	for _, e := range c.Env {
		v, err := l.envValue(ctx, pod, e)
		if err != nil {
			return nil, nil, fmt.Errorf("pod %s/%s container %s env %s: %w", pod.Namespace, pod.Name, container, e.Name, err)
		}
		v = mounts.Replace(v)
		vars[e.Name] = v
		env = append(env, e.Name+"="+v)
	}
	env = append(env, "KUBECONFIG="+kubeconfig)
	argv = []string{binary}
	if len(c.Command) > 1 {
		argv = append(argv, c.Command[1:]...)
	}
	argv = append(argv, c.Args...)
	for i := 1; i < len(argv); i++ {
		argv[i] = mounts.Replace(expandVars(argv[i], vars))
	}
	return argv, env, nil
}

// materializeVolumes writes container c's volume mounts under
// StateDir/pods/<pod>/ and returns a replacer from mount paths to them
// (longest mount path first).
func (l *Lab) materializeVolumes(ctx context.Context, pod *corev1.Pod, c *corev1.Container) (*strings.Replacer, error) {
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}
	base := filepath.Join(l.cfg.StateDir, podsDir, pod.Name)
	ms := append([]corev1.VolumeMount(nil), c.VolumeMounts...)
	sort.Slice(ms, func(i, j int) bool { return len(ms[i].MountPath) > len(ms[j].MountPath) })
	var pairs []string
	for _, m := range ms {
		v, ok := vols[m.Name]
		if !ok {
			return nil, fmt.Errorf("pod %s/%s: volume mount %s: no volume of that name", pod.Namespace, pod.Name, m.Name)
		}
		dir := filepath.Join(base, filepath.Clean("/"+m.MountPath))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		files, err := l.volumeFiles(ctx, pod, v)
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s: volume %s: %w", pod.Namespace, pod.Name, v.Name, err)
		}
		if m.SubPath != "" {
			// A single file (or subdirectory) of the volume at the mount path.
			b, ok := files[m.SubPath]
			if !ok {
				return nil, fmt.Errorf("pod %s/%s: volume %s has no %s", pod.Namespace, pod.Name, v.Name, m.SubPath)
			}
			if err := os.Remove(dir); err != nil {
				return nil, err
			}
			if err := os.WriteFile(dir, b, 0o644); err != nil {
				return nil, err
			}
		} else {
			for name, b := range files {
				p := filepath.Join(dir, filepath.Clean("/"+name))
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					return nil, err
				}
				if err := os.WriteFile(p, b, 0o644); err != nil {
					return nil, err
				}
			}
		}
		pairs = append(pairs, m.MountPath, dir)
	}
	return strings.NewReplacer(pairs...), nil
}

// volumeFiles returns the files of an emptyDir (none), secret or configMap
// volume, waiting for a missing, non-optional object.
func (l *Lab) volumeFiles(ctx context.Context, pod *corev1.Pod, v corev1.Volume) (map[string][]byte, error) {
	files := map[string][]byte{}
	pick := func(data map[string][]byte, items []corev1.KeyToPath) {
		if len(items) == 0 {
			for k, b := range data {
				files[k] = b
			}
			return
		}
		for _, it := range items {
			if b, ok := data[it.Key]; ok {
				files[it.Path] = b
			}
		}
	}
	switch {
	case v.EmptyDir != nil:
		return files, nil
	case v.Projected != nil:
		// The ServiceAccount admission plugin's kube-api-access volume:
		// token, ca.crt and namespace, as on a cluster.
		for _, src := range v.Projected.Sources {
			switch {
			case src.ServiceAccountToken != nil:
				sa := pod.Spec.ServiceAccountName
				if sa == "" {
					sa = "default"
				}
				tr, err := l.Client().CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
					Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)},
				}, metav1.CreateOptions{})
				if err != nil {
					return nil, fmt.Errorf("token for %s/%s: %w", pod.Namespace, sa, err)
				}
				files[src.ServiceAccountToken.Path] = []byte(tr.Status.Token)
			case src.ConfigMap != nil && src.ConfigMap.Name == "kube-root-ca.crt":
				// kube-controller-manager would publish this ConfigMap.
				files["ca.crt"] = l.pki.caPEM
			case src.DownwardAPI != nil:
				for _, it := range src.DownwardAPI.Items {
					if it.FieldRef != nil && it.FieldRef.FieldPath == "metadata.namespace" {
						files[it.Path] = []byte(pod.Namespace)
					}
				}
			}
		}
		return files, nil
	case v.Secret != nil:
		optional := ptr.Deref(v.Secret.Optional, false)
		_, err := poll.Wait(ctx, 10*time.Minute, "", func() error {
			s, err := l.Client().CoreV1().Secrets(pod.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if apierrors.IsNotFound(err) && optional {
				return nil
			}
			if err != nil {
				return err
			}
			pick(s.Data, v.Secret.Items)
			return nil
		}, labEvery)
		return files, err
	case v.ConfigMap != nil:
		optional := ptr.Deref(v.ConfigMap.Optional, false)
		_, err := poll.Wait(ctx, 10*time.Minute, "", func() error {
			cm, err := l.Client().CoreV1().ConfigMaps(pod.Namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) && optional {
				return nil
			}
			if err != nil {
				return err
			}
			data := map[string][]byte{}
			for k, s := range cm.Data {
				data[k] = []byte(s)
			}
			for k, b := range cm.BinaryData {
				data[k] = b
			}
			pick(data, v.ConfigMap.Items)
			return nil
		}, labEvery)
		return files, err
	}
	return nil, fmt.Errorf("volume type not supported by the lab (emptyDir, secret, configMap and projected ServiceAccount tokens are)")
}

var varRefRE = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// expandVars replaces $(NAME) with vars[NAME] when defined (Kubernetes
// container args semantics; "$$(" escapes are rare enough to ignore).
func expandVars(s string, vars map[string]string) string {
	return varRefRE.ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := vars[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

func (l *Lab) envValue(ctx context.Context, pod *corev1.Pod, e corev1.EnvVar) (string, error) {
	if e.ValueFrom == nil {
		return e.Value, nil
	}
	switch vf := e.ValueFrom; {
	case vf.FieldRef != nil:
		p := vf.FieldRef.FieldPath
		switch {
		case p == "metadata.name":
			return pod.Name, nil
		case p == "metadata.namespace":
			return pod.Namespace, nil
		case p == "metadata.uid":
			return string(pod.UID), nil
		case p == "spec.nodeName":
			return pod.Spec.NodeName, nil
		case p == "spec.serviceAccountName":
			return pod.Spec.ServiceAccountName, nil
		case p == "status.podIP":
			return pod.Status.PodIP, nil
		case p == "status.hostIP":
			return pod.Status.HostIP, nil
		case strings.HasPrefix(p, "metadata.labels['"):
			return pod.Labels[strings.TrimSuffix(strings.TrimPrefix(p, "metadata.labels['"), "']")], nil
		case strings.HasPrefix(p, "metadata.annotations['"):
			return pod.Annotations[strings.TrimSuffix(strings.TrimPrefix(p, "metadata.annotations['"), "']")], nil
		}
		return "", fmt.Errorf("fieldRef %q not supported by the lab", p)
	case vf.SecretKeyRef != nil:
		s, err := l.Client().CoreV1().Secrets(pod.Namespace).Get(ctx, vf.SecretKeyRef.Name, metav1.GetOptions{})
		if err != nil {
			if ptr.Deref(vf.SecretKeyRef.Optional, false) {
				return "", nil
			}
			return "", err
		}
		return string(s.Data[vf.SecretKeyRef.Key]), nil
	case vf.ConfigMapKeyRef != nil:
		cm, err := l.Client().CoreV1().ConfigMaps(pod.Namespace).Get(ctx, vf.ConfigMapKeyRef.Name, metav1.GetOptions{})
		if err != nil {
			if ptr.Deref(vf.ConfigMapKeyRef.Optional, false) {
				return "", nil
			}
			return "", err
		}
		return cm.Data[vf.ConfigMapKeyRef.Key], nil
	case vf.ResourceFieldRef != nil:
		return "", nil // limits are not enforced in the lab
	}
	return "", fmt.Errorf("unsupported valueFrom")
}

// StartPod runs container of pod as a lab process named "<pod name>" (lab
// scaffolding: plays the kubelet): a hostNetwork pod in its node's
// namespace (spec.nodeName), any other pod in the control namespace (there
// is no pod network; that keeps e.g. the controller's ports apart from the
// speaker's on the same node). binary replaces the image's entrypoint; the process
// authenticates as the pod's ServiceAccount (a TokenRequest token), so the
// RBAC from Herald's manifests applies.
func (l *Lab) StartPod(ctx context.Context, pod *corev1.Pod, container, binary string) (*Process, error) {
	n, ok := l.Node(pod.Spec.NodeName)
	if !ok {
		return nil, fmt.Errorf("start pod %s/%s: node %q is not a lab node", pod.Namespace, pod.Name, pod.Spec.NodeName)
	}
	if _, err := os.Stat(binary); err != nil {
		return nil, fmt.Errorf("start pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	kc, err := l.ServiceAccountKubeconfig(ctx, pod.Namespace, sa)
	if err != nil {
		return nil, fmt.Errorf("start pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	argv, env, err := l.ContainerProcess(ctx, pod, container, binary, kc)
	if err != nil {
		return nil, err
	}
	ns := n.Namespace
	if !pod.Spec.HostNetwork {
		ns = l.ControlNamespace()
	}
	return l.Start(ns, pod.Name, argv, env)
}

// TemplatePodName returns the name CreateDaemonSetPods and
// CreateDeploymentPod give the pod of workload on node.
func TemplatePodName(workload, node string) string { return workload + "-" + node }

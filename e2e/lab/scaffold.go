package lab

// Lab scaffolding: plays kubelet and kube-controller-manager, which do not
// run in the lab. Nothing here is part of Herald; it only creates the
// objects a real cluster would have, so Herald sees a normal cluster.

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Labels the lab scaffolding puts on what it creates.
const (
	// ManagedByLabel marks objects made by the lab scaffolding.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedByValue is ManagedByLabel's value.
	ManagedByValue = "herald-lab"
	// ScaffoldImage is the image of scaffolding Pods, never pulled (no kubelet).
	ScaffoldImage = "herald-lab.invalid/scaffolding:none"
)

// EnsureNamespace creates Kubernetes namespace name and its "default"
// ServiceAccount (lab scaffolding: plays kube-controller-manager). Existing
// objects are kept.
func (l *Lab) EnsureNamespace(ctx context.Context, name string) error {
	_, err := l.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return l.EnsureServiceAccount(ctx, name, "default")
}

// EnsureServiceAccount creates ServiceAccount namespace/name unless it exists
// (lab scaffolding: plays kube-controller-manager's default accounts).
func (l *Lab) EnsureServiceAccount(ctx context.Context, namespace, name string) error {
	_, err := l.Client().CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create serviceaccount %s/%s: %w", namespace, name, err)
	}
	return nil
}

// RegisterNodes creates a Node object for every lab node (lab scaffolding:
// plays the kubelet's registration): labels kubernetes.io/hostname and
// kubernetes.io/os plus extra[node name], status InternalIP (IPv4 and
// IPv6), Hostname, and Ready=True. extra may be nil.
func (l *Lab) RegisterNodes(ctx context.Context, extra map[string]map[string]string) error {
	for _, n := range l.Nodes {
		labels := map[string]string{
			"kubernetes.io/hostname": n.Name,
			"kubernetes.io/os":       "linux",
			ManagedByLabel:           ManagedByValue,
		}
		for k, v := range extra[n.Name] {
			labels[k] = v
		}
		node, err := l.Client().CoreV1().Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: labels},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create node %s: %w", n.Name, err)
		}
		node.Status.Addresses = []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: n.IPv4.String()},
			{Type: corev1.NodeInternalIP, Address: n.IPv6.String()},
			{Type: corev1.NodeHostName, Address: n.Name},
		}
		node.Status.Conditions = []corev1.NodeCondition{readyCondition(true)}
		if _, err := l.Client().CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("set node %s status: %w", n.Name, err)
		}
	}
	return nil
}

func readyCondition(ready bool) corev1.NodeCondition {
	c := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "lab scaffolding", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}
	if !ready {
		c.Status, c.Reason = corev1.ConditionFalse, "KubeletNotReady"
	}
	return c
}

// SetNodeReady sets node name's Ready condition (lab scaffolding: plays
// the kubelet's heartbeat, or its loss).
func (l *Lab) SetNodeReady(ctx context.Context, name string, ready bool) error {
	node, err := l.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get node %s: %w", name, err)
	}
	conds := node.Status.Conditions[:0]
	for _, c := range node.Status.Conditions {
		if c.Type != corev1.NodeReady {
			conds = append(conds, c)
		}
	}
	node.Status.Conditions = append(conds, readyCondition(ready))
	if _, err := l.Client().CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("set node %s ready=%v: %w", name, ready, err)
	}
	return nil
}

// SpeakerPodLabels are the labels of Herald's speaker Pods (as the
// DaemonSet sets them); speakers discover each other by them.
var SpeakerPodLabels = map[string]string{
	"app.kubernetes.io/name":      "herald",
	"app.kubernetes.io/component": "speaker",
}

// SpeakerPodName returns the name of the scaffolding speaker Pod on node.
func SpeakerPodName(node string) string { return "herald-speaker-" + node }

// CreateSpeakerPods creates one speaker Pod object per lab node in
// namespace, with SpeakerPodLabels, spec.nodeName, hostNetwork and
// serviceAccountName, and a status as the kubelet would report it: phase
// Running, Ready, podIP(s) = the node's addresses (lab scaffolding: plays
// the DaemonSet controller and kubelet; the speakers themselves run as lab
// processes). The ServiceAccount must exist.
func (l *Lab) CreateSpeakerPods(ctx context.Context, namespace, serviceAccount string) ([]*corev1.Pod, error) {
	var pods []*corev1.Pod
	for _, n := range l.Nodes {
		labels := map[string]string{ManagedByLabel: ManagedByValue}
		for k, v := range SpeakerPodLabels {
			labels[k] = v
		}
		pod, err := l.Client().CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: SpeakerPodName(n.Name), Namespace: namespace, Labels: labels},
			Spec: corev1.PodSpec{
				NodeName:           n.Name,
				HostNetwork:        true,
				ServiceAccountName: serviceAccount,
				Containers:         []corev1.Container{{Name: "speaker", Image: ScaffoldImage}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("create speaker pod on %s: %w", n.Name, err)
		}
		if pod, err = l.setPodRunning(ctx, pod, n, true); err != nil {
			return nil, err
		}
		pods = append(pods, pod)
	}
	return pods, nil
}

// SetSpeakerPodReady flips the Ready condition of the speaker Pod on node.
func (l *Lab) SetSpeakerPodReady(ctx context.Context, namespace, node string, ready bool) error {
	n, ok := l.Node(node)
	if !ok {
		return fmt.Errorf("set speaker pod ready: no lab node %q", node)
	}
	pod, err := l.Client().CoreV1().Pods(namespace).Get(ctx, SpeakerPodName(node), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get speaker pod on %s: %w", node, err)
	}
	_, err = l.setPodRunning(ctx, pod, n, ready)
	return err
}

func (l *Lab) setPodRunning(ctx context.Context, pod *corev1.Pod, n Node, ready bool) (*corev1.Pod, error) {
	st := corev1.ConditionTrue
	if !ready {
		st = corev1.ConditionFalse
	}
	now := metav1.Now()
	podIPs := []corev1.PodIP{{IP: n.IPv4.String()}, {IP: n.IPv6.String()}}
	if !pod.Spec.HostNetwork {
		podIPs = []corev1.PodIP{{IP: APIServerAddr.String()}} // runs in the control namespace
	}
	pod.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    n.IPv4.String(),
		HostIPs:   []corev1.HostIP{{IP: n.IPv4.String()}, {IP: n.IPv6.String()}},
		PodIP:     podIPs[0].IP,
		PodIPs:    podIPs,
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: st, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: st, LastTransitionTime: now},
		},
	}
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Ready: ready, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	out, err := l.Client().CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("set pod %s/%s status: %w", pod.Namespace, pod.Name, err)
	}
	return out, nil
}

// Endpoint is one backend of a Service in [Lab.SetEndpoints]: a lab node
// (its backend answers on the node's addresses) and its conditions.
type Endpoint struct {
	Node  string
	Ready bool
	// Terminating marks an endpoint that is shutting down (serving = Ready).
	Terminating bool
}

// EndpointSliceName returns the name of the scaffolding slice of a Service
// for one family ("<svc>-lab-ipv4").
func EndpointSliceName(service string, fam discoveryv1.AddressType) string {
	if fam == discoveryv1.AddressTypeIPv6 {
		return service + "-lab-ipv6"
	}
	return service + "-lab-ipv4"
}

// SetEndpoints creates or replaces the EndpointSlices of Service
// namespace/service, one per IP family of the Service, listing eps with
// each node's address of that family, nodeName and conditions, and the
// Service's ports (lab scaffolding: plays the EndpointSlice controller).
// An empty eps leaves slices with no endpoints.
func (l *Lab) SetEndpoints(ctx context.Context, namespace, service string, eps []Endpoint) error {
	svc, err := l.Client().CoreV1().Services(namespace).Get(ctx, service, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("set endpoints of %s/%s: %w", namespace, service, err)
	}
	fams := svc.Spec.IPFamilies
	if len(fams) == 0 {
		fams = []corev1.IPFamily{corev1.IPv4Protocol}
	}
	var ports []discoveryv1.EndpointPort
	for _, p := range svc.Spec.Ports {
		port := int32(BackendPort)
		if p.TargetPort.IntValue() != 0 {
			port = int32(p.TargetPort.IntValue())
		}
		ports = append(ports, discoveryv1.EndpointPort{Name: ptr.To(p.Name), Protocol: ptr.To(p.Protocol), Port: ptr.To(port)})
	}
	for _, fam := range fams {
		at := discoveryv1.AddressTypeIPv4
		if fam == corev1.IPv6Protocol {
			at = discoveryv1.AddressTypeIPv6
		}
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name: EndpointSliceName(service, at), Namespace: namespace,
				Labels: map[string]string{
					discoveryv1.LabelServiceName: service,
					discoveryv1.LabelManagedBy:   ManagedByValue,
				},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID}},
			},
			AddressType: at,
			Ports:       ports,
			Endpoints:   []discoveryv1.Endpoint{},
		}
		for _, ep := range eps {
			n, ok := l.Node(ep.Node)
			if !ok {
				return fmt.Errorf("set endpoints of %s/%s: no lab node %q", namespace, service, ep.Node)
			}
			a := n.IPv4
			if at == discoveryv1.AddressTypeIPv6 {
				a = n.IPv6
			}
			slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
				Addresses: []string{a.String()},
				NodeName:  ptr.To(n.Name),
				Conditions: discoveryv1.EndpointConditions{
					Ready: ptr.To(ep.Ready && !ep.Terminating), Serving: ptr.To(ep.Ready), Terminating: ptr.To(ep.Terminating),
				},
			})
		}
		if err := l.putSlice(ctx, slice); err != nil {
			return err
		}
	}
	return nil
}

// SetPodEndpoints creates or replaces the EndpointSlices of Service
// namespace/service with pods as endpoints (lab scaffolding: plays the
// EndpointSlice controller for Services that select Pods, e.g. Herald's
// webhook Service, which the API server calls at an endpoint because it
// runs with --enable-aggregator-routing). Each pod contributes its pod IPs
// of the slice's family; ready follows its Ready condition; named target
// ports are resolved from the pod's container ports.
func (l *Lab) SetPodEndpoints(ctx context.Context, namespace, service string, pods []*corev1.Pod) error {
	svc, err := l.Client().CoreV1().Services(namespace).Get(ctx, service, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("set endpoints of %s/%s: %w", namespace, service, err)
	}
	for _, at := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6} {
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name: EndpointSliceName(service, at), Namespace: namespace,
				Labels: map[string]string{
					discoveryv1.LabelServiceName: service,
					discoveryv1.LabelManagedBy:   ManagedByValue,
				},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID}},
			},
			AddressType: at,
			Endpoints:   []discoveryv1.Endpoint{},
		}
		for _, sp := range svc.Spec.Ports {
			port := sp.TargetPort.IntValue()
			if sp.TargetPort.Type == intstr.String {
				port = 0
				for _, p := range pods {
					if cp := containerPort(p, sp.TargetPort.StrVal); cp != 0 {
						port = cp
						break
					}
				}
			} else if port == 0 {
				port = int(sp.Port)
			}
			if port == 0 {
				return fmt.Errorf("set endpoints of %s/%s: port %q: no pod has container port %q", namespace, service, sp.Name, sp.TargetPort.StrVal)
			}
			slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{Name: ptr.To(sp.Name), Protocol: ptr.To(sp.Protocol), Port: ptr.To(int32(port))})
		}
		for _, p := range pods {
			ready := podReady(p)
			for _, ip := range p.Status.PodIPs {
				a, err := netip.ParseAddr(ip.IP)
				if err != nil || a.Is6() != (at == discoveryv1.AddressTypeIPv6) {
					continue
				}
				slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
					Addresses:  []string{a.String()},
					NodeName:   ptr.To(p.Spec.NodeName),
					TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
					Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(ready), Terminating: ptr.To(false)},
				})
			}
		}
		if err := l.putSlice(ctx, slice); err != nil {
			return err
		}
	}
	return nil
}

func containerPort(p *corev1.Pod, name string) int {
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == name {
				return int(cp.ContainerPort)
			}
		}
	}
	return 0
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// putSlice creates slice or replaces the existing one of that name.
func (l *Lab) putSlice(ctx context.Context, slice *discoveryv1.EndpointSlice) error {
	api := l.Client().DiscoveryV1().EndpointSlices(slice.Namespace)
	cur, err := api.Get(ctx, slice.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = api.Create(ctx, slice, metav1.CreateOptions{})
	case err == nil:
		slice.ResourceVersion = cur.ResourceVersion
		_, err = api.Update(ctx, slice, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("set endpointslice %s/%s: %w", slice.Namespace, slice.Name, err)
	}
	return nil
}

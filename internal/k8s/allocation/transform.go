package allocation

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/herald-lb/herald/internal/annotations"
	"github.com/herald-lb/herald/internal/k8s/intern"
)

// The cache transforms below project the cluster-wide objects the
// controller watches (Services, Namespaces, Nodes) to the fields the
// allocation loop and config.Build read, before the informer stores them:
// at 10,000 Services the cache is most of the controller's memory, and
// managed fields, last-applied annotations, node images and conditions are
// never read. Each is idempotent (the informer may transform an object it
// stored before) and leaves tombstones (DeletedFinalStateUnknown) and other
// types as they are. transform_test.go fails when a field that is read is
// dropped.

// project wraps a projection of *T as an informer transform.
func project[T any](f func(*T) *T) toolscache.TransformFunc {
	return func(obj any) (any, error) {
		if t, ok := obj.(*T); ok && t != nil {
			return f(t), nil
		}
		return obj, nil
	}
}

// identity returns the ObjectMeta fields every projection keeps: name,
// namespace, UID, resourceVersion (the status patches' precondition),
// generation (a condition's observedGeneration), creation and deletion
// timestamps, and labels. Managed fields, owner references, finalizers and
// annotations are left out (callers add the annotations they read).
func identity(m *metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		Generation: m.Generation, CreationTimestamp: m.CreationTimestamp, DeletionTimestamp: m.DeletionTimestamp,
		Labels: m.Labels,
	}
}

// isMetalLBAnnotation reports whether an annotation key is one MetalLB's
// and Herald's Service annotations use (metallb.io/ and the deprecated
// metallb.universe.tf/): the only Service annotations the controller reads
// (internal/annotations).
func isMetalLBAnnotation(k string) bool {
	return strings.HasPrefix(k, "metallb.io/") || strings.HasPrefix(k, "metallb.universe.tf/")
}

// projectService keeps what the allocation loop reads from a Service
// (svcreq.Handled, RequestFor, IngressIPs, the condition and the pool
// annotation): identity and labels, the metallb.io/ and
// metallb.universe.tf/ annotations; spec type, loadBalancerClass,
// clusterIP(s), ipFamilies, ipFamilyPolicy, loadBalancerIP,
// externalTrafficPolicy, the selector when that policy is Local (the
// sharing backend key), each port's protocol and number; the whole ingress
// list and the controller's own condition (herald.io/IPAllocated).
//
// A Service whose only such annotation is the pool annotation the
// controller writes (most Services it addressed) gets its pool's shared
// annotation map (poolAnnotations).
func projectService(s *corev1.Service) *corev1.Service {
	out := &corev1.Service{TypeMeta: s.TypeMeta, ObjectMeta: identity(&s.ObjectMeta)}
	for k, v := range s.Annotations {
		if isMetalLBAnnotation(k) {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	if pool, ok := out.Annotations[annotations.AllocatedFromPool]; ok && len(out.Annotations) == 1 {
		out.Annotations = poolAnnotations.Single(annotations.AllocatedFromPool, pool, out.Annotations)
	}
	sp := &s.Spec
	out.Spec = corev1.ServiceSpec{
		Type: sp.Type, LoadBalancerClass: sp.LoadBalancerClass,
		ClusterIP: sp.ClusterIP, ClusterIPs: sp.ClusterIPs,
		IPFamilies: sp.IPFamilies, IPFamilyPolicy: sp.IPFamilyPolicy,
		LoadBalancerIP: sp.LoadBalancerIP, ExternalTrafficPolicy: sp.ExternalTrafficPolicy,
	}
	if sp.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		out.Spec.Selector = sp.Selector
	}
	if len(sp.Ports) > 0 {
		out.Spec.Ports = make([]corev1.ServicePort, len(sp.Ports))
		for i, p := range sp.Ports {
			out.Spec.Ports[i] = corev1.ServicePort{Protocol: p.Protocol, Port: p.Port}
		}
	}
	out.Status.LoadBalancer.Ingress = s.Status.LoadBalancer.Ingress
	for _, c := range s.Status.Conditions {
		if c.Type == ConditionType {
			out.Status.Conditions = []metav1.Condition{c}
			break
		}
	}
	return out
}

// poolAnnotations are the projections' shared annotation maps holding only
// the pool annotation, one per pool (at most 256: pools are few, but the
// value is anyone's to write who may write the Service): a map of one
// entry takes ~340 bytes, once per Service otherwise.
var poolAnnotations = intern.NewMaps(256)

// projectNamespace keeps a Namespace's identity and labels
// (serviceAllocation namespaceSelectors) and nothing else.
func projectNamespace(n *corev1.Namespace) *corev1.Namespace {
	return &corev1.Namespace{TypeMeta: n.TypeMeta, ObjectMeta: identity(&n.ObjectMeta)}
}

// projectNode keeps a Node's identity and labels (config.Build: BGPPeer
// node selectors) and drops its spec and status (images, conditions,
// addresses: most of a Node's size, changed by every heartbeat).
func projectNode(n *corev1.Node) *corev1.Node {
	return &corev1.Node{TypeMeta: n.TypeMeta, ObjectMeta: identity(&n.ObjectMeta)}
}

package speaker

import (
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/announce"
)

// The speaker's informers keep, of the kinds it holds many of (Services,
// EndpointSlices, Nodes, speaker Pods), only the fields the decisions and
// the glue read: each transform below builds a new object from an
// allow-list, so a field Kubernetes adds later costs nothing either. With
// 10,000 Services the untransformed objects were most of the speaker's heap
// (docs/performance.md, "Speaker memory"). What each keeps is what these
// read (the tests compare their results on full and transformed objects):
//
//   - Service: kept as a serviceRecord (below), not as a Service: its
//     identity (for the cache and events: name, namespace, UID,
//     resourceVersion), its labels and announce.ServiceFromK8s of it
//     (type, externalTrafficPolicy, loadBalancerClass, the allow-shared-ip
//     annotations, labels, ingress IPs), which the decisions, the
//     ingress-IP index (indexServiceIP), the shared-address views, the
//     balanced election, mapService, mayAnnounce and serviceChanged read.
//   - EndpointSlice: kept as a sliceRecord (below), not as an
//     EndpointSlice: its identity, its Service's name (the
//     kubernetes.io/service-name label, for the Service index and
//     mapSlice) and announce.EndpointsFromSlices of it.
//   - Node: announce.NodeFromK8s (labels, the Ready and NetworkUnavailable
//     conditions' status, the out-of-service taint), announce.NodeIPv4 and
//     nodeChanged (addresses), config.Build (name, labels).
//   - Pod: speakerAddrs (deletionTimestamp, phase, podIP).
//   - Secret: config.Build (type; data of basic-auth Secrets only).
//   - ServiceL2Status, ServiceBGPStatus (this node's only): the status
//     writer's watch, statusKeyOf (name, resourceVersion, the status's
//     node and Service, and the metallb.io/node, service-name and
//     service-namespace labels only when they differ from those: see
//     slimStatus). The rest of the status is left out: the writer compares
//     resourceVersions with its record and reads the API server when they
//     differ. No reader may take these objects' labels for the stored
//     ones: the kinds are read from the API server (UncachedObjects).
//
// The configuration objects are only stripped of managed fields. Nothing writes a cached object of these kinds
// back (an Update would drop what the transform left out): the speaker
// never writes Services, EndpointSlices, Nodes or Pods. The records are
// read through their informers' indexers only, and readers get the stored
// records: they must not change them.

// serviceRecord is what the speaker's cache keeps of a Service: the
// Service transform's result, in place of the object. It holds the
// Service's identity (name, namespace, UID, resourceVersion, generation,
// deletionTimestamp: what the cache keys and events use; name and
// namespace are substrings of svc.Key, one string for the three), its
// labels (the same map as svc.Labels) and svc, announce.ServiceFromK8s of
// the Service (type, externalTrafficPolicy, loadBalancerClass, the
// allow-shared-ip annotation, labels and ingress IPs): a decision, the
// ingress-IP index, the shared-address views and serviceChanged read it
// without converting again, and the cache holds no ServiceSpec, ingress
// struct or annotation map per Service. It is read only through the
// informer's indexer (Controller.service, servicesWithIP, allServices):
// controller-runtime's cache reader cannot get or list it as Services,
// and nothing in the speaker does.
type serviceRecord struct {
	metav1.ObjectMeta
	// svc is announce.ServiceFromK8s of the Service, its slices clipped
	// and its sharing key interned. Read only: readers get the stored
	// record, not a copy.
	svc announce.Service
}

// GetObjectKind: a record carries no type meta (nothing reads it).
func (r *serviceRecord) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject copies the record (runtime.Object).
func (r *serviceRecord) DeepCopyObject() runtime.Object {
	c := &serviceRecord{svc: r.svc}
	r.DeepCopyInto(&c.ObjectMeta)
	c.svc.Labels = c.Labels // a copy of the same map
	c.svc.IPs = slices.Clone(r.svc.IPs)
	c.svc.InvalidIPs = slices.Clone(r.svc.InvalidIPs)
	return c
}

// eventObject is the object the Service's events are about: the Service's
// kind and identity only (an event recorder reads no more of it). Records
// are not in the scheme, so events cannot name them.
func (r *serviceRecord) eventObject() *corev1.Service {
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{Kind: "Service", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: r.Name, Namespace: r.Namespace, UID: r.UID,
			ResourceVersion: r.ResourceVersion},
	}
}

// transformService is the Service transform (see above): a Service
// becomes its *serviceRecord.
func transformService(obj any) (any, error) {
	s, ok := obj.(*corev1.Service)
	if !ok {
		return obj, nil // a tombstone, or a record already
	}
	svc := announce.ServiceFromK8s(s)
	svc.IPs = slices.Clip(svc.IPs)
	svc.InvalidIPs = slices.Clip(svc.InvalidIPs)
	if svc.SharingKey != "" {
		svc.SharingKey = *sharingKeys.intern(&svc.SharingKey)
	}
	r := &serviceRecord{ObjectMeta: slimMeta(&s.ObjectMeta, s.Labels), svc: svc}
	// One string for the key, the namespace and the name.
	r.Namespace, r.Name = svc.Key[:len(s.Namespace)], svc.Key[len(s.Namespace)+1:]
	return r, nil
}

// sharingKeys are the interned allow-shared-ip keys: many Services share
// one.
var sharingKeys = &interner{vals: map[string]*string{}}

// sliceRecord is what the speaker's cache keeps of an EndpointSlice: the
// EndpointSlice transform's result, in place of the object. It holds the
// slice's identity (name, namespace, UID, resourceVersion: what the cache
// keys and events use), the name of its Service (the
// kubernetes.io/service-name label, "" for a slice of none) and its
// endpoints already converted for the decision
// (announce.EndpointsFromSlices), so a decision reads them without
// converting again and the cache holds no discoveryv1.Endpoint, targetRef
// or label map per slice. It is read only through the informer's indexer
// (Controller.endpoints, by indexSliceService): controller-runtime's cache
// reader cannot list it as EndpointSlices, and nothing in the speaker does.
type sliceRecord struct {
	metav1.ObjectMeta
	// service is the Service's name, in the slice's namespace.
	service string
	// endpoints are announce.EndpointsFromSlices of the slice, node names
	// interned. Read only.
	endpoints []announce.Endpoint
}

// GetObjectKind: a record carries no type meta (nothing reads it).
func (r *sliceRecord) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject copies the record (runtime.Object).
func (r *sliceRecord) DeepCopyObject() runtime.Object {
	c := &sliceRecord{service: r.service, endpoints: slices.Clone(r.endpoints)}
	r.DeepCopyInto(&c.ObjectMeta)
	return c
}

// transformEndpointSlice is the EndpointSlice transform (see above): an
// EndpointSlice becomes its *sliceRecord.
func transformEndpointSlice(obj any) (any, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil // a tombstone, or a record already
	}
	eps := announce.EndpointsFromSlices([]discoveryv1.EndpointSlice{*s})
	for i := range eps {
		if eps[i].NodeName != "" {
			eps[i].NodeName = *nodeNames.intern(&eps[i].NodeName)
		}
	}
	return &sliceRecord{
		ObjectMeta: slimMeta(&s.ObjectMeta, nil),
		service:    s.Labels[discoveryv1.LabelServiceName],
		endpoints:  slices.Clip(eps),
	}, nil
}

// transformNode is the Node transform (see above).
func transformNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	out := &corev1.Node{
		TypeMeta:   n.TypeMeta,
		ObjectMeta: slimMeta(&n.ObjectMeta, n.Labels),
	}
	for _, t := range n.Spec.Taints {
		if t.Key == announce.OutOfServiceTaint {
			out.Spec.Taints = append(out.Spec.Taints, t)
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady || c.Type == corev1.NodeNetworkUnavailable {
			out.Status.Conditions = append(out.Status.Conditions, corev1.NodeCondition{Type: c.Type, Status: c.Status})
		}
	}
	if len(n.Status.Addresses) > 0 {
		out.Status.Addresses = append([]corev1.NodeAddress(nil), n.Status.Addresses...)
	}
	return out, nil
}

// transformPod is the speaker Pod transform (see above).
func transformPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{
		TypeMeta:   p.TypeMeta,
		ObjectMeta: slimMeta(&p.ObjectMeta, p.Labels),
		Status:     corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP},
	}, nil
}

// transformSecret keeps, of the Secrets in Herald's namespace, the data of
// kubernetes.io/basic-auth ones only: config.Build reads a BGPPeer's
// password from such a Secret and refuses a Secret of another type by its
// type alone, so the data of the others (Helm release records, the
// webhook's certificates, the memberlist key, which the speaker reads from
// its file) is never read.
func transformSecret(obj any) (any, error) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil
	}
	out := &corev1.Secret{TypeMeta: s.TypeMeta, ObjectMeta: slimMeta(&s.ObjectMeta, s.Labels), Type: s.Type}
	if s.Type == corev1.SecretTypeBasicAuth {
		out.Data, out.StringData = s.Data, s.StringData
	}
	return out, nil
}

// transformStatus is the ServiceL2Status and ServiceBGPStatus transform (see
// above).
func transformStatus(obj any) (any, error) {
	switch o := obj.(type) {
	case *v1beta1.ServiceL2Status:
		out := &v1beta1.ServiceL2Status{TypeMeta: o.TypeMeta}
		out.ObjectMeta, out.Status.ServiceStatusCommon = slimStatus(&o.ObjectMeta, o.Status.ServiceStatusCommon)
		return out, nil
	case *v1beta1.ServiceBGPStatus:
		out := &v1beta1.ServiceBGPStatus{TypeMeta: o.TypeMeta}
		out.ObjectMeta, out.Status.ServiceStatusCommon = slimStatus(&o.ObjectMeta, o.Status.ServiceStatusCommon)
		return out, nil
	}
	return obj, nil
}

// statusLabelKeys are the labels transformStatus keeps.
var statusLabelKeys = [...]string{v1beta1.LabelNode, v1beta1.LabelServiceName, v1beta1.LabelServiceNamespace}

// slimStatus keeps a status object's name, namespace (one shared string:
// Herald's), resourceVersion, node, Service and statusLabelKeys. The labels
// are left out (nil) when they are those the status names (node,
// serviceName, serviceNamespace), as the speaker writes them: a labels map
// costs more than the rest of the object, and statusKeyOf reads the
// Service from the status then.
func slimStatus(m *metav1.ObjectMeta, c v1beta1.ServiceStatusCommon) (metav1.ObjectMeta, v1beta1.ServiceStatusCommon) {
	c.Node = *nodeNames.intern(&c.Node)
	out := metav1.ObjectMeta{Name: m.Name, Namespace: *nodeNames.intern(&m.Namespace), ResourceVersion: m.ResourceVersion}
	if labelsOfStatus(m.Labels, c) {
		return out, c
	}
	for _, k := range statusLabelKeys {
		v, ok := m.Labels[k]
		if !ok {
			continue
		}
		if out.Labels == nil {
			out.Labels = make(map[string]string, len(statusLabelKeys))
		}
		if k == v1beta1.LabelNode {
			v = *nodeNames.intern(&v)
		}
		out.Labels[k] = v
	}
	return out, c
}

// labelsOfStatus reports whether labels has each of statusLabelKeys with
// the value c names.
func labelsOfStatus(labels map[string]string, c v1beta1.ServiceStatusCommon) bool {
	node, ok1 := labels[v1beta1.LabelNode]
	name, ok2 := labels[v1beta1.LabelServiceName]
	ns, ok3 := labels[v1beta1.LabelServiceNamespace]
	return ok1 && ok2 && ok3 && node == c.Node && name == c.ServiceName && ns == c.ServiceNamespace
}

// slimMeta keeps the identity of an object (name, namespace, UID,
// resourceVersion, generation: what the cache, events and object
// references use), its deletion timestamp and the given labels;
// annotations, managed fields, owner references, finalizers and the rest
// are left out.
func slimMeta(m *metav1.ObjectMeta, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		Generation: m.Generation, DeletionTimestamp: m.DeletionTimestamp,
		Labels: labels,
	}
}

// interner hands out one shared *string per distinct value, for the node
// names that every endpoint repeats (nodeNames; also Herald's namespace
// and the node label of the cached status objects), and for the
// allow-shared-ip keys of the Service records (sharingKeys). Each holds at
// most maxInterned values (then returns copies), so unbounded input cannot
// grow it without bound.
type interner struct {
	mu   sync.Mutex
	vals map[string]*string
}

const maxInterned = 10000

var nodeNames = &interner{vals: map[string]*string{}}

func (in *interner) intern(s *string) *string {
	if s == nil {
		return nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if p, ok := in.vals[*s]; ok {
		return p
	}
	v := strings.Clone(*s)
	if len(in.vals) < maxInterned {
		in.vals[v] = &v
	}
	return &v
}

var (
	_ toolscache.TransformFunc = transformService
	_ toolscache.TransformFunc = transformEndpointSlice
	_ toolscache.TransformFunc = transformNode
	_ toolscache.TransformFunc = transformPod
	_ toolscache.TransformFunc = transformSecret
	_ toolscache.TransformFunc = transformStatus
)

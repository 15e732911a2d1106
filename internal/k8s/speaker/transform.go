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
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
//   - ServiceL2Status, ServiceBGPStatus (this node's only): kept as a
//     statusRef (below), not as the object: what the status writer's
//     watch reads (eventHandler, statusKeyOf): name, namespace,
//     resourceVersion and the Service its metallb.io/service-namespace and
//     service-name labels name. The status and the other labels are left
//     out: the writer compares resourceVersions with its record and reads
//     the API server when they differ, and the kinds are read from the
//     API server (UncachedObjects), never from the cache.
//
// The configuration objects are only stripped of managed fields. Nothing writes a cached object of these kinds
// back (an Update would drop what the transform left out): the speaker
// never writes Services, EndpointSlices, Nodes or Pods. The records are
// read through their informers' indexers only, and readers get the stored
// records: they must not change them.

// serviceRecord is what the speaker's cache keeps of a Service: the
// Service transform's result, in place of the object. It holds the
// Service's identity (recordMeta: name, namespace, UID, resourceVersion:
// what the cache keys and events use; name and namespace are substrings of
// svc.Key, one string for the three) and svc, announce.ServiceFromK8s of
// the Service (type, externalTrafficPolicy, loadBalancerClass, the
// allow-shared-ip annotation, ingress IPs, and the labels as a labelSet):
// a decision, the ingress-IP index, the shared-address views and
// serviceChanged read it without converting again, and the cache holds no
// ServiceSpec, ingress struct, label or annotation map per Service. It is
// read only through the informer's indexer (Controller.service,
// servicesWithIP, allServices): controller-runtime's cache reader cannot
// get or list it as Services, and nothing in the speaker does.
type serviceRecord struct {
	recordMeta
	// svc is announce.ServiceFromK8s of the Service, its labels a
	// labelSet, its slices clipped and its sharing key interned. Read
	// only: readers get the stored record, not a copy.
	svc announce.Service
}

// GetObjectKind: a record carries no type meta (nothing reads it).
func (r *serviceRecord) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject copies the record (runtime.Object). The labelSet is
// shared: nothing changes one.
func (r *serviceRecord) DeepCopyObject() runtime.Object {
	c := &serviceRecord{recordMeta: r.recordMeta, svc: r.svc}
	c.svc.IPs = slices.Clone(r.svc.IPs)
	c.svc.InvalidIPs = slices.Clone(r.svc.InvalidIPs)
	return c
}

// GetLabels returns a copy of the Service's labels (metav1.Object; the
// speaker reads them as svc.Labels).
func (r *serviceRecord) GetLabels() map[string]string {
	if ls, ok := r.svc.Labels.(labelSet); ok {
		return ls.Map()
	}
	return nil
}

// eventObject is the object the Service's events are about: the Service's
// kind and identity only (an event recorder reads no more of it). Records
// are not in the scheme, so events cannot name them.
func (r *serviceRecord) eventObject() *corev1.Service {
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{Kind: "Service", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: r.name, Namespace: r.namespace, UID: r.uid,
			ResourceVersion: r.resourceVersion},
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
	// One string for the key, the namespace and the name.
	r := &serviceRecord{svc: svc, recordMeta: recordMeta{uid: s.UID, objectKey: objectKey{
		namespace: svc.Key[:len(s.Namespace)], name: svc.Key[len(s.Namespace)+1:], resourceVersion: s.ResourceVersion}}}
	r.svc.Labels = newLabelSet(s.Labels)
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
	recordMeta
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
	return &sliceRecord{recordMeta: r.recordMeta, service: r.service, endpoints: slices.Clone(r.endpoints)}
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
		recordMeta: newRecordMeta(&s.ObjectMeta),
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
// above): a status object becomes its *statusRef.
func transformStatus(obj any) (any, error) {
	var m *metav1.ObjectMeta
	switch o := obj.(type) {
	case *v1beta1.ServiceL2Status:
		m = &o.ObjectMeta
	case *v1beta1.ServiceBGPStatus:
		m = &o.ObjectMeta
	default:
		return obj, nil // a tombstone, or a record already
	}
	svcNS := m.Labels[v1beta1.LabelServiceNamespace]
	return &statusRef{
		objectKey:        objectKey{name: m.Name, namespace: *nodeNames.intern(&m.Namespace), resourceVersion: m.ResourceVersion},
		serviceNamespace: *nodeNames.intern(&svcNS),
		serviceName:      m.Labels[v1beta1.LabelServiceName],
	}, nil
}

// statusRef is what the speaker's cache keeps of a ServiceL2Status or
// ServiceBGPStatus of this node: the status transform's result, in place
// of the object. It holds the object's name, namespace (Herald's, shared)
// and resourceVersion, and the Service its metallb.io/service-namespace
// and service-name labels name: all that the status writer's watch reads
// (eventHandler, statusKeyOf). The kind is the informer's (eventHandler
// is registered per kind). It is 80 bytes (five strings): a record
// embedding a metav1.ObjectMeta (232 bytes alone) would take a 288-byte
// allocation, the typed object with slim metadata the cache kept before a
// 352-byte one (about 1.7 MB at 5,000 Services). So it implements
// metav1.Object itself (noMeta): the informer's store keys it by
// namespace and name, and controller-runtime's handler passes it on as a
// client.Object. Nothing lists it from the cache (the kinds are
// read from the API server: UncachedObjects).
type statusRef struct {
	objectKey
	// serviceNamespace, serviceName: the values of the object's
	// metallb.io/service-namespace and service-name labels ("" when
	// absent); statusKeyOf.
	serviceNamespace, serviceName string
}

// GetObjectKind: a record carries no type meta (nothing reads it).
func (r *statusRef) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject copies the record (runtime.Object).
func (r *statusRef) DeepCopyObject() runtime.Object {
	c := *r
	return &c
}

// objectKey is the metadata every record keeps: name, namespace and
// resourceVersion (what the informer's store keys and the status watch
// compares). The rest of metav1.Object reads as unset (noMeta).
type objectKey struct {
	noMeta
	name, namespace, resourceVersion string
}

func (r *objectKey) GetName() string             { return r.name }
func (r *objectKey) SetName(v string)            { r.name = v }
func (r *objectKey) GetNamespace() string        { return r.namespace }
func (r *objectKey) SetNamespace(v string)       { r.namespace = v }
func (r *objectKey) GetResourceVersion() string  { return r.resourceVersion }
func (r *objectKey) SetResourceVersion(v string) { r.resourceVersion = v }

// recordMeta is the metadata serviceRecord and sliceRecord keep: name,
// namespace, UID and resourceVersion (what the informer's store keys,
// events and the tests read), 64 bytes where a metav1.ObjectMeta takes
// 232. The rest of metav1.Object reads as unset (noMeta).
type recordMeta struct {
	objectKey
	uid types.UID
}

func newRecordMeta(m *metav1.ObjectMeta) recordMeta {
	return recordMeta{objectKey: objectKey{name: m.Name, namespace: *nodeNames.intern(&m.Namespace), resourceVersion: m.ResourceVersion}, uid: m.UID}
}

func (r *recordMeta) GetUID() types.UID  { return r.uid }
func (r *recordMeta) SetUID(v types.UID) { r.uid = v }

// noMeta is the rest of metav1.Object for the records: the metadata the
// transforms left out reads as unset, and setting it does nothing.
type noMeta struct{}

func (noMeta) GetGenerateName() string                       { return "" }
func (noMeta) SetGenerateName(string)                        {}
func (noMeta) GetUID() types.UID                             { return "" }
func (noMeta) SetUID(types.UID)                              {}
func (noMeta) GetGeneration() int64                          { return 0 }
func (noMeta) SetGeneration(int64)                           {}
func (noMeta) GetSelfLink() string                           { return "" }
func (noMeta) SetSelfLink(string)                            {}
func (noMeta) GetCreationTimestamp() metav1.Time             { return metav1.Time{} }
func (noMeta) SetCreationTimestamp(metav1.Time)              {}
func (noMeta) GetDeletionTimestamp() *metav1.Time            { return nil }
func (noMeta) SetDeletionTimestamp(*metav1.Time)             {}
func (noMeta) GetDeletionGracePeriodSeconds() *int64         { return nil }
func (noMeta) SetDeletionGracePeriodSeconds(*int64)          {}
func (noMeta) GetLabels() map[string]string                  { return nil }
func (noMeta) SetLabels(map[string]string)                   {}
func (noMeta) GetAnnotations() map[string]string             { return nil }
func (noMeta) SetAnnotations(map[string]string)              {}
func (noMeta) GetFinalizers() []string                       { return nil }
func (noMeta) SetFinalizers([]string)                        {}
func (noMeta) GetOwnerReferences() []metav1.OwnerReference   { return nil }
func (noMeta) SetOwnerReferences([]metav1.OwnerReference)    {}
func (noMeta) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }
func (noMeta) SetManagedFields([]metav1.ManagedFieldsEntry)  {}

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
// and the Service namespaces of the cached status objects), and for the
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
	_ client.Object            = (*statusRef)(nil)
)

package allocation

import (
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1alpha1"
	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/k8s/apiretry"
)

// CacheOptions returns the manager cache the controller needs: Herald's CRs
// and Secrets only in namespace (Herald's; also the speaker Pods and
// BGPSessionStates, internal/k8s/sessiongc), Services, Namespaces and Nodes
// cluster-wide, projected to the fields the controller reads
// (transform.go); managedFields stripped from the rest (they are never
// read and are most of an object's size); informers retry an unreachable API server with a
// short capped backoff (apiretry), so a change made right after an outage
// is seen within seconds.
func CacheOptions(namespace string) cache.Options {
	inNS := cache.ByObject{Namespaces: map[string]cache.Config{namespace: {}}}
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		NewInformer:      apiretry.NewInformer,
		ByObject: map[client.Object]cache.ByObject{
			&v1beta1.IPAddressPool{}:      inNS,
			&v1beta1.L2Advertisement{}:    inNS,
			&v1beta1.BGPAdvertisement{}:   inNS,
			&v1beta1.Community{}:          inNS,
			&v1beta1.BFDProfile{}:         inNS,
			&v1beta1.ConfigurationState{}: inNS,
			&v1beta1.ServiceL2Status{}:    inNS,
			&v1beta1.ServiceBGPStatus{}:   inNS,
			&v1beta2.BGPPeer{}:            inNS,
			&corev1.Secret{}:              inNS,
			&corev1.Pod{}:                 inNS,
			&v1alpha1.BGPSessionState{}:   inNS,
			&corev1.Service{}:             {Transform: project(projectService)},
			&corev1.Namespace{}:           {Transform: project(projectNamespace)},
			&corev1.Node{}:                {Transform: project(projectNode)},
		},
	}
}

// readOnly makes a cache read return the cached object itself, not a deep
// copy: its maps and slices are the cache's and must never be modified.
// The allocation loop only reads the Services and Namespaces it gets with
// it (reconcile, preallocate, syncAnnotation), which saves a copy of each
// Service per reconcile, and the allocator's Requests then share their
// Namespace's label map instead of holding a copy per Service.
var readOnly = client.UnsafeDisableDeepCopy

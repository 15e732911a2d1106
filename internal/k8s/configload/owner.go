package configload

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PodOwner reads Pod namespace/name through r and returns an owner reference
// to it (apiVersion v1, kind Pod, its name and UID), for Reporter.Owner and
// the other objects a component writes, so they go away with the Pod. The
// controller and the speaker pass their own Pod (--pod-name, POD_NAME).
// Errors: the Pod cannot be read (wrapped, naming the Pod), or it has no UID.
func PodOwner(ctx context.Context, r client.Reader, namespace, name string) (*metav1.OwnerReference, error) {
	var pod corev1.Pod
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &pod); err != nil {
		return nil, fmt.Errorf("get Pod %s/%s: %w", namespace, name, err)
	}
	if pod.UID == "" {
		return nil, fmt.Errorf("pod %s/%s: %w", namespace, name, errNoUID)
	}
	return &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}, nil
}

var errNoUID = errors.New("pod without UID")

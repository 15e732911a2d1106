package main

import (
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
)

// Leader election: the Lease herald-controller in --namespace, with
// controller-runtime's default timing (a candidate takes over a lease not
// renewed for leaseDuration; the leader gives up, and the process exits,
// when it cannot renew within renewDeadline).
const (
	leaseName     = "herald-controller"
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
)

// leaderIdentity is the holder identity this process writes into the
// Lease: the Pod name (--pod-name, METALLB_POD_NAME from the downward API)
// when known, else controller-runtime's default, hostname_<uuid>.
//
// A stable per-Pod identity lets a restarted container of the same Pod
// take the Lease at once, instead of waiting leaseDuration for its own
// predecessor's record to expire (the controller exits when it loses the
// Lease, e.g. in an API server outage longer than renewDeadline, and its
// successor then came back with a new identity). It is safe because one
// identity is never held by two live processes: a Deployment's Pod names
// are unique (ReplicaSet hash and random suffix, never reused), a Pod has
// one controller container, and the kubelet starts that container again
// only after the previous one exited. Two replicas (a rollout's surge) are
// two Pods, so two identities, and elect as before.
func leaderIdentity(podName string) (string, error) {
	if podName != "" {
		return podName, nil
	}
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("leader identity: %w", err)
	}
	return host + "_" + string(uuid.NewUUID()), nil
}

// leaderLock builds the Lease lock with identity id, as controller-runtime
// builds its own (leaderelection.NewResourceLock) except for the identity:
// its clients time out after renewDeadline/2 so that one hung request
// cannot use up the renew deadline, and it records leadership events
// (LeaderElection, on the Lease) as source id.
func leaderLock(cfg *rest.Config, scheme *runtime.Scheme, namespace, id string) (resourcelock.Interface, error) {
	cfg = rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election")
	cfg.Timeout = max(renewDeadline/2, time.Second)
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("leader election client: %w", err)
	}
	coord, err := coordinationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("leader election client: %w", err)
	}
	bc := record.NewBroadcaster()
	bc.StartRecordingToSink(&corev1client.EventSinkImpl{Interface: core.Events(namespace)})
	return resourcelock.New(resourcelock.LeasesResourceLock, namespace, leaseName, core, coord, resourcelock.ResourceLockConfig{
		Identity:      id,
		EventRecorder: bc.NewRecorder(scheme, corev1.EventSource{Component: id}),
	})
}

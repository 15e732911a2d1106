package main

import (
	"context"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/internal/poll"
)

// A controller container that dies holding the Lease (SIGKILL: nothing
// released, as when it exits on lost leadership during an API server
// outage) and is started again in the same Pod takes the Lease back at
// once: it is the same holder (the Pod name), and it renews the Lease
// before the dead process's record could have expired (leaseDuration
// after its last renewal). Before, the new container had a new identity
// (hostname_uuid) and had to wait for its predecessor's lease to expire.
func TestRestartedContainerLeadsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real API server; skipped under -short")
	}
	env, bin, kc := controllerEnv(t)
	ctx := context.Background()
	herald, app, vwc := heraldFixture(t, env.Client, "198.51.100.0/28")
	const pod = "herald-controller-6f8b9c7d4-x2k9q"
	lease := func() *coordinationv1.Lease {
		var l coordinationv1.Lease
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: herald, Name: leaseName}, &l); err != nil {
			return nil
		}
		return &l
	}
	addressed := func(name string) {
		t.Helper()
		if err := env.Client.Create(ctx, lbService(app, name)); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, 60*time.Second, "Service "+name+" addressed", func() error {
			var s corev1.Service
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: app, Name: name}, &s); err != nil {
				return err
			}
			if ingress(&s) == "" {
				return errors.New("no ingress address")
			}
			return nil
		})
	}

	first := startController(t, bin, kc, herald, vwc.Name, "first", "--pod-name="+pod)
	addressed("before")
	_ = first.cmd.Process.Kill()
	<-first.done
	first.done <- nil
	held := lease()
	if held == nil || held.Spec.HolderIdentity == nil || *held.Spec.HolderIdentity != pod || held.Spec.RenewTime == nil {
		t.Fatalf("Lease after the first controller: %+v, want held by %s", held, pod)
	}
	expires := held.Spec.RenewTime.Add(leaseDuration)

	startController(t, bin, kc, herald, vwc.Name, "second", "--pod-name="+pod)
	var taken *coordinationv1.Lease
	poll.Until(t, 60*time.Second, "the restarted controller renews the Lease", func() bool {
		l := lease()
		if l == nil || l.Spec.RenewTime == nil || l.Spec.RenewTime.Equal(held.Spec.RenewTime) {
			return false
		}
		taken = l
		return true
	})
	if h := *taken.Spec.HolderIdentity; h != pod {
		t.Errorf("Lease taken by %q, want the Pod's identity %q", h, pod)
	}
	if !taken.Spec.RenewTime.Time.Before(expires) {
		t.Errorf("Lease taken at %s, not before the dead holder's record expired (%s): the restarted container waited for its own predecessor",
			taken.Spec.RenewTime.Format(time.RFC3339Nano), expires.Format(time.RFC3339Nano))
	}
	if a, b := ptr.Deref(held.Spec.LeaseTransitions, 0), ptr.Deref(taken.Spec.LeaseTransitions, 0); a != b {
		t.Errorf("leaseTransitions %d -> %d: the restarted container counted as a new leader", a, b)
	}
	addressed("after")
}

package allocation

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/annotations"
	"github.com/herald-lb/herald/internal/poll"
)

// listIPs returns name -> ingress IPs of every Service of ns that has some.
func (f *fixture) listIPs() map[string]string {
	f.t.Helper()
	var list corev1.ServiceList
	if err := f.c.List(f.ctx(), &list, client.InNamespace(f.ns)); err != nil {
		f.t.Fatalf("list Services: %v", err)
	}
	out := map[string]string{}
	for i := range list.Items {
		if ips := ingressStrings(&list.Items[i]); len(ips) > 0 {
			out[list.Items[i].Name] = strings.Join(ips, ",")
		}
	}
	return out
}

func checkNoDuplicates(t *testing.T, ips map[string]string) {
	t.Helper()
	owner := map[string]string{}
	for name, ip := range ips {
		if o, dup := owner[ip]; dup {
			t.Errorf("IP %s held by both %s and %s", ip, o, name)
		}
		owner[ip] = name
	}
}

// The controller is stopped in the middle of a burst of 200 creations and a
// fresh one takes over: no address is given twice and no address already in
// a Service's status changes (metallb#1774, #2443).
func TestRestartMidBurst(t *testing.T) {
	f := newFixture(t)
	f.pool("pool-a", []string{"198.51.100.0/24"})
	r1 := f.start()
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < n; i += 4 {
				if err := f.c.Create(f.ctx(), newService(f.ns, fmt.Sprintf("svc-%03d", i))); err != nil {
					errs <- err
				}
			}
		})
	}
	poll.Until(t, 60*time.Second, "a third of the burst addressed", func() error {
		got := len(f.listIPs())
		if got < n/3 {
			return fmt.Errorf("%v", got)
		}
		return nil
	})
	r1.stop()
	before := f.listIPs()
	checkNoDuplicates(t, before)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("create: %v", err)
	}
	t.Logf("%d of %d Services had addresses when the first controller stopped", len(before), n)

	f.start()
	var after map[string]string
	poll.Until(t, 90*time.Second, "every Service addressed", func() error {
		after = f.listIPs()
		if len(after) != n {
			return fmt.Errorf("%d", len(after))
		}
		return nil
	})
	checkNoDuplicates(t, after)
	for name, ip := range before {
		if after[name] != ip {
			t.Errorf("%s changed from %s to %s across the restart", name, ip, after[name])
		}
	}
}

// An invalid pool written past the (absent) webhook changes nothing: every
// address stays, the last valid configuration stays in force, the
// ConfigurationState names the object and field, the stale metric is 1 and
// the pool gets a Warning event. A controller started while the
// configuration is invalid allocates and releases nothing until it is fixed.
func TestInvalidConfigKeepsAddresses(t *testing.T) {
	f := newFixture(t)
	f.pool("pool-a", []string{"198.51.100.0/28"})
	r := f.start()
	f.svc("a")
	f.waitIPs("a", "198.51.100.0")
	f.svc("b")
	f.waitIPs("b", "198.51.100.1")

	f.pool("pool-bad", []string{"198.51.100.300/32"})
	state := f.waitConfigState(v1beta1.ConfigurationResultInvalid)
	for _, want := range []string{"IPAddressPool " + f.herald + "/pool-bad", "spec.addresses[0]"} {
		if !strings.Contains(state.ErrorSummary, want) {
			t.Errorf("errorSummary %q does not name %q", state.ErrorSummary, want)
		}
	}
	poll.Until(t, 10*time.Second, "stale metric 1", func() error {
		v, _ := gauge(t, r.reg, "metallb_k8s_client_config_stale_bool")
		if v != 1 {
			return fmt.Errorf("%v", v)
		}
		return nil
	})
	f.waitEventIn(f.herald, "pool-bad", EventInvalidConfiguration, "spec.addresses[0]")
	// The last valid configuration still serves new Services.
	f.svc("c")
	f.waitIPs("c", "198.51.100.2")

	r.stop()
	r2 := f.start()
	d := f.svc("d")
	// The new controller has rejected the configuration and looked at d
	// (it never initialises, so it is drained, not idle).
	poll.Until(t, 10*time.Second, "stale metric 1 after restart", func() error {
		if v, _ := gauge(t, r2.reg, "metallb_k8s_client_config_stale_bool"); v != 1 {
			return fmt.Errorf("%v", v)
		}
		return nil
	})
	f.waitCached(r2, d, false)
	waitQuiet(t, r2.ctrl.drained)
	if got := f.listIPs(); got["a"] != "198.51.100.0" || got["b"] != "198.51.100.1" || got["c"] != "198.51.100.2" || got["d"] != "" {
		t.Errorf("after restart with an invalid configuration: %v", got)
	}
	if v, _ := gauge(t, r2.reg, "metallb_k8s_client_config_stale_bool"); v != 1 {
		t.Errorf("stale = %v after restart, want 1", v)
	}

	var bad v1beta1.IPAddressPool
	if err := f.c.Get(f.ctx(), client.ObjectKey{Namespace: f.herald, Name: "pool-bad"}, &bad); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Delete(f.ctx(), &bad); err != nil {
		t.Fatal(err)
	}
	f.waitIPs("d", "198.51.100.3")
	f.waitConfigState(v1beta1.ConfigurationResultValid)
	if got := f.listIPs(); got["a"] != "198.51.100.0" || got["b"] != "198.51.100.1" || got["c"] != "198.51.100.2" {
		t.Errorf("after the fix: %v", got)
	}
	poll.Until(t, 10*time.Second, "stale metric 0", func() error {
		v, _ := gauge(t, r2.reg, "metallb_k8s_client_config_stale_bool")
		if v != 0 {
			return fmt.Errorf("%v", v)
		}
		return nil
	})
}

func (f *fixture) waitConfigState(result v1beta1.ConfigurationResult) v1beta1.ConfigurationStateStatus {
	f.t.Helper()
	var st v1beta1.ConfigurationStateStatus
	poll.Until(f.t, 30*time.Second, "ConfigurationState "+string(result), func() error {
		var cs v1beta1.ConfigurationState
		if err := f.c.Get(f.ctx(), client.ObjectKey{Namespace: f.herald, Name: "controller"}, &cs); err != nil {
			return err
		}
		st = cs.Status
		if cs.Status.Result != result {
			return fmt.Errorf("%+v", cs.Status)
		}
		return nil
	})
	return st
}

func (f *fixture) waitEventIn(ns, name, reason, substr string) {
	f.t.Helper()
	poll.Until(f.t, 30*time.Second, "event "+reason+" on "+name, func() error {
		var list corev1.EventList
		if err := f.c.List(f.ctx(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.InvolvedObject.Name == name && e.Reason == reason && strings.Contains(e.Message, substr) {
				return nil
			}
		}
		return fmt.Errorf("%d events", len(list.Items))
	})
}

// A BGPPeer whose password Secret is missing (a transient reference: the
// Secret may be created later) leaves out only that peer: a controller that
// starts meanwhile still allocates, and ConfigurationState names the peer.
// Before, the whole configuration was rejected at start-up and no Service
// got an address until the Secret existed.
func TestMissingPeerSecretStillAllocates(t *testing.T) {
	f := newFixture(t)
	f.pool("pool-a", []string{"198.51.100.0/28"})
	peer := &v1beta2.BGPPeer{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.herald, Name: "router"},
		Spec: v1beta2.BGPPeerSpec{
			MyASN: 64512, PeerASN: 64500, PeerAddress: "198.51.100.1",
			PasswordSecret: &corev1.SecretReference{Name: "absent", Namespace: f.herald},
		},
	}
	if err := f.c.Create(f.ctx(), peer); err != nil {
		t.Fatal(err)
	}
	f.start()
	f.svc("a")
	f.waitIPs("a", "198.51.100.0")
	state := f.waitConfigState(v1beta1.ConfigurationResultInvalid)
	if !strings.Contains(state.ErrorSummary, "BGPPeer "+f.herald+"/router") {
		t.Errorf("errorSummary %q does not name the peer", state.ErrorSummary)
	}

	// The Secret appears (the peer is in force), then is deleted again: a
	// pool added meanwhile is still put in force (a speaker would keep the
	// peer and its password; the controller does not need it). Before, the
	// whole configuration stayed as it was and the new pool "did not exist".
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.herald, Name: "absent"},
		Type:       corev1.SecretTypeBasicAuth,
		StringData: map[string]string{"password": "s3cret"},
	}
	if err := f.c.Create(f.ctx(), secret); err != nil {
		t.Fatal(err)
	}
	f.waitConfigState(v1beta1.ConfigurationResultValid)
	if err := f.c.Delete(f.ctx(), secret); err != nil {
		t.Fatal(err)
	}
	f.waitConfigState(v1beta1.ConfigurationResultInvalid)
	f.pool("pool-b", []string{"203.0.113.0/28"})
	f.svc("b", withAnnotation(annotations.AddressPool, "pool-b"))
	f.waitIPs("b", "203.0.113.0")
}

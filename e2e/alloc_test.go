package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/e2e/lab"
	"github.com/herald-lb/herald/internal/poll"
)

// TestAllocation proves, through the real API server and Herald's
// controller run from its manifests, which address each Service gets
// (docs/allocation-order.md): pools reserved by namespace and namespace
// label, priorities, requested IPs, sharing, dual stack, loadBalancerClass,
// pool edits, and that a controller killed in the middle of a burst of
// Service creations neither hands out an address twice nor changes one
// it gave. No speaker runs: announcing is not under test here.
//
// Each sub-test owns its namespace and pools; every pool is either
// reserved to that namespace or has autoAssign false, so sub-tests cannot
// take each other's addresses.
func TestAllocation(t *testing.T) {
	e := newEnv(t, 1, lab.InstallOptions{SpeakerNodes: []string{}})
	t.Run("PoolsByNamespaceAndLabel", e.testPoolsByNamespace)
	t.Run("Priorities", e.testPriorities)
	t.Run("RequestedIPs", e.testRequestedIPs)
	t.Run("Sharing", e.testSharing)
	t.Run("DualStack", e.testDualStack)
	t.Run("LoadBalancerClass", e.testLBClass)
	t.Run("PoolEdits", e.testPoolEdits)
	t.Run("ControllerRestartMidBurst", e.testRestartMidBurst)
}

// reserved returns a pool reserved to namespaces by name.
func reserved(name string, prio int, nss []string, addrs ...string) *v1beta1.IPAddressPool {
	p := pool(name, addrs...)
	p.Spec.ServiceAllocation = &v1beta1.ServiceAllocation{Priority: prio, Namespaces: nss}
	return p
}

// manual returns a pool with autoAssign false.
func manual(name string, addrs ...string) *v1beta1.IPAddressPool {
	p := pool(name, addrs...)
	p.Spec.AutoAssign = ptr.To(false)
	return p
}

// within reports whether every ip lies in one of the prefixes.
func within(ips []netip.Addr, prefixes ...string) bool {
	for _, ip := range ips {
		ok := false
		for _, p := range prefixes {
			if netip.MustParsePrefix(p).Contains(ip) {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return len(ips) > 0
}

// conditionIPAllocated is the Service condition the controller maintains.
const conditionIPAllocated = "herald.io/IPAllocated"

// staysPending checks that Service ns/name has no address once the
// controller has decided that it cannot have one (condition
// herald.io/IPAllocated False for its current generation, and the
// AllocationFailed event) and gone idle, and returns its events.
func (e *env) staysPending(t *testing.T, ns, name string) string {
	t.Helper()
	var ev string
	poll.Until(t, time.Minute, fmt.Sprintf("service %s/%s refused by the controller", ns, name), func() error {
		var svc corev1.Service
		if err := e.c.Get(testCtx(t, 10*time.Second), client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
			return err
		}
		if len(svc.Status.LoadBalancer.Ingress) > 0 {
			t.Fatalf("service %s/%s got %v, want no address", ns, name, svc.Status.LoadBalancer.Ingress)
		}
		c := meta.FindStatusCondition(svc.Status.Conditions, conditionIPAllocated)
		if c == nil || c.Status != metav1.ConditionFalse || c.ObservedGeneration != svc.Generation {
			return fmt.Errorf("condition %s: %+v (generation %d)", conditionIPAllocated, c, svc.Generation)
		}
		if ev = e.events(ns, name); !strings.Contains(ev, "AllocationFailed") {
			return fmt.Errorf("no %s event, events:%s", "AllocationFailed", ev)
		}
		return nil
	})
	e.waitControllerIdle(t)
	e.noAddress(t, ns, name)
	return ev
}

// noAddress fails t if Service ns/name has an address.
func (e *env) noAddress(t *testing.T, ns, name string) {
	t.Helper()
	ips, err := e.h.ServiceIPs(testCtx(t, 10*time.Second), ns, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(ips) > 0 {
		t.Fatalf("service %s/%s got %v, want no address", ns, name, ips)
	}
}

// testPoolsByNamespaceAndLabel: a pool reserved to namespace alloc-a serves
// it, a pool reserved by namespace label team=blue serves a namespace with
// that label, and a namespace selected by neither gets nothing (reserved
// pools are no fallback).
func (e *env) testPoolsByNamespace(t *testing.T) {
	e.namespace(t, "alloc-a", nil)
	e.namespace(t, "alloc-blue", map[string]string{"team": "blue"})
	e.namespace(t, "alloc-none", nil)
	e.put(t, reserved("ns-a", 0, []string{"alloc-a"}, "203.0.113.0/28"))
	byLabel := pool("ns-blue", "203.0.113.16/28")
	byLabel.Spec.ServiceAllocation = &v1beta1.ServiceAllocation{
		NamespaceSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"team": "blue"}}}}
	e.put(t, byLabel)
	e.createService(t, lbService("alloc-a", "web"))
	e.createService(t, lbService("alloc-blue", "web"))
	e.createService(t, lbService("alloc-none", "web"))
	if ips := e.ips(t, "alloc-a", "web", 1); !within(ips, "203.0.113.0/28") {
		t.Errorf("alloc-a/web got %v, want from pool ns-a 203.0.113.0/28", ips)
	}
	if ips := e.ips(t, "alloc-blue", "web", 1); !within(ips, "203.0.113.16/28") {
		t.Errorf("alloc-blue/web got %v, want from pool ns-blue 203.0.113.16/28", ips)
	}
	ev := e.staysPending(t, "alloc-none", "web")
	if !strings.Contains(ev, "AllocationFailed") {
		t.Errorf("alloc-none/web: want an AllocationFailed event, events:%s", ev)
	}
}

// testPriorities: of two pools reserved to the namespace, priority 1 is
// used before priority 2, and the next Service spills into priority 2 once
// priority 1 is full.
func (e *env) testPriorities(t *testing.T) {
	const ns = "alloc-prio"
	e.namespace(t, ns, nil)
	e.put(t, reserved("prio-2", 2, []string{ns}, "203.0.113.40/29"))
	e.put(t, reserved("prio-1", 1, []string{ns}, "203.0.113.32/30"))
	// Both pools in the controller's configuration before the first
	// Service (CI once saw web-0 served by prio-2 alone: prio-1 was stored
	// but not yet loaded, and an address, once given, stays).
	e.poolLoaded(t, "prio-2", 8)
	e.poolLoaded(t, "prio-1", 4)
	var got []netip.Addr
	for i := range 5 {
		name := fmt.Sprintf("web-%d", i)
		e.createService(t, lbService(ns, name))
		got = append(got, e.ips(t, ns, name, 1)...)
	}
	if !within(got[:4], "203.0.113.32/30") {
		t.Errorf("first four Services got %v, want all from prio-1 203.0.113.32/30", got[:4])
	}
	if !within(got[4:], "203.0.113.40/29") {
		t.Errorf("fifth Service got %v, want prio-2 203.0.113.40/29 once prio-1 is full", got[4:])
	}
}

// testRequestedIPs: a Service asking for an address (annotation
// metallb.io/loadBalancerIPs) gets exactly it, even from an autoAssign
// false pool; asking for a taken address or one outside every pool leaves
// the Service pending with an event.
func (e *env) testRequestedIPs(t *testing.T) {
	const ns = "alloc-req"
	e.namespace(t, ns, nil)
	e.put(t, manual("req", "203.0.113.48/29"))
	e.createService(t, lbService(ns, "want", withAnnotation("metallb.io/loadBalancerIPs", "203.0.113.53")))
	if ips := e.ips(t, ns, "want", 1); !slices.Equal(ips, addrs(t, "203.0.113.53")) {
		t.Errorf("want got %v, want exactly 203.0.113.53", ips)
	}
	e.createService(t, lbService(ns, "taken", withAnnotation("metallb.io/loadBalancerIPs", "203.0.113.53")))
	if ev := e.staysPending(t, ns, "taken"); !strings.Contains(ev, "AllocationFailed") {
		t.Errorf("taken: want AllocationFailed, events:%s", ev)
	}
	e.createService(t, lbService(ns, "outside", withAnnotation("metallb.io/loadBalancerIPs", "203.0.113.250")))
	if ev := e.staysPending(t, ns, "outside"); !strings.Contains(ev, "AllocationFailed") {
		t.Errorf("outside: want AllocationFailed, events:%s", ev)
	}
}

// testSharing: two Services with the same metallb.io/allow-shared-ip key
// and different ports share one address; a Service with another key cannot
// take that address.
func (e *env) testSharing(t *testing.T) {
	const ns = "alloc-share"
	e.namespace(t, ns, nil)
	e.put(t, manual("share", "203.0.113.56/29"))
	key := func(k string) func(*corev1.Service) {
		return func(s *corev1.Service) {
			s.Annotations["metallb.io/allow-shared-ip"] = k
			s.Annotations["metallb.io/address-pool"] = "share"
		}
	}
	e.createService(t, lbService(ns, "a", key("k1")))
	a := e.ips(t, ns, "a", 1)
	e.createService(t, lbService(ns, "b", key("k1"), func(s *corev1.Service) { s.Spec.Ports[0].Port = 8080 }))
	b := e.ips(t, ns, "b", 1)
	if !slices.Equal(a, b) {
		t.Errorf("a got %v, b got %v: same key, different ports, want one shared address", a, b)
	}
	e.createService(t, lbService(ns, "c", key("k2"), withAnnotation("metallb.io/loadBalancerIPs", a[0].String()),
		func(s *corev1.Service) { s.Spec.Ports[0].Port = 9090 }))
	if ev := e.staysPending(t, ns, "c"); !strings.Contains(ev, "AllocationFailed") {
		t.Errorf("c (other key, asks for %s): want AllocationFailed, events:%s", a[0], ev)
	}
}

// testDualStack: a RequireDualStack Service gets one address of each
// family from a dual-stack pool; an IPv6-only Service gets only IPv6.
func (e *env) testDualStack(t *testing.T) {
	const ns = "alloc-dual"
	e.namespace(t, ns, nil)
	e.put(t, reserved("dual", 0, []string{ns}, "203.0.113.64/29", "2001:db8:203::40/125"))
	e.createService(t, lbService(ns, "both", dualStack))
	ips := e.ips(t, ns, "both", 2)
	if len(ips) != 2 || !ips[0].Is4() || !ips[1].Is6() || !within(ips, "203.0.113.64/29", "2001:db8:203::40/125") {
		t.Errorf("both got %v, want one IPv4 from 203.0.113.64/29 and one IPv6 from 2001:db8:203::40/125", ips)
	}
	e.createService(t, lbService(ns, "v6", func(s *corev1.Service) {
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
	}))
	if ips := e.ips(t, ns, "v6", 1); len(ips) != 1 || !within(ips, "2001:db8:203::40/125") {
		t.Errorf("v6 got %v, want exactly one IPv6 from 2001:db8:203::40/125", ips)
	}
}

// testLBClass: the controller (no --lb-class) leaves a Service with a
// loadBalancerClass alone and serves one without.
func (e *env) testLBClass(t *testing.T) {
	const ns = "alloc-class"
	e.namespace(t, ns, nil)
	e.put(t, reserved("class", 0, []string{ns}, "203.0.113.72/29"))
	e.createService(t, lbService(ns, "other", func(s *corev1.Service) {
		s.Spec.LoadBalancerClass = ptr.To("other.example/lb")
	}))
	e.createService(t, lbService(ns, "mine"))
	if ips := e.ips(t, ns, "mine", 1); !within(ips, "203.0.113.72/29") {
		t.Errorf("mine got %v, want from 203.0.113.72/29", ips)
	}
	// The controller saw "other" before "mine" (created first); once it is
	// idle it has left "other" alone for good: no address, no condition.
	e.waitControllerIdle(t)
	e.noAddress(t, ns, "other")
	var other corev1.Service
	if err := e.c.Get(testCtx(t, 10*time.Second), client.ObjectKey{Namespace: ns, Name: "other"}, &other); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(other.Status.Conditions, conditionIPAllocated); c != nil {
		t.Errorf("other (class other.example/lb) has condition %+v, want none", c)
	}
}

// testPoolEdits: growing a full pool serves the pending Service and moves
// nobody; shrinking it so that a held address leaves the pool re-addresses
// only that Service (with a ClearAssignment event).
func (e *env) testPoolEdits(t *testing.T) {
	const ns = "alloc-edit"
	e.namespace(t, ns, nil)
	e.put(t, reserved("edit", 0, []string{ns}, "203.0.113.80/32"))
	e.createService(t, lbService(ns, "first"))
	if ips := e.ips(t, ns, "first", 1); !slices.Equal(ips, addrs(t, "203.0.113.80")) {
		t.Fatalf("first got %v, want 203.0.113.80", ips)
	}
	e.createService(t, lbService(ns, "second"))
	e.staysPending(t, ns, "second")
	e.put(t, reserved("edit", 0, []string{ns}, "203.0.113.80-203.0.113.81"))
	if ips := e.ips(t, ns, "second", 1); !slices.Equal(ips, addrs(t, "203.0.113.81")) {
		t.Errorf("second got %v after the pool grew, want 203.0.113.81", ips)
	}
	if ips := e.ips(t, ns, "first", 1); !slices.Equal(ips, addrs(t, "203.0.113.80")) {
		t.Errorf("first has %v after the pool grew, want still 203.0.113.80", ips)
	}
	e.put(t, reserved("edit", 0, []string{ns}, "203.0.113.81-203.0.113.83"))
	poll.Until(t, 30*time.Second, "first re-addressed after its address left the pool", func() error {
		ips, err := e.h.ServiceIPs(context.Background(), ns, "first")
		if err != nil {
			return err
		}
		if !slices.Equal(ips, addrs(t, "203.0.113.82")) {
			return fmt.Errorf("first has %v, want 203.0.113.82", ips)
		}
		return nil
	})
	if ips := e.ips(t, ns, "second", 1); !slices.Equal(ips, addrs(t, "203.0.113.81")) {
		t.Errorf("second has %v after the pool shrank, want still 203.0.113.81", ips)
	}
	// The controller emits events after the status write, from its
	// low-priority queue (internal/k8s/allocation, "later"), so the event
	// may follow the new address by a moment: wait for it.
	poll.Until(t, 30*time.Second, "first's ClearAssignment event", func() error {
		if ev := e.events(ns, "first"); !strings.Contains(ev, "ClearAssignment") {
			return fmt.Errorf("no ClearAssignment event, events:%s", ev)
		}
		return nil
	})
}

// testRestartMidBurst: 60 Services are created concurrently and the
// controller is killed (SIGKILL) while it is addressing them, then started
// again;
// in the end every Service has exactly one address, no address is given
// twice, and no Service that had an address before the kill has another.
func (e *env) testRestartMidBurst(t *testing.T) {
	const ns, n = "alloc-burst", 60
	e.namespace(t, ns, nil)
	e.put(t, reserved("burst", 0, []string{ns}, "203.0.113.128/26"))
	ctx := testCtx(t, 5*time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	create := func(from, to int) {
		for i := from; i < to; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := e.k.CoreV1().Services(ns).Create(ctx, lbService(ns, fmt.Sprintf("s%02d", i)), metav1.CreateOptions{}); err != nil {
					errs <- err
				}
			}()
		}
	}
	create(0, 12)
	wg.Wait()
	create(12, n)
	// Kill it while it works through the second wave: once some of those
	// have an address too.
	poll.Until(t, 30*time.Second, "16 Services with an address before the kill", func() error {
		if n := len(e.snapshot(t, ns)); n < 16 {
			return fmt.Errorf("%d with an address", n)
		}
		return nil
	})
	// A crash: the process ends on its own, the lab still has it, and the
	// kubelet's restart (RestartControllerIfExited) brings it back.
	ctl := e.h.Controller()
	if ctl == nil {
		t.Fatal("no controller process")
	}
	if restarted, err := e.h.RestartControllerIfExited(ctx); err != nil || restarted {
		t.Fatalf("RestartControllerIfExited with the controller running = %v, %v; want false, nil", restarted, err)
	}
	if err := syscall.Kill(ctl.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the controller process gone", func() error {
		if ctl.Alive() {
			return errors.New("still running")
		}
		return nil
	})
	before := e.snapshot(t, ns)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("create: %v", err)
	}
	t.Logf("%d of %d Services had an address when the controller was killed", len(before), n)
	if restarted, err := e.h.RestartControllerIfExited(ctx); err != nil || !restarted {
		t.Fatalf("RestartControllerIfExited after the crash = %v, %v; want true, nil", restarted, err)
	}
	var after map[string]netip.Addr
	poll.Until(t, 2*time.Minute, "every Service has an address", func() error {
		after = e.snapshot(t, ns)
		if len(after) < n {
			return fmt.Errorf("%d of %d have an address", len(after), n)
		}
		return nil
	})
	seen := map[netip.Addr]string{}
	for svc, ip := range after {
		if other, dup := seen[ip]; dup {
			t.Errorf("%s given to both %s and %s", ip, other, svc)
		}
		seen[ip] = svc
		if !within([]netip.Addr{ip}, "203.0.113.128/26") {
			t.Errorf("%s got %s, outside pool burst", svc, ip)
		}
	}
	for svc, ip := range before {
		if after[svc] != ip {
			t.Errorf("%s had %s before the restart and %s after", svc, ip, after[svc])
		}
	}
}

// snapshot returns the address of every Service in ns that has exactly
// one (a Service with several fails t).
func (e *env) snapshot(t *testing.T, ns string) map[string]netip.Addr {
	t.Helper()
	l, err := e.k.CoreV1().Services(ns).List(testCtx(t, time.Minute), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]netip.Addr{}
	for _, s := range l.Items {
		in := s.Status.LoadBalancer.Ingress
		if len(in) > 1 {
			t.Errorf("%s has %d addresses %v, want one", s.Name, len(in), in)
		}
		if len(in) == 1 {
			out[s.Name] = netip.MustParseAddr(in[0].IP)
		}
	}
	return out
}

// poolLoaded waits until the controller has pool name (of v4 IPv4
// addresses) in its configuration: its status counts all of them.
func (e *env) poolLoaded(t *testing.T, name string, v4 int64) {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	poll.Until(t, time.Minute, "pool "+name+" in the controller's configuration", func() error {
		var p v1beta1.IPAddressPool
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: lab.HeraldNamespace, Name: name}, &p); err != nil {
			return err
		}
		if got := p.Status.AssignedIPv4 + p.Status.AvailableIPv4; got != v4 {
			return fmt.Errorf("status counts %d IPv4 addresses, want %d", got, v4)
		}
		return nil
	})
}

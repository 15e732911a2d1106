package allocation

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/annotations"
	"github.com/herald-lb/herald/internal/poll"
)

// A new LoadBalancer Service gets the lowest free address, an IPAllocated
// event, a True condition, the pool annotation, and the pool's status and
// metrics count it.
func TestAssignsIP(t *testing.T) {
	f := newFixture(t)
	f.pool("pool-a", []string{"198.51.100.10-198.51.100.12"})
	r := f.start()
	f.svc("web")
	s := f.waitIPs("web", "198.51.100.10")
	if s.Status.LoadBalancer.Ingress[0].IPMode == nil || *s.Status.LoadBalancer.Ingress[0].IPMode != corev1.LoadBalancerIPModeVIP {
		t.Errorf("ipMode = %v, want VIP", s.Status.LoadBalancer.Ingress[0].IPMode)
	}
	cond := f.waitCondition("web", ReasonAllocated)
	if cond.Status != "True" || cond.Message != `Assigned IP ["198.51.100.10"]` {
		t.Errorf("condition = %+v", cond)
	}
	f.waitEvent("web", EventIPAllocated, `Assigned IP ["198.51.100.10"]`)
	poll.Until(t, 30*time.Second, "pool annotation", func() error {
		got := f.get("web").Annotations[annotations.AllocatedFromPool]
		if got != "pool-a" {
			return fmt.Errorf("annotation %q", got)
		}
		return nil
	})

	f.svc("api")
	f.waitIPs("api", "198.51.100.11")
	poll.Until(t, 30*time.Second, "pool status", func() error {
		var p v1beta1.IPAddressPool
		if err := f.c.Get(f.ctx(), client.ObjectKey{Namespace: f.herald, Name: "pool-a"}, &p); err != nil {
			return err
		}
		if p.Status.AssignedIPv4 != 2 || p.Status.AvailableIPv4 != 1 {
			return fmt.Errorf("%+v", p.Status)
		}
		return nil
	})
	poll.Until(t, 10*time.Second, "in-use metric", func() error {
		v, _ := gauge(t, r.reg, "metallb_allocator_addresses_in_use_total", "pool", "pool-a")
		tot, _ := gauge(t, r.reg, "metallb_allocator_ipv4_addresses_total", "pool", "pool-a")
		if v != 2 || tot != 3 {
			return fmt.Errorf("in use %v of %v", v, tot)
		}
		return nil
	})
	if n, ok := gauge(t, r.reg, "herald_allocation_duration_seconds"); !ok || n < 2 {
		t.Errorf("allocation duration samples = %v, want >= 2", n)
	}

	// Exhausted: the fourth Service stays pending with a reason, and gets
	// the address freed by a deletion.
	f.svc("db")
	f.waitIPs("db", "198.51.100.12")
	f.svc("late")
	cond = f.waitCondition("late", ReasonPoolExhausted)
	if cond.Status != "False" {
		t.Errorf("condition = %+v", cond)
	}
	f.waitEvent("late", EventAllocationFailed, `"pool-a" has no free IPv4 address`)
	if v, _ := gauge(t, r.reg, "herald_services_pending"); v != 1 {
		t.Errorf("pending = %v, want 1", v)
	}
	if err := f.c.Delete(f.ctx(), f.get("api")); err != nil {
		t.Fatal(err)
	}
	f.waitIPs("late", "198.51.100.11")
	f.waitCondition("late", ReasonAllocated)
	if v, _ := gauge(t, r.reg, "herald_services_pending"); v != 0 {
		t.Errorf("pending = %v, want 0", v)
	}

	// Type change releases and clears everything.
	s = f.get("web")
	base := s.DeepCopy()
	s.Spec.Type = corev1.ServiceTypeClusterIP
	s.Spec.AllocateLoadBalancerNodePorts = nil
	if err := f.c.Patch(f.ctx(), s, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "web cleared", func() error {
		s := f.get("web")
		_, ann := s.Annotations[annotations.AllocatedFromPool]
		if len(s.Status.LoadBalancer.Ingress) > 0 || len(s.Status.Conditions) > 0 || ann {
			return errors.New(strings.Join(ingressStrings(s), ","))
		}
		return nil
	})
	f.svc("next")
	f.waitIPs("next", "198.51.100.10")
}

// Requested IPs and the address-pool annotation are honoured; a requested
// IP outside every pool fails with its reason; changing the request moves
// the Service with a ClearAssignment event.
func TestRequestedIPAndPool(t *testing.T) {
	f := newFixture(t)
	f.pool("pool-a", []string{"198.51.100.0/28"})
	f.pool("pool-b", []string{"203.0.113.0/28"}, func(p *v1beta1.IPAddressPool) { p.Spec.AutoAssign = ptr.To(false) })
	f.start()

	f.svc("named", withAnnotation(annotations.AddressPool, "pool-b"))
	f.waitIPs("named", "203.0.113.0")
	f.svc("req", withAnnotation(annotations.LoadBalancerIPs, "198.51.100.7"))
	f.waitIPs("req", "198.51.100.7")
	f.svc("legacy", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "203.0.113.9" })
	f.waitIPs("legacy", "203.0.113.9")
	f.svc("outside", withAnnotation(annotations.LoadBalancerIPs, "203.0.113.200"))
	f.waitCondition("outside", ReasonRequestedIPNotInPool)
	f.waitEvent("outside", EventAllocationFailed, "203.0.113.200")
	f.svc("nopool", withAnnotation(annotations.AddressPool, "missing"))
	f.waitCondition("nopool", ReasonUnknownPool)
	f.svc("deprecated", withAnnotation(annotations.AddressPoolDeprecated, "pool-b"))
	f.waitIPs("deprecated", "203.0.113.1")
	f.waitEvent("deprecated", EventDeprecatedAnnotation, annotations.AddressPoolDeprecated)
	// Both keys, disagreeing: the metallb.io/ one is used, and the
	// warning says which one is ignored.
	f.svc("both", withAnnotation(annotations.AddressPool, "pool-b"), withAnnotation(annotations.AddressPoolDeprecated, "pool-a"))
	f.waitIPs("both", "203.0.113.2")
	f.waitEvent("both", EventDeprecatedAnnotation, `metallb.io/address-pool "pool-b" is used, metallb.universe.tf/address-pool "pool-a" is ignored`)

	s := f.get("req")
	base := s.DeepCopy()
	s.Annotations[annotations.LoadBalancerIPs] = "198.51.100.9"
	if err := f.c.Patch(f.ctx(), s, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	f.waitIPs("req", "198.51.100.9")
	f.waitEvent("req", EventClearAssignment, "198.51.100.7")
	poll.Until(t, 30*time.Second, "annotation pool-b", func() error {
		got := f.get("named").Annotations[annotations.AllocatedFromPool]
		if got != "pool-b" {
			return fmt.Errorf("annotation %q", got)
		}
		return nil
	})
}

// An address from a pool that no advertisement selects is allocated (as
// MetalLB does) but draws a PoolNotAdvertised warning; one from an
// advertised pool does not.
func TestWarnsWhenPoolNotAdvertised(t *testing.T) {
	f := newFixture(t)
	f.pool("quiet", []string{"198.51.100.10-198.51.100.12"}, func(p *v1beta1.IPAddressPool) {
		p.Spec.AutoAssign = ptr.To(false)
	})
	f.pool("announced", []string{"203.0.113.10-203.0.113.12"})
	if err := f.c.Create(f.ctx(), &v1beta1.L2Advertisement{
		ObjectMeta: metav1.ObjectMeta{Name: "l2", Namespace: f.herald},
		Spec:       v1beta1.L2AdvertisementSpec{IPAddressPools: []string{"announced"}},
	}); err != nil {
		t.Fatal(err)
	}
	f.start()
	inQuiet := func(s *corev1.Service) { s.Annotations = map[string]string{annotations.AddressPool: "quiet"} }

	f.svc("lonely", inQuiet)
	f.waitIPs("lonely", "198.51.100.10")
	f.waitEvent("lonely", EventPoolNotAdvertised,
		`IP ["198.51.100.10"] comes from IPAddressPool "quiet", which no L2Advertisement or BGPAdvertisement selects: no node announces it`)

	f.svc("web")
	f.waitIPs("web", "203.0.113.10")
	f.waitEvent("web", EventIPAllocated, `Assigned IP ["203.0.113.10"]`)
	// Events are written in order: once a later Service's warning is
	// stored, a warning for web would be too.
	f.svc("marker", inQuiet)
	f.waitEvent("marker", EventPoolNotAdvertised, "")
	var list corev1.EventList
	if err := f.c.List(f.ctx(), &list, client.InNamespace(f.ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if e.InvolvedObject.Name == "web" && e.Reason == EventPoolNotAdvertised {
			t.Errorf("web (advertised pool) got %s: %s", e.Reason, e.Message)
		}
	}
}

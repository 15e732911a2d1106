package allocation

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/annotations"
	"github.com/herald-lb/herald/internal/poll"
)

// Services with one sharing key and disjoint ports share an address; one
// whose port overlaps stays pending with a SharingConflict naming the other
// Service, and gets the address once that Service goes.
func TestSharing(t *testing.T) {
	f := newFixture(t)
	f.pool("pool-a", []string{"198.51.100.0/29"})
	f.start()
	f.svc("a", withAnnotation(annotations.AllowSharedIP, "k"), withPort(80))
	f.waitIPs("a", "198.51.100.0")
	f.svc("b", withAnnotation(annotations.AllowSharedIP, "k"), withPort(443))
	f.waitIPs("b", "198.51.100.0")
	f.svc("c", withAnnotation(annotations.AllowSharedIP, "k"), withPort(80),
		withAnnotation(annotations.LoadBalancerIPs, "198.51.100.0"))
	cond := f.waitCondition("c", ReasonSharingConflict)
	if cond.Status != "False" || !contains(cond.Message, f.ns+"/a") {
		t.Errorf("condition = %+v, want a message naming %s/a", cond, f.ns)
	}
	f.waitEvent("c", EventAllocationFailed, f.ns+"/a")
	if err := f.c.Delete(f.ctx(), f.get("a")); err != nil {
		t.Fatal(err)
	}
	f.waitIPs("c", "198.51.100.0")
	f.waitCondition("c", ReasonAllocated)
	f.waitIPs("b", "198.51.100.0")
}

// A RequireDualStack Service gets one address of each family from one pool,
// primary family first; PreferDualStack does too; SingleStack IPv6 gets v6.
func TestDualStack(t *testing.T) {
	f := newFixture(t)
	f.pool("v4only", []string{"203.0.113.0/28"})
	f.pool("dual", []string{"198.51.100.0/28", "2001:db8::/124"}, func(p *v1beta1.IPAddressPool) {
		p.Spec.AutoAssign = ptr.To(false)
	})
	f.start()
	require := corev1.IPFamilyPolicyRequireDualStack
	prefer := corev1.IPFamilyPolicyPreferDualStack
	f.svc("req", func(s *corev1.Service) {
		s.Spec.IPFamilyPolicy = &require
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
	}, withAnnotation(annotations.AddressPool, "dual"))
	f.waitIPs("req", "2001:db8::", "198.51.100.0")
	f.svc("pref", func(s *corev1.Service) {
		s.Spec.IPFamilyPolicy = &prefer
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	}, withAnnotation(annotations.AddressPool, "dual"))
	f.waitIPs("pref", "198.51.100.1", "2001:db8::1")
	// Without the annotation, the only autoAssign pool has no IPv6: a
	// RequireDualStack Service fails with FamilyUnavailable.
	f.svc("nov6", func(s *corev1.Service) {
		s.Spec.IPFamilyPolicy = &require
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	})
	f.waitCondition("nov6", ReasonFamilyUnavailable)
}

// With --lb-class set only Services of that class are handled; Services
// without a class are never touched.
func TestLoadBalancerClass(t *testing.T) {
	f := newFixture(t)
	f.pool("pool-a", []string{"198.51.100.0/28"})
	const class = "herald.io/test"
	r := f.start(func(o *Options) { o.LBClass = class })
	classless := f.svc("classless")
	f.svc("mine", func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr.To(class) })
	other := f.svc("other", func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr.To("example.com/other") })
	f.waitIPs("mine", "198.51.100.0")
	f.waitCached(r, classless, false)
	f.waitCached(r, other, false)
	waitQuiet(t, r.ctrl.idle)
	for _, name := range []string{"classless", "other"} {
		s := f.get(name)
		if len(s.Status.LoadBalancer.Ingress) > 0 || len(s.Status.Conditions) > 0 || s.Annotations[annotations.AllocatedFromPool] != "" {
			t.Errorf("%s was touched: %+v", name, s.Status)
		}
	}
}

// A pool edit that removes a held address re-addresses its Service with a
// ClearAssignment event; other Services keep theirs.
func TestPoolEditReaddresses(t *testing.T) {
	f := newFixture(t)
	f.pool("pool-a", []string{"198.51.100.0/30", "198.51.100.8/30"})
	f.start()
	f.svc("one")
	f.waitIPs("one", "198.51.100.0")
	f.svc("two", withAnnotation(annotations.LoadBalancerIPs, "198.51.100.9"))
	f.waitIPs("two", "198.51.100.9")
	var p v1beta1.IPAddressPool
	if err := f.c.Get(f.ctx(), client.ObjectKey{Namespace: f.herald, Name: "pool-a"}, &p); err != nil {
		t.Fatal(err)
	}
	base := p.DeepCopy()
	p.Spec.Addresses = []string{"198.51.100.4/30", "198.51.100.8/30"}
	if err := f.c.Patch(f.ctx(), &p, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	f.waitIPs("one", "198.51.100.4")
	f.waitEvent("one", EventClearAssignment, "198.51.100.0")
	if got := ingressStrings(f.get("two")); len(got) != 1 || got[0] != "198.51.100.9" {
		t.Errorf("two = %v, want unchanged 198.51.100.9", got)
	}
	// Removing the pool leaves the Services without addresses, pending.
	if err := f.c.Delete(f.ctx(), &p); err != nil {
		t.Fatal(err)
	}
	f.waitIPs("one")
	f.waitCondition("one", ReasonNoPoolMatches)
	f.waitCondition("two", ReasonRequestedIPNotInPool)
	// A new pool serves them again.
	f.pool("pool-b", []string{"198.51.100.8/29"})
	f.waitIPs("two", "198.51.100.9")
	f.waitIPs("one", "198.51.100.8")
}

// Changing a Namespace's labels re-checks its Services: a pending one gets
// an address from a pool whose namespaceSelector now matches.
func TestNamespaceLabels(t *testing.T) {
	f := newFixture(t)
	f.pool("team", []string{"198.51.100.0/28"}, func(p *v1beta1.IPAddressPool) {
		p.Spec.ServiceAllocation = &v1beta1.ServiceAllocation{NamespaceSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"team": "blue"}}}}
	})
	f.start()
	f.svc("web")
	f.waitCondition("web", ReasonNoPoolMatches)
	var ns corev1.Namespace
	if err := f.c.Get(f.ctx(), client.ObjectKey{Name: f.ns}, &ns); err != nil {
		t.Fatal(err)
	}
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels["team"] = "blue"
	if err := f.c.Update(f.ctx(), &ns); err != nil {
		t.Fatal(err)
	}
	f.waitIPs("web", "198.51.100.0")
	if meta.FindStatusCondition(f.get("web").Status.Conditions, ConditionType).Reason != ReasonAllocated {
		t.Errorf("condition not updated")
	}
	// The label removed, "team" no longer selects the namespace: the
	// Service moves to a pool that serves every namespace, and the
	// ClearAssignment event says why the old address went.
	f.pool("any", []string{"203.0.113.0/29"})
	// The pool's status counters are written once the controller's
	// configuration has it: only then is the label removed.
	poll.Until(t, 30*time.Second, "pool any in the configuration", func() error {
		var p v1beta1.IPAddressPool
		if err := f.c.Get(f.ctx(), client.ObjectKey{Namespace: f.herald, Name: "any"}, &p); err != nil {
			return err
		}
		if p.Status.AvailableIPv4 != 8 {
			return fmt.Errorf("status %+v", p.Status)
		}
		return nil
	})
	if err := f.c.Get(f.ctx(), client.ObjectKey{Name: f.ns}, &ns); err != nil {
		t.Fatal(err)
	}
	delete(ns.Labels, "team")
	if err := f.c.Update(f.ctx(), &ns); err != nil {
		t.Fatal(err)
	}
	f.waitIPs("web", "203.0.113.0")
	f.waitEvent("web", EventClearAssignment, `address pool "team", whose serviceAllocation does not select Service`)
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

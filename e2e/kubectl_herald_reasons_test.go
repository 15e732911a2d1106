package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/e2e/lab"
	"github.com/herald-lb/herald/internal/announce"
	"github.com/herald-lb/herald/internal/explain"
	"github.com/herald-lb/herald/internal/poll"
)

// decideReasons are the reasons announce.Decide gives, in their order. The
// reasons after ReasonNoMatchingInterface are produced by callers (a
// deleted Service, a changed IP), not by a decision, and are left out.
var decideReasons = []announce.Reason{
	announce.ReasonNotOwner,
	announce.ReasonNoMatchingAdvertisement,
	announce.ReasonSharedIPWithServiceSelector,
	announce.ReasonConflictingAdvertisements,
	announce.ReasonNodeNetworkUnavailable,
	announce.ReasonNodeLabeledExcludeBalancers,
	announce.ReasonNoLocalEndpoints,
	announce.ReasonNoEndpoints,
	announce.ReasonNoIPAllocated,
	announce.ReasonInvalidIP,
	announce.ReasonIPNotAllowed,
	announce.ReasonNotLoadBalancer,
	announce.ReasonOtherLoadBalancerClass,
	announce.ReasonNoMatchingInterface,
}

// reasonsOf returns every reason a why report names: the Service's own
// (notAnnounced), every node's verdict in either mode, and ipNotAllowed,
// which the report gives as a problem of the address.
func reasonsOf(r *explain.WhyReport) []string {
	var rs []string
	if r.NotAnnounced != "" {
		rs = append(rs, r.NotAnnounced)
	}
	for _, ip := range r.IPs {
		for _, m := range []*explain.ModeReport{ip.L2, ip.BGP} {
			if m == nil {
				continue
			}
			for _, n := range m.Nodes {
				if n.Reason != "" {
					rs = append(rs, n.Reason)
				}
			}
		}
	}
	for _, p := range r.Problems {
		if strings.Contains(p, "("+announce.ReasonIPNotAllowed.String()+")") {
			rs = append(rs, announce.ReasonIPNotAllowed.String())
		}
	}
	return rs
}

// testPluginReasons produces, against the real API server and speakers,
// every reason announce.Decide can give, and checks that `kubectl herald
// why` names it, in its JSON and in its table. invalidIP is the exception:
// the API server refuses an ingress IP that does not parse (checked here),
// so it can only come from a stored object another API server wrote; the
// explain unit tests cover it. It runs after the cases of TestKubectlHerald
// that already produce noMatchingAdvertisement, noLocalEndpoints and
// noIPAllocated, and names them again here so that the set is checked whole.
func testPluginReasons(t *testing.T, e *env, dir string) {
	if got, want := announce.ReasonNoMatchingInterface+1, announce.ReasonLoadBalancerIPChanged; got != want {
		t.Fatalf("announce has a reason after noMatchingInterface that this test does not produce: %v", got)
	}
	nodes := e.allNodes()
	last := nodes[len(nodes)-1]
	labelled := func(v string) func(*corev1.Service) {
		return func(s *corev1.Service) { s.Labels = map[string]string{"plugin": v} }
	}
	selector := []metav1.LabelSelector{{MatchLabels: map[string]string{"plugin": "shared"}}}

	// sharedIPWithServiceSelector: an allow-shared-ip Service matched by
	// an L2Advertisement with serviceSelectors.
	shared := pool("plugin-shared", "198.51.100.64/32")
	shared.Spec.AutoAssign = new(bool)
	e.put(t, shared)
	sharedAd := l2adv("plugin-shared", "plugin-shared")
	sharedAd.Spec.ServiceSelectors = selector
	e.put(t, sharedAd)
	// conflictingAdvertisements: two BGPAdvertisements with
	// serviceSelectors (the configuration cannot tell that they meet) and
	// different localPref both cover the Service.
	conflict := pool("plugin-conflict", "203.0.113.20/32")
	conflict.Spec.AutoAssign = new(bool)
	e.put(t, conflict)
	for i, lp := range []uint32{100, 200} {
		e.put(t, &v1beta1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("plugin-conflict-%d", i), Namespace: lab.HeraldNamespace},
			Spec: v1beta1.BGPAdvertisementSpec{IPAddressPools: []string{"plugin-conflict"}, LocalPref: lp,
				ServiceSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"plugin": "conflict"}}}}})
	}
	// noEndpoints needs an address: a pool of its own (plugin is full).
	more := pool("plugin-more", "198.51.100.65/32")
	more.Spec.AutoAssign = new(bool)
	e.put(t, more)
	e.put(t, l2adv("plugin-more", "plugin-more"))
	// ipNotAllowed: the pool of an assigned address is deleted while the
	// controller is down (below).
	gone := pool("plugin-gone", "198.51.100.66/32")
	gone.Spec.AutoAssign = new(bool)
	e.put(t, gone)
	e.put(t, l2adv("plugin-gone", "plugin-gone"))
	// noMatchingInterface: the advertisement names an interface no node has.
	noif := pool("plugin-noif", "198.51.100.67/32")
	noif.Spec.AutoAssign = new(bool)
	e.put(t, noif)
	noifAd := l2adv("plugin-noif", "plugin-noif")
	noifAd.Spec.Interfaces = []string{"eth5"}
	e.put(t, noifAd)
	if err := e.h.WaitConfigValid(testCtx(t, 2*time.Minute), "controller"); err != nil {
		t.Fatal(err)
	}

	pinned := func(p string) func(*corev1.Service) { return withAnnotation("metallb.io/address-pool", p) }
	e.createService(t, lbService(pluginNS, "shared-selector", pinned("plugin-shared"), labelled("shared"),
		withAnnotation("metallb.io/allow-shared-ip", "k")), nodes...)
	e.createService(t, lbService(pluginNS, "conflict", pinned("plugin-conflict"), labelled("conflict")), nodes...)
	e.createService(t, lbService(pluginNS, "no-endpoints", pinned("plugin-more")))
	e.createService(t, lbService(pluginNS, "pool-deleted", pinned("plugin-gone")), nodes...)
	e.ips(t, pluginNS, "pool-deleted", 1)
	e.createService(t, lbService(pluginNS, "no-interface", pinned("plugin-noif")), nodes...)
	e.createService(t, lbService(pluginNS, "cluster-ip", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP }), nodes...)
	other := "example.com/other"
	e.createService(t, lbService(pluginNS, "other-class", func(s *corev1.Service) { s.Spec.LoadBalancerClass = &other }), nodes...)

	type reasonCase struct {
		svc    string
		reason announce.Reason
		// node, when set, must be the node whose verdict names reason.
		node string
		// setup and undo change the cluster around the check.
		setup, undo func(t *testing.T)
	}
	cases := []reasonCase{
		{svc: "healthy", reason: announce.ReasonNotOwner},
		{svc: "selector-no-node", reason: announce.ReasonNoMatchingAdvertisement},
		{svc: "shared-selector", reason: announce.ReasonSharedIPWithServiceSelector},
		{svc: "conflict", reason: announce.ReasonConflictingAdvertisements},
		{svc: "healthy", reason: announce.ReasonNodeNetworkUnavailable, node: last,
			setup: func(t *testing.T) { e.networkUnavailable(t, last, corev1.ConditionTrue) },
			undo:  func(t *testing.T) { e.networkUnavailable(t, last, corev1.ConditionFalse) }},
		{svc: "healthy", reason: announce.ReasonNodeLabeledExcludeBalancers, node: last,
			setup: func(t *testing.T) {
				e.labelNode(t, last, "node.kubernetes.io/exclude-from-external-load-balancers", "true")
			},
			undo: func(t *testing.T) {
				e.labelNode(t, last, "node.kubernetes.io/exclude-from-external-load-balancers", "")
			}},
		{svc: "local-no-endpoints", reason: announce.ReasonNoLocalEndpoints},
		{svc: "no-endpoints", reason: announce.ReasonNoEndpoints},
		{svc: "pool-full", reason: announce.ReasonNoIPAllocated},
		// The controller, when it runs, takes back an address whose pool
		// is deleted (the Service is then pending: noIPAllocated); with
		// the controller down the speakers meet the address outside every
		// pool. Deleting a pool is never refused (failurePolicy Ignore).
		{svc: "pool-deleted", reason: announce.ReasonIPNotAllowed,
			setup: func(t *testing.T) {
				if err := e.h.StopController(); err != nil {
					t.Fatal(err)
				}
				e.del(t, l2adv("plugin-gone"))
				e.del(t, pool("plugin-gone"))
			},
			undo: func(t *testing.T) {
				if err := e.h.StartController(testCtx(t, 2*time.Minute)); err != nil {
					t.Fatal(err)
				}
			}},
		{svc: "cluster-ip", reason: announce.ReasonNotLoadBalancer},
		{svc: "other-class", reason: announce.ReasonOtherLoadBalancerClass},
		{svc: "no-interface", reason: announce.ReasonNoMatchingInterface},
	}
	produced := map[announce.Reason]bool{}
	for _, c := range cases {
		t.Run(c.reason.String(), func(t *testing.T) {
			if c.setup != nil {
				c.setup(t)
				t.Cleanup(func() { c.undo(t) })
			}
			var seen []string
			poll.Until(t, time.Minute, "kubectl herald why svc/"+c.svc+" names "+c.reason.String(), func() error {
				r, _, _ := runWhy(t, e, dir, pluginNS, c.svc)
				seen = reasonsOf(r)
				if c.node != "" {
					for _, ip := range r.IPs {
						for _, m := range []*explain.ModeReport{ip.L2, ip.BGP} {
							if m == nil {
								continue
							}
							for _, n := range m.Nodes {
								if n.Node == c.node && n.Reason == c.reason.String() {
									return nil
								}
							}
						}
					}
					return fmt.Errorf("node %s's verdict does not name it; reasons %q, problems %q", c.node, seen, r.Problems)
				}
				if !slices.Contains(seen, c.reason.String()) {
					return fmt.Errorf("reasons %q, problems %q", seen, r.Problems)
				}
				return nil
			})
			table, _ := runPlugin(t, e, dir, "why", "svc/"+c.svc, "-n", pluginNS)
			if !strings.Contains(table, c.reason.String()) {
				t.Errorf("the table does not name %s:\n%s", c.reason, table)
			}
			produced[c.reason] = true
		})
	}

	// invalidIP: the API server refuses to store an ingress IP that does
	// not parse, so no speaker meets one through it.
	t.Run(announce.ReasonInvalidIP.String(), func(t *testing.T) {
		ctx := testCtx(t, time.Minute)
		svc, err := e.k.CoreV1().Services(pluginNS).Get(ctx, "no-endpoints", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.300"}}
		_, err = e.k.CoreV1().Services(pluginNS).UpdateStatus(ctx, svc, metav1.UpdateOptions{})
		if err == nil || !strings.Contains(err.Error(), "198.51.100.300") {
			t.Fatalf("the API server stored an unparsable ingress IP (err %v): invalidIP is reachable, produce it here", err)
		}
		produced[announce.ReasonInvalidIP] = true
	})

	for _, r := range decideReasons {
		if !produced[r] {
			t.Errorf("no scenario produced %s", r)
		}
	}
}

// networkUnavailable sets node's NetworkUnavailable condition to status.
func (e *env) networkUnavailable(t *testing.T, node string, status corev1.ConditionStatus) {
	t.Helper()
	poll.Until(t, time.Minute, "set NetworkUnavailable "+string(status)+" on "+node, func() error {
		ctx := testCtx(t, time.Minute)
		n, err := e.k.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cond := corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: status, Reason: "HeraldE2E",
			LastTransitionTime: metav1.Now()}
		i := slices.IndexFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == corev1.NodeNetworkUnavailable })
		if i < 0 {
			n.Status.Conditions = append(n.Status.Conditions, cond)
		} else {
			n.Status.Conditions[i] = cond
		}
		_, err = e.k.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

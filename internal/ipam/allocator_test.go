package ipam

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
)

// step is one call in a scenario: Release(release), Import(req.Key, imp,
// req) when imp is set, or else Allocate(req). want is fmtResult of the
// outcome ("pool:ip,ip" or a sentinel name; "" for Release); msg, if set,
// must appear in the error message.
type step struct {
	release string
	// shows: SetStatus(req.Key, shows) ("freed" or "kept"); cleared:
	// SetStatus(cleared, nil); setPools: SetPools (the changed keys).
	shows    []string
	cleared  string
	setPools []Pool
	imp      []string
	req      Request
	want     string
	msg      string
}

type scenario struct {
	name  string
	pools []Pool
	steps []step
}

func runScenarios(t *testing.T, cases []scenario) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := newAlloc(t, tc.pools...)
			for i, s := range tc.steps {
				var got string
				var err error
				switch {
				case s.release != "":
					a.Release(s.release)
				case s.shows != nil:
					got = map[bool]string{true: "freed", false: "kept"}[a.SetStatus(s.req.Key, addrs(s.shows...))]
				case s.cleared != "":
					got = map[bool]string{true: "freed", false: "kept"}[a.SetStatus(s.cleared, nil)]
				case s.setPools != nil:
					var keys []string
					keys, err = a.SetPools(s.setPools)
					got = strings.Join(keys, ",")
				case s.imp != nil:
					var asg Assignment
					asg, err = a.Import(s.req.Key, addrs(s.imp...), s.req)
					got = fmtResult(asg, err)
				default:
					var asg Assignment
					asg, err = a.Allocate(s.req)
					got = fmtResult(asg, err)
				}
				if got != s.want {
					t.Fatalf("step %d (%s): got %q, want %q (err: %v)", i, s.req.Key, got, s.want, err)
				}
				if s.msg != "" && (err == nil || !strings.Contains(err.Error(), s.msg)) {
					t.Fatalf("step %d: error %v does not mention %q", i, err, s.msg)
				}
				if verr := a.verify(); verr != nil {
					t.Fatalf("step %d: invariant broken: %v", i, verr)
				}
			}
		})
	}
}

func TestPoolOrder(t *testing.T) {
	runScenarios(t, []scenario{
		{
			name:  "general pools by name, not by slice order",
			pools: []Pool{mkPool("zeta", "203.0.113.0/30"), mkPool("alpha", "198.51.100.0/30")},
			steps: []step{{req: svc("ns/a"), want: "alpha:198.51.100.0"}},
		},
		{
			name:  "general pools fill in name order",
			pools: []Pool{mkPool("b", "203.0.113.0/31"), mkPool("a", "198.51.100.0/31")},
			steps: []step{
				{req: svc("ns/1"), want: "a:198.51.100.0"},
				{req: svc("ns/2"), want: "a:198.51.100.1"},
				{req: svc("ns/3"), want: "b:203.0.113.0"},
				{req: svc("ns/4"), want: "b:203.0.113.1"},
				{req: svc("ns/5"), want: "ErrPoolExhausted", msg: `pool "a" has no free IPv4 address; address pool "b"`},
			},
		},
		{
			name: "priority lower first, 0 last, ties by name, then general",
			pools: []Pool{
				mkPool("gen", "203.0.113.64/32"),
				mkPool("p0", "203.0.113.0/32").sa(ServiceAllocation{Namespaces: []string{"ns"}}),
				mkPool("p2b", "203.0.113.3/32").sa(ServiceAllocation{Priority: 2, Namespaces: []string{"ns"}}),
				mkPool("p2a", "203.0.113.2/32").sa(ServiceAllocation{Priority: 2, Namespaces: []string{"ns"}}),
				mkPool("p1", "203.0.113.1/32").sa(ServiceAllocation{Priority: 1, Namespaces: []string{"ns"}}),
			},
			steps: []step{
				{req: svc("ns/1"), want: "p1:203.0.113.1"},
				{req: svc("ns/2"), want: "p2a:203.0.113.2"},
				{req: svc("ns/3"), want: "p2b:203.0.113.3"},
				{req: svc("ns/4"), want: "p0:203.0.113.0"},
				{req: svc("ns/5"), want: "gen:203.0.113.64"},
				{req: svc("ns/6"), want: "ErrPoolExhausted"},
			},
		},
		{
			name: "serviceAllocation pools are never a fallback",
			pools: []Pool{
				mkPool("other", "203.0.113.0/30").sa(ServiceAllocation{Namespaces: []string{"other"}}),
			},
			steps: []step{{req: svc("ns/a"), want: "ErrNoPoolMatches", msg: "ns/a"}},
		},
		{
			name:  "autoAssign false is used only on request",
			pools: []Pool{mkPool("manual", "198.51.100.0/30").manual()},
			steps: []step{
				{req: svc("ns/a"), want: "ErrNoPoolMatches"},
				{req: svc("ns/b").inPool("manual"), want: "manual:198.51.100.0"},
				{req: svc("ns/c").want("198.51.100.3"), want: "manual:198.51.100.3"},
			},
		},
		{
			name: "autoAssign false with matching serviceAllocation is not automatic",
			pools: []Pool{
				mkPool("pinned", "198.51.100.0/30").manual().sa(ServiceAllocation{Priority: 1, Namespaces: []string{"ns"}}),
				mkPool("gen", "203.0.113.0/30"),
			},
			steps: []step{{req: svc("ns/a"), want: "gen:203.0.113.0"}},
		},
		{
			name:  "no pools",
			steps: []step{{req: svc("ns/a"), want: "ErrNoPoolMatches"}},
		},
		{
			name:  "configured prefix order, not address order",
			pools: []Pool{mkPool("p", "203.0.113.8/31", "198.51.100.0/31")},
			steps: []step{
				{req: svc("ns/1"), want: "p:203.0.113.8"},
				{req: svc("ns/2"), want: "p:203.0.113.9"},
				{req: svc("ns/3"), want: "p:198.51.100.0"},
			},
		},
	})
}

func TestServiceAllocationMatching(t *testing.T) {
	prodNS := map[string]string{"env": "prod"}
	web := map[string]string{"app": "web"}
	mk := func(sa ServiceAllocation) []Pool {
		return []Pool{mkPool("pinned", "198.51.100.0/30").sa(sa), mkPool("gen", "203.0.113.0/30")}
	}
	withNS := func(r Request, l map[string]string) Request { r.NamespaceLabels = l; return r }
	withLabels := func(r Request, l map[string]string) Request { r.Labels = l; return r }
	runScenarios(t, []scenario{
		{name: "namespace listed", pools: mk(ServiceAllocation{Namespaces: []string{"a", "b"}}), steps: []step{
			{req: svc("b/x"), want: "pinned:198.51.100.0"},
			{req: svc("c/x"), want: "gen:203.0.113.0"},
		}},
		{name: "namespace selector", pools: mk(ServiceAllocation{NamespaceSelectors: nil}.withNSSel(sel(t, "env=prod"))), steps: []step{
			{req: withNS(svc("p/x"), prodNS), want: "pinned:198.51.100.0"},
			{req: withNS(svc("q/x"), map[string]string{"env": "dev"}), want: "gen:203.0.113.0"},
			{req: svc("r/x"), want: "gen:203.0.113.1"},
		}},
		{name: "namespace list OR namespace selector", pools: mk(ServiceAllocation{Namespaces: []string{"a"}}.withNSSel(sel(t, "env=prod"))), steps: []step{
			{req: svc("a/x"), want: "pinned:198.51.100.0"},
			{req: withNS(svc("p/x"), prodNS), want: "pinned:198.51.100.1"},
			{req: svc("z/x"), want: "gen:203.0.113.0"},
		}},
		{name: "service selector", pools: mk(ServiceAllocation{ServiceSelectors: nil}.withSvcSel(sel(t, "app=db"), sel(t, "app=web"))), steps: []step{
			{req: withLabels(svc("n/x"), web), want: "pinned:198.51.100.0"},
			{req: withLabels(svc("n/y"), map[string]string{"app": "cache"}), want: "gen:203.0.113.0"},
		}},
		{name: "namespace AND service selector", pools: mk(ServiceAllocation{Namespaces: []string{"a"}}.withSvcSel(sel(t, "app=web"))), steps: []step{
			{req: withLabels(svc("a/x"), web), want: "pinned:198.51.100.0"},
			{req: withLabels(svc("b/x"), web), want: "gen:203.0.113.0"},
			{req: svc("a/y"), want: "gen:203.0.113.1"},
		}},
		{name: "empty serviceAllocation matches everything", pools: mk(ServiceAllocation{}), steps: []step{
			{req: svc("any/x"), want: "pinned:198.51.100.0"},
		}},
		{name: "pool annotation still applies serviceAllocation", pools: mk(ServiceAllocation{Namespaces: []string{"a"}}), steps: []step{
			{req: svc("b/x").inPool("pinned"), want: "ErrNoPoolMatches", msg: `"pinned"`},
			{req: svc("a/x").inPool("pinned"), want: "pinned:198.51.100.0"},
		}},
		{name: "requested IP still applies serviceAllocation", pools: mk(ServiceAllocation{Namespaces: []string{"a"}}), steps: []step{
			{req: svc("b/x").want("198.51.100.2"), want: "ErrNoPoolMatches"},
			{req: svc("a/x").want("198.51.100.2"), want: "pinned:198.51.100.2"},
		}},
	})
}

func (s ServiceAllocation) withNSSel(sels ...labels.Selector) ServiceAllocation {
	s.NamespaceSelectors = append(s.NamespaceSelectors, sels...)
	return s
}

func (s ServiceAllocation) withSvcSel(sels ...labels.Selector) ServiceAllocation {
	s.ServiceSelectors = append(s.ServiceSelectors, sels...)
	return s
}

func TestAvoidBuggyIPs(t *testing.T) {
	runScenarios(t, []scenario{
		{name: "skips .0 and .255", pools: []Pool{mkPool("p", "198.51.100.254/31", "203.0.113.0/31").buggy()}, steps: []step{
			{req: svc("n/1"), want: "p:198.51.100.254"},
			{req: svc("n/2"), want: "p:203.0.113.1"},
			{req: svc("n/3"), want: "ErrPoolExhausted"},
		}},
		{name: "requested .0 is refused", pools: []Pool{mkPool("p", "198.51.100.0/24").buggy()}, steps: []step{
			{req: svc("n/1").want("198.51.100.0"), want: "ErrRequestedIPNotInPool", msg: "avoidBuggyIPs"},
			{req: svc("n/2").want("198.51.100.255"), want: "ErrRequestedIPNotInPool"},
			{req: svc("n/3").want("198.51.100.1"), want: "p:198.51.100.1"},
		}},
		{name: "without the flag .0 is fine", pools: []Pool{mkPool("p", "198.51.100.0/24")}, steps: []step{
			{req: svc("n/1"), want: "p:198.51.100.0"},
		}},
		{name: "IPv6 unaffected", pools: []Pool{mkPool("p", "2001:db8::/126").buggy()}, steps: []step{
			{req: svc("n/1").fam(SingleStack, IPv6), want: "p:2001:db8::"},
		}},
	})
}

func TestRequestedIPs(t *testing.T) {
	pools := []Pool{mkPool("a", "198.51.100.0/28", "2001:db8:a::/120"), mkPool("b", "203.0.113.0/28", "2001:db8:b::/120")}
	runScenarios(t, []scenario{
		{name: "requested IP wins over order", pools: pools, steps: []step{
			{req: svc("n/1").want("203.0.113.7"), want: "b:203.0.113.7"},
			{req: svc("n/2"), want: "a:198.51.100.0"},
		}},
		{name: "not in any pool", pools: pools, steps: []step{
			{req: svc("n/1").want("192.0.2.1"), want: "ErrRequestedIPNotInPool", msg: "192.0.2.1"},
		}},
		{name: "with annotation it must be in that pool", pools: pools, steps: []step{
			{req: svc("n/1").want("203.0.113.7").inPool("a"), want: "ErrRequestedIPNotInPool", msg: `"a"`},
			{req: svc("n/1").want("203.0.113.7").inPool("b"), want: "b:203.0.113.7"},
		}},
		{name: "in use without sharing", pools: pools, steps: []step{
			{req: svc("n/1").want("198.51.100.5"), want: "a:198.51.100.5"},
			{req: svc("n/2").want("198.51.100.5"), want: "ErrIPInUse", msg: "n/1"},
		}},
		{name: "two of one family", pools: pools, steps: []step{
			{req: svc("n/1").fam(PreferDualStack, IPv4, IPv6).want("198.51.100.1", "198.51.100.2"), want: "ErrInvalidRequest"},
		}},
		{name: "family the Service does not have", pools: pools, steps: []step{
			{req: svc("n/1").want("2001:db8:a::1"), want: "ErrInvalidRequest", msg: "IPv6"},
		}},
		{name: "dual-stack requested pair", pools: pools, steps: []step{
			{req: svc("n/1").fam(RequireDualStack, IPv6, IPv4).want("198.51.100.3", "2001:db8:a::3"), want: "a:2001:db8:a::3,198.51.100.3"},
		}},
		{name: "pair split over pools", pools: pools, steps: []step{
			{req: svc("n/1").fam(PreferDualStack, IPv4, IPv6).want("198.51.100.3", "2001:db8:b::3"), want: "ErrRequestedIPNotInPool", msg: "different"},
		}},
		{name: "RequireDualStack with one requested IP", pools: pools, steps: []step{
			{req: svc("n/1").fam(RequireDualStack, IPv4, IPv6).want("198.51.100.3"), want: "ErrInvalidRequest"},
		}},
		{name: "changing the requested IP moves the Service", pools: pools, steps: []step{
			{req: svc("n/1").want("198.51.100.3"), want: "a:198.51.100.3"},
			{req: svc("n/1").want("198.51.100.4"), want: "a:198.51.100.4"},
			{req: svc("n/2").want("198.51.100.3"), want: "a:198.51.100.3"},
			{req: svc("n/1"), want: "a:198.51.100.4"},
		}},
		{name: "IPv4-mapped IPv6 is treated as IPv4", pools: pools, steps: []step{
			{req: svc("n/1").want("::ffff:198.51.100.9"), want: "a:198.51.100.9"},
		}},
	})
}

func TestPoolAnnotation(t *testing.T) {
	pools := []Pool{mkPool("auto", "198.51.100.0/30"), mkPool("manual", "203.0.113.0/31").manual(), mkPool("v6", "2001:db8::/126")}
	runScenarios(t, []scenario{
		{name: "annotation beats order", pools: pools, steps: []step{
			{req: svc("n/1").inPool("manual"), want: "manual:203.0.113.0"},
			{req: svc("n/2").inPool("manual"), want: "manual:203.0.113.1"},
			{req: svc("n/3").inPool("manual"), want: "ErrPoolExhausted", msg: `"manual"`},
		}},
		{name: "unknown pool", pools: pools, steps: []step{
			{req: svc("n/1").inPool("nope"), want: "ErrUnknownPool", msg: `"nope"`},
		}},
		{name: "pool without the family", pools: pools, steps: []step{
			{req: svc("n/1").inPool("v6"), want: "ErrFamilyUnavailable", msg: "IPv4"},
		}},
		{name: "changing the annotation moves the Service", pools: pools, steps: []step{
			{req: svc("n/1"), want: "auto:198.51.100.0"},
			{req: svc("n/1").inPool("manual"), want: "manual:203.0.113.0"},
			{req: svc("n/2"), want: "auto:198.51.100.0"},
		}},
	})
}

func TestDualStack(t *testing.T) {
	v4 := mkPool("a-v4", "198.51.100.0/30")
	v6 := mkPool("b-v6", "2001:db8:6::/126")
	dual := mkPool("c-dual", "203.0.113.0/30", "2001:db8:d::/126")
	runScenarios(t, []scenario{
		{name: "RequireDualStack takes both from one pool", pools: []Pool{v4, v6, dual}, steps: []step{
			{req: svc("n/1").fam(RequireDualStack, IPv4, IPv6), want: "c-dual:203.0.113.0,2001:db8:d::"},
			{req: svc("n/2").fam(RequireDualStack, IPv6, IPv4), want: "c-dual:2001:db8:d::1,203.0.113.1"},
		}},
		{name: "RequireDualStack without a dual pool", pools: []Pool{v4, v6}, steps: []step{
			{req: svc("n/1").fam(RequireDualStack, IPv4, IPv6), want: "ErrFamilyUnavailable", msg: "IPv4 and IPv6"},
		}},
		{name: "RequireDualStack needs two families", pools: []Pool{dual}, steps: []step{
			{req: svc("n/1").fam(RequireDualStack, IPv4), want: "ErrInvalidRequest"},
		}},
		{name: "PreferDualStack prefers a dual pool over earlier single pools", pools: []Pool{v4, v6, dual}, steps: []step{
			{req: svc("n/1").fam(PreferDualStack, IPv6, IPv4), want: "c-dual:2001:db8:d::,203.0.113.0"},
		}},
		{name: "PreferDualStack falls back to primary then secondary", pools: []Pool{v4, v6}, steps: []step{
			{req: svc("n/1").fam(PreferDualStack, IPv6, IPv4), want: "b-v6:2001:db8:6::"},
			{req: svc("n/2").fam(PreferDualStack, IPv4, IPv6), want: "a-v4:198.51.100.0"},
			{req: svc("n/3").fam(PreferDualStack, IPv4, IPv6).inPool("b-v6"), want: "b-v6:2001:db8:6::1"},
		}},
		{name: "PreferDualStack with one family is single-stack", pools: []Pool{dual}, steps: []step{
			{req: svc("n/1").fam(PreferDualStack, IPv6), want: "c-dual:2001:db8:d::"},
		}},
		{name: "SingleStack follows Families[0]", pools: []Pool{v4, v6}, steps: []step{
			{req: svc("n/1").fam(SingleStack, IPv6), want: "b-v6:2001:db8:6::"},
			{req: svc("n/2").fam(SingleStack, IPv4, IPv6), want: "a-v4:198.51.100.0"},
		}},
		{name: "no pool has the family", pools: []Pool{v4}, steps: []step{
			{req: svc("n/1").fam(SingleStack, IPv6), want: "ErrFamilyUnavailable"},
		}},
		{name: "PreferDualStack completes its pair later from the same pool", pools: []Pool{mkPool("d", "203.0.113.0/31", "2001:db8:d::/128")}, steps: []step{
			{req: svc("n/full").fam(SingleStack, IPv6), want: "d:2001:db8:d::"},
			{req: svc("n/1").fam(PreferDualStack, IPv4, IPv6), want: "d:203.0.113.0"},
			{release: "n/full"},
			{req: svc("n/1").fam(PreferDualStack, IPv4, IPv6), want: "d:203.0.113.0,2001:db8:d::"},
		}},
		{name: "dual to single keeps the primary IP", pools: []Pool{dual}, steps: []step{
			{req: svc("n/1").fam(RequireDualStack, IPv4, IPv6), want: "c-dual:203.0.113.0,2001:db8:d::"},
			{req: svc("n/1").fam(SingleStack, IPv4), want: "c-dual:203.0.113.0"},
			{req: svc("n/2").fam(SingleStack, IPv6), want: "c-dual:2001:db8:d::"},
		}},
		{name: "RequireDualStack that cannot complete moves to a dual pool", pools: []Pool{v4, dual}, steps: []step{
			{req: svc("n/1").fam(SingleStack, IPv4), want: "a-v4:198.51.100.0"},
			{req: svc("n/1").fam(RequireDualStack, IPv4, IPv6), want: "c-dual:203.0.113.0,2001:db8:d::"},
		}},
	})
}

func TestSharing(t *testing.T) {
	p := []Pool{mkPool("p", "198.51.100.0/29")}
	runScenarios(t, []scenario{
		{name: "same key joins the existing IP", pools: p, steps: []step{
			{req: svc("n/0"), want: "p:198.51.100.0"},
			{req: svc("n/1").share("k", "TCP/80"), want: "p:198.51.100.1"},
			{req: svc("n/2").share("k", "TCP/443"), want: "p:198.51.100.1"},
			{req: svc("n/3").share("k", "UDP/80"), want: "p:198.51.100.1"},
		}},
		{name: "port overlap takes a new IP, joining the lowest compatible one", pools: p, steps: []step{
			{req: svc("n/1").share("k", "TCP/80"), want: "p:198.51.100.0"},
			{req: svc("n/2").share("k", "TCP/80"), want: "p:198.51.100.1"},
			{req: svc("n/3").share("k", "TCP/80", "TCP/443"), want: "p:198.51.100.2"},
			{req: svc("n/4").share("k", "TCP/443"), want: "p:198.51.100.0"},
			{req: svc("n/5").share("k", "TCP/443"), want: "p:198.51.100.1"},
		}},
		{name: "requested shared IP with overlapping port", pools: p, steps: []step{
			{req: svc("n/1").share("k", "TCP/80").want("198.51.100.4"), want: "p:198.51.100.4"},
			{req: svc("n/2").share("k", "TCP/80").want("198.51.100.4"), want: "ErrSharingConflict", msg: "n/1"},
			{req: svc("n/2").share("k", "TCP/81").want("198.51.100.4"), want: "p:198.51.100.4"},
		}},
		{name: "different keys conflict", pools: p, steps: []step{
			{req: svc("n/1").share("k1", "TCP/80").want("198.51.100.4"), want: "p:198.51.100.4"},
			{req: svc("n/2").share("k2", "TCP/81").want("198.51.100.4"), want: "ErrSharingConflict", msg: `"k1"`},
		}},
		{name: "no key on either side", pools: p, steps: []step{
			{req: svc("n/1").want("198.51.100.4"), want: "p:198.51.100.4"},
			{req: svc("n/2").share("k", "TCP/81").want("198.51.100.4"), want: "ErrIPInUse", msg: "n/1"},
			{req: svc("n/3").share("k", "TCP/81").want("198.51.100.5"), want: "p:198.51.100.5"},
			{req: svc("n/4").want("198.51.100.5"), want: "ErrIPInUse"},
		}},
		{name: "backend keys must match", pools: p, steps: []step{
			{req: withBackend(svc("n/1").share("k", "TCP/80"), "app=a"), want: "p:198.51.100.0"},
			{req: withBackend(svc("n/2").share("k", "TCP/81"), "app=b"), want: "p:198.51.100.1"},
			{req: withBackend(svc("n/3").share("k", "TCP/82"), "app=a"), want: "p:198.51.100.0"},
			{req: svc("n/4").share("k", "TCP/83").want("198.51.100.0"), want: "ErrSharingConflict", msg: "backend"},
		}},
		{name: "release of one sharer keeps the IP for the other", pools: p, steps: []step{
			{req: svc("n/1").share("k", "TCP/80"), want: "p:198.51.100.0"},
			{req: svc("n/2").share("k", "TCP/81"), want: "p:198.51.100.0"},
			{release: "n/1"},
			{req: svc("n/3"), want: "p:198.51.100.1"},
			{req: svc("n/2").share("k", "TCP/81"), want: "p:198.51.100.0"},
			{release: "n/2"},
			{req: svc("n/4"), want: "p:198.51.100.0"},
		}},
		{name: "sole holder may change its key in place", pools: p, steps: []step{
			{req: svc("n/1").share("k", "TCP/80"), want: "p:198.51.100.0"},
			{req: svc("n/1").share("other", "TCP/80"), want: "p:198.51.100.0"},
			{req: svc("n/2").share("k", "TCP/81"), want: "p:198.51.100.1"},
			{req: svc("n/3").share("other", "TCP/81"), want: "p:198.51.100.0"},
		}},
		{name: "a sharer that becomes incompatible moves, the other stays", pools: p, steps: []step{
			{req: svc("n/1").share("k", "TCP/80"), want: "p:198.51.100.0"},
			{req: svc("n/2").share("k", "TCP/81"), want: "p:198.51.100.0"},
			{req: svc("n/2").share("k", "TCP/80"), want: "p:198.51.100.1"},
			{req: svc("n/1").share("k", "TCP/80"), want: "p:198.51.100.0"},
		}},
		{name: "joining beats a preferred pool", pools: []Pool{mkPool("a", "198.51.100.0/30"), mkPool("b", "203.0.113.0/30")}, steps: []step{
			{req: svc("n/1").share("k", "TCP/80").inPool("b"), want: "b:203.0.113.0"},
			{req: svc("n/2").share("k", "TCP/81"), want: "b:203.0.113.0"},
			{req: svc("n/3").share("z", "TCP/81"), want: "a:198.51.100.0"},
		}},
		{name: "dual-stack sharing joins both families", pools: []Pool{mkPool("d", "203.0.113.0/30", "2001:db8::/126")}, steps: []step{
			{req: svc("n/1").fam(RequireDualStack, IPv4, IPv6).share("k", "TCP/80"), want: "d:203.0.113.0,2001:db8::"},
			{req: svc("n/2").fam(RequireDualStack, IPv6, IPv4).share("k", "TCP/81"), want: "d:2001:db8::,203.0.113.0"},
		}},
	})
}

func withBackend(r Request, b string) Request { r.BackendKey = b; return r }

func TestReleaseAndReuse(t *testing.T) {
	runScenarios(t, []scenario{
		{name: "freed IP is reused first (first-fit)", pools: []Pool{mkPool("p", "198.51.100.0/29")}, steps: []step{
			{req: svc("n/1"), want: "p:198.51.100.0"},
			{req: svc("n/2"), want: "p:198.51.100.1"},
			{req: svc("n/3"), want: "p:198.51.100.2"},
			{release: "n/2"},
			{req: svc("n/4"), want: "p:198.51.100.1"},
			{release: "n/unknown"},
			{req: svc("n/5"), want: "p:198.51.100.3"},
		}},
		{name: "exhaustion then release", pools: []Pool{mkPool("tiny", "2001:db8::/127")}, steps: []step{
			{req: svc("n/1").fam(SingleStack, IPv6), want: "tiny:2001:db8::"},
			{req: svc("n/2").fam(SingleStack, IPv6), want: "tiny:2001:db8::1"},
			{req: svc("n/3").fam(SingleStack, IPv6), want: "ErrPoolExhausted", msg: `"tiny"`},
			{release: "n/1"},
			{req: svc("n/3").fam(SingleStack, IPv6), want: "tiny:2001:db8::"},
		}},
		{name: "a valid IP never moves, even when a better pool appears", pools: []Pool{mkPool("b", "203.0.113.0/30")}, steps: []step{
			{req: svc("n/1"), want: "b:203.0.113.0"},
			{req: svc("n/1").share("k"), want: "b:203.0.113.0"},
		}},
		{name: "failed allocation leaves nothing held", pools: []Pool{mkPool("p", "198.51.100.0/30")}, steps: []step{
			{req: svc("n/1"), want: "p:198.51.100.0"},
			{req: svc("n/1").inPool("gone"), want: "ErrUnknownPool"},
			{req: svc("n/2"), want: "p:198.51.100.0"},
		}},
	})
}

func TestExistingIPSurvivesNewPreferredPool(t *testing.T) {
	a := newAlloc(t, mkPool("b", "203.0.113.0/30"))
	mustAlloc(t, a, svc("n/1"))
	changed, err := a.SetPools([]Pool{mkPool("a", "198.51.100.0/30"), mkPool("b", "203.0.113.0/30")})
	if err != nil || len(changed) != 0 {
		t.Fatalf("SetPools = %v, %v; want no changes", changed, err)
	}
	if got := fmtResult(a.Allocate(svc("n/1"))); got != "b:203.0.113.0" {
		t.Fatalf("existing IP moved: %s", got)
	}
	if got := fmtResult(a.Allocate(svc("n/2"))); got != "a:198.51.100.0" {
		t.Fatalf("new Service: %s", got)
	}
}

func TestErrorsAreReadable(t *testing.T) {
	a := newAlloc(t, mkPool("p", "198.51.100.0/32"))
	mustAlloc(t, a, svc("team/web").share("k", "TCP/80"))
	_, err := a.Allocate(svc("team/api").share("k", "TCP/80").want("198.51.100.0"))
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.Other != "team/web" || !errors.Is(err, ErrSharingConflict) {
		t.Fatalf("want a ConflictError naming team/web, got %v", err)
	}
	want := "allocate team/api: 198.51.100.0 is held by Service team/web: port TCP/80 is already used there"
	if err.Error() != want {
		t.Fatalf("message %q, want %q", err.Error(), want)
	}
	_, err = a.Allocate(svc("team/db"))
	if err.Error() != `allocate team/db: no IPv4 address available: address pool "p" has no free IPv4 address` {
		t.Fatalf("message %q", err.Error())
	}
}

// The allocator keeps a Request's label maps as given (Request): Services
// of one namespace share its label map, and a Service's labels are the
// caller's map, not a copy per Service (issue #16: 10,000 Services held
// two copies each).
func TestRequestMapsKept(t *testing.T) {
	a := New()
	if _, err := a.SetPools([]Pool{mkPool("p", "10.0.0.0/24")}); err != nil {
		t.Fatal(err)
	}
	nsLabels := map[string]string{"kubernetes.io/metadata.name": "ns"}
	same := func(m1, m2 map[string]string) bool {
		return reflect.ValueOf(m1).UnsafePointer() == reflect.ValueOf(m2).UnsafePointer()
	}
	for i, key := range []string{"ns/a", "ns/b", "ns/c"} {
		r := svc(key)
		r.NamespaceLabels, r.Labels = nsLabels, map[string]string{"app": key}
		var err error
		if i == 2 {
			_, err = a.Import(key, addrs("10.0.0.9"), r)
		} else {
			_, err = a.Allocate(r)
		}
		if err != nil {
			t.Fatal(err)
		}
		h := a.svcs[key]
		if !same(h.req.NamespaceLabels, nsLabels) || !same(h.req.Labels, r.Labels) {
			t.Errorf("%s: the allocator holds copies of the Request's label maps", key)
		}
	}
}

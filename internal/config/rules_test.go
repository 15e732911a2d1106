package config

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/bfd"
)

// ruleCase mutates the valid base configuration. want lists substrings the
// error must contain (object, field, rule); empty want means Build must
// succeed. transient marks cases whose error must be transient only.
type ruleCase struct {
	name      string
	mutate    func(r *Resources)
	opts      Options
	want      []string
	transient bool
	warning   string // substring expected among Snapshot.Warnings()
}

func runRuleCases(t *testing.T, cases []ruleCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := base()
			if tc.mutate != nil {
				tc.mutate(&r)
			}
			opts := tc.opts
			if opts.Namespace == "" {
				opts.Namespace = ns
			}
			snap, err := Build(r, opts)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Build: unexpected error:\n%v", err)
				}
				if err := checkInvariants(snap); err != nil {
					t.Fatalf("invariants: %v", err)
				}
				if tc.warning != "" && !strings.Contains(strings.Join(snap.Warnings(), "\n"), tc.warning) {
					t.Fatalf("warnings %q do not mention %q", snap.Warnings(), tc.warning)
				}
				return
			}
			if err == nil {
				t.Fatalf("Build succeeded; want error containing %q", tc.want)
			}
			if snap != nil {
				t.Fatalf("Build returned a snapshot together with an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
			if got := IsTransient(err); got != tc.transient {
				t.Errorf("IsTransient = %v, want %v (error: %v)", got, tc.transient, err)
			}
		})
	}
}

func TestPoolRules(t *testing.T) {
	setAddrs := func(a ...string) func(r *Resources) {
		return func(r *Resources) { r.Pools = append(r.Pools, pool("pool-c", a...)) }
	}
	runRuleCases(t, []ruleCase{
		{name: "base is valid"},
		{name: "cidr valid", mutate: setAddrs("203.0.113.128/25")},
		{name: "cidr invalid", mutate: setAddrs("203.0.113.128/33"),
			want: []string{`IPAddressPool herald-system/pool-c: spec.addresses[0] "203.0.113.128/33": invalid CIDR`}},
		{name: "cidr with host bits is masked with a warning", mutate: setAddrs("203.0.113.130/25"),
			warning: `IPAddressPool herald-system/pool-c: spec.addresses[0]: "203.0.113.130/25" has host bits set; using 203.0.113.128/25`},
		{name: "range with whitespace valid", mutate: setAddrs(" 203.0.113.30 - 203.0.113.40 ")},
		{name: "range start after end", mutate: setAddrs("203.0.113.40-203.0.113.30"),
			want: []string{`IPAddressPool herald-system/pool-c: spec.addresses[0] "203.0.113.40-203.0.113.30": range start is after end`}},
		{name: "range across families", mutate: setAddrs("203.0.113.30-2001:db8:1::1"),
			want: []string{`spec.addresses[0]`, `different IP families`}},
		{name: "range end not an IP", mutate: setAddrs("203.0.113.30-x"),
			want: []string{`spec.addresses[0]`, `range end "x" is not an IP address`}},
		{name: "garbage entry", mutate: setAddrs("pool please"),
			want: []string{`spec.addresses[0] "pool please": not a CIDR`}},
		{name: "single address without length", mutate: setAddrs("203.0.113.77"),
			want: []string{`spec.addresses[0]`, `write 203.0.113.77/32`}},
		{name: "empty entry", mutate: setAddrs(" "),
			want: []string{`spec.addresses[0]`, `empty address entry`}},
		{name: "ipv4-mapped ipv6 rejected", mutate: setAddrs("::ffff:203.0.113.0/120"),
			want: []string{`spec.addresses[0]`, `IPv4-mapped`}},
		{name: "no addresses", mutate: setAddrs(),
			want: []string{`IPAddressPool herald-system/pool-c: spec.addresses: at least one CIDR or range is required`}},
		{name: "no overlap inside pool", mutate: setAddrs("203.0.113.100/30", "203.0.113.104-203.0.113.110")},
		{name: "overlap inside pool", mutate: setAddrs("203.0.113.100/30", "203.0.113.101-203.0.113.110"),
			want: []string{`IPAddressPool herald-system/pool-c: spec.addresses[1] "203.0.113.101-203.0.113.110": overlaps with spec.addresses[0] "203.0.113.100/30"`}},
		{name: "overlap across pools", mutate: setAddrs("198.51.100.128/25"),
			want: []string{`IPAddressPool herald-system/pool-c: spec.addresses[0] "198.51.100.128/25": overlaps with IPAddressPool herald-system/pool-a spec.addresses[0] "198.51.100.0/24"`}},
		{name: "overlap across pools ipv6", mutate: setAddrs("2001:db8::80-2001:db8::90"),
			want: []string{`pool-c: spec.addresses[0]`, `overlaps with IPAddressPool herald-system/pool-b spec.addresses[1] "2001:db8::/120"`}},
		{name: "duplicate pool name", mutate: func(r *Resources) { r.Pools = append(r.Pools, pool("pool-a", "203.0.113.200/30")) },
			want: []string{`IPAddressPool herald-system/pool-a: metadata.name: duplicate IPAddressPool name`}},
		{name: "pool in another namespace", mutate: func(r *Resources) {
			p := pool("pool-c", "203.0.113.200/30")
			p.Namespace = "default"
			r.Pools = append(r.Pools, p)
		}, want: []string{`IPAddressPool default/pool-c: metadata.namespace "default": IPAddressPool objects must be in Herald's namespace "herald-system"`}},
	})
}

func TestServiceAllocationRules(t *testing.T) {
	alloc := func(sa v1beta1.ServiceAllocation) func(r *Resources) {
		return func(r *Resources) { r.Pools[0].Spec.ServiceAllocation = &sa }
	}
	runRuleCases(t, []ruleCase{
		{name: "namespaces valid", mutate: alloc(v1beta1.ServiceAllocation{Priority: 10, Namespaces: []string{"ns-red", "ns-blue"}})},
		{name: "duplicate namespaces", mutate: alloc(v1beta1.ServiceAllocation{Namespaces: []string{"ns-red", "ns-red"}}),
			want: []string{`IPAddressPool herald-system/pool-a: spec.serviceAllocation.namespaces[1] "ns-red": duplicate of spec.serviceAllocation.namespaces[0]`}},
		{name: "empty namespace", mutate: alloc(v1beta1.ServiceAllocation{Namespaces: []string{""}}),
			want: []string{`spec.serviceAllocation.namespaces[0]: namespace name must not be empty`}},
		{name: "namespace selectors valid", mutate: alloc(v1beta1.ServiceAllocation{NamespaceSelectors: []metav1.LabelSelector{sel("team", "red"), sel("team", "blue")}})},
		{name: "duplicate namespace selectors", mutate: alloc(v1beta1.ServiceAllocation{NamespaceSelectors: []metav1.LabelSelector{sel("team", "red"), sel("team", "red")}}),
			want: []string{`IPAddressPool herald-system/pool-a: spec.serviceAllocation.namespaceSelectors[1] "team=red": duplicate of spec.serviceAllocation.namespaceSelectors[0]`}},
		{name: "duplicate service selectors", mutate: alloc(v1beta1.ServiceAllocation{ServiceSelectors: []metav1.LabelSelector{sel("app", "web"), sel("app", "web")}}),
			want: []string{`spec.serviceAllocation.serviceSelectors[1]`, `duplicate`}},
		{name: "invalid selector operator", mutate: alloc(v1beta1.ServiceAllocation{ServiceSelectors: []metav1.LabelSelector{{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near", Values: []string{"x"}}}}}}),
			want: []string{`spec.serviceAllocation.serviceSelectors[0]: invalid label selector`}},
		{name: "duplicate expression values", mutate: alloc(v1beta1.ServiceAllocation{ServiceSelectors: []metav1.LabelSelector{{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"x", "x"}}}}}}),
			want: []string{`spec.serviceAllocation.serviceSelectors[0].matchExpressions[0].values "x": duplicate value`}},
		{name: "duplicate expressions", mutate: alloc(v1beta1.ServiceAllocation{ServiceSelectors: []metav1.LabelSelector{{
			MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"x", "y"}},
				{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"y", "x"}}}}}}),
			want: []string{`spec.serviceAllocation.serviceSelectors[0].matchExpressions[1]: duplicate of matchExpressions[0]`}},
	})
}

func TestL2AdvertisementRules(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "preferred weight valid", mutate: func(r *Resources) {
			r.L2Advertisements[0].Spec.PreferredNodeSelectors = []v1beta1.PreferredNodeSelector{{Weight: 100, Preference: sel("zone", "a")}}
		}},
		{name: "preferred weight zero", mutate: func(r *Resources) {
			r.L2Advertisements[0].Spec.PreferredNodeSelectors = []v1beta1.PreferredNodeSelector{{Weight: 0, Preference: sel("zone", "a")}}
		}, want: []string{`L2Advertisement herald-system/l2-a: spec.preferredNodeSelectors[0].weight "0": must be between 1 and 100`}},
		{name: "duplicate pool names", mutate: func(r *Resources) { r.L2Advertisements[0].Spec.IPAddressPools = []string{"pool-a", "pool-a"} },
			want: []string{`L2Advertisement herald-system/l2-a: spec.ipAddressPools[1] "pool-a": duplicate of spec.ipAddressPools[0]`}},
		{name: "unknown pool is a warning", mutate: func(r *Resources) { r.L2Advertisements[0].Spec.IPAddressPools = []string{"pool-a", "pool-z"} },
			warning: `L2Advertisement herald-system/l2-a: spec.ipAddressPools[1]: no IPAddressPool named "pool-z"`},
		{name: "duplicate node selectors", mutate: func(r *Resources) {
			r.L2Advertisements[0].Spec.NodeSelectors = []metav1.LabelSelector{sel("zone", "a"), sel("zone", "a")}
		}, want: []string{`L2Advertisement herald-system/l2-a: spec.nodeSelectors[1] "zone=a": duplicate`}},
		{name: "empty interface", mutate: func(r *Resources) { r.L2Advertisements[0].Spec.Interfaces = []string{"eth0", ""} },
			want: []string{`L2Advertisement herald-system/l2-a: spec.interfaces[1]: interface name must not be empty`}},
		{name: "duplicate L2Advertisement name", mutate: func(r *Resources) { r.L2Advertisements = append(r.L2Advertisements, l2ad("l2-a")) },
			want: []string{`L2Advertisement herald-system/l2-a: metadata.name: duplicate`}},
	})
}

func TestBGPAdvertisementRules(t *testing.T) {
	ad := func(f func(a *v1beta1.BGPAdvertisement)) func(r *Resources) {
		return func(r *Resources) { f(&r.BGPAdvertisements[0]) }
	}
	two := func(f func(x, y *v1beta1.BGPAdvertisement)) func(r *Resources) {
		return func(r *Resources) {
			x, y := bgpad("bgp-x", "pool-a"), bgpad("bgp-y", "pool-a")
			x.Spec.LocalPref, y.Spec.LocalPref = 100, 200
			f(&x, &y)
			r.BGPAdvertisements = []v1beta1.BGPAdvertisement{x, y}
			r.Peers = append(r.Peers, peer("peer-b", 64500, 64502, "198.51.100.253"))
		}
	}
	runRuleCases(t, []ruleCase{
		{name: "aggregation length out of range", mutate: ad(func(a *v1beta1.BGPAdvertisement) { a.Spec.AggregationLength = i32(33) }),
			want: []string{`BGPAdvertisement herald-system/bgp-b: spec.aggregationLength "33": must be between 1 and 32`}},
		{name: "aggregation length v6 out of range", mutate: ad(func(a *v1beta1.BGPAdvertisement) { a.Spec.AggregationLengthV6 = i32(129) }),
			want: []string{`spec.aggregationLengthV6 "129": must be between 1 and 128`}},
		{name: "aggregation length equal to cidr", mutate: func(r *Resources) {
			a := bgpad("bgp-a", "pool-a")
			a.Spec.AggregationLength = i32(24)
			r.BGPAdvertisements = append(r.BGPAdvertisements, a)
		}},
		{name: "aggregation length shorter than cidr", mutate: func(r *Resources) {
			a := bgpad("bgp-a", "pool-a")
			a.Spec.AggregationLength = i32(23)
			r.BGPAdvertisements = append(r.BGPAdvertisements, a)
		}, want: []string{`BGPAdvertisement herald-system/bgp-a: spec.aggregationLength "23": shorter than the /24 of IPAddressPool pool-a spec.addresses[0] "198.51.100.0/24"`}},
		// 203.0.113.10-203.0.113.20 = .10/31 .12/30 .16/30 .20/32: shortest /30.
		{name: "aggregation length vs range summary valid", mutate: ad(func(a *v1beta1.BGPAdvertisement) { a.Spec.AggregationLength = i32(30) })},
		{name: "aggregation length vs range summary invalid", mutate: ad(func(a *v1beta1.BGPAdvertisement) { a.Spec.AggregationLength = i32(29) }),
			want: []string{`spec.aggregationLength "29": shorter than the /30 of IPAddressPool pool-b spec.addresses[0]`}},
		{name: "aggregation length v6 valid", mutate: ad(func(a *v1beta1.BGPAdvertisement) { a.Spec.AggregationLengthV6 = i32(120) })},
		{name: "aggregation length v6 invalid", mutate: ad(func(a *v1beta1.BGPAdvertisement) { a.Spec.AggregationLengthV6 = i32(119) }),
			want: []string{`spec.aggregationLengthV6 "119": shorter than the /120 of IPAddressPool pool-b spec.addresses[1] "2001:db8::/120"`}},
		{name: "weighted-ecmp annotation true", mutate: ad(func(a *v1beta1.BGPAdvertisement) {
			a.Annotations = map[string]string{"herald.io/weighted-ecmp": "true"}
		})},
		{name: "weighted-ecmp annotation not a boolean", mutate: ad(func(a *v1beta1.BGPAdvertisement) {
			a.Annotations = map[string]string{"herald.io/weighted-ecmp": "yes"}
		}), want: []string{`BGPAdvertisement herald-system/bgp-b: metadata.annotations[herald.io/weighted-ecmp] "yes": must be "true" or "false"`}},
		{name: "service selectors with default aggregation", mutate: ad(func(a *v1beta1.BGPAdvertisement) {
			a.Spec.ServiceSelectors = []metav1.LabelSelector{sel("app", "web")}
		})},
		{name: "service selectors with aggregation", mutate: ad(func(a *v1beta1.BGPAdvertisement) {
			a.Spec.ServiceSelectors = []metav1.LabelSelector{sel("app", "web")}
			a.Spec.AggregationLength = i32(30)
		}), want: []string{`BGPAdvertisement herald-system/bgp-b: spec.serviceSelectors: cannot be combined with a non-default aggregationLength`}},
		{name: "communities valid", mutate: ad(func(a *v1beta1.BGPAdvertisement) {
			a.Spec.Communities = []string{"65000:100", "large:64500:1:2", "no-export"}
		})},
		{name: "community half too large", mutate: ad(func(a *v1beta1.BGPAdvertisement) { a.Spec.Communities = []string{"65536:1"} }),
			want: []string{`BGPAdvertisement herald-system/bgp-b: spec.communities[0] "65536:1": community "65536:1": first half "65536" does not fit in 16 bits`}},
		{name: "large community missing part", mutate: ad(func(a *v1beta1.BGPAdvertisement) { a.Spec.Communities = []string{"large:1:2"} }),
			want: []string{`spec.communities[0] "large:1:2"`, `RFC 8092`}},
		// The path check (bgp.CheckLargeCommunity) refused these after
		// validation had admitted them.
		{name: "large community with the reserved global administrator", mutate: ad(func(a *v1beta1.BGPAdvertisement) { a.Spec.Communities = []string{"large:4294967295:1:2"} }),
			want: []string{`BGPAdvertisement herald-system/bgp-b: spec.communities[0] "large:4294967295:1:2"`, `Global Administrator 4294967295 is reserved (RFC 7300)`}},
		{name: "large community 4294967295 in the data parts", mutate: ad(func(a *v1beta1.BGPAdvertisement) { a.Spec.Communities = []string{"large:64500:4294967295:4294967295"} })},
		{name: "unknown alias is transient", mutate: ad(func(a *v1beta1.BGPAdvertisement) { a.Spec.Communities = []string{"blackhole"} }),
			want: []string{`BGPAdvertisement herald-system/bgp-b: spec.communities[0] "blackhole": no Community object defines the alias "blackhole"`}, transient: true},
		{name: "unknown alias ignored by webhook", opts: Options{IgnoreTransient: true},
			mutate: ad(func(a *v1beta1.BGPAdvertisement) { a.Spec.Communities = []string{"blackhole"} })},
		{name: "ads differing only in an unknown alias are not duplicates in the webhook", opts: Options{IgnoreTransient: true},
			mutate: func(r *Resources) {
				c := bgpad("bgp-c", "pool-b")
				c.Spec.Communities = []string{"blackhole"}
				r.BGPAdvertisements = append(r.BGPAdvertisements, c)
			}},
		{name: "duplicate community via alias", mutate: ad(func(a *v1beta1.BGPAdvertisement) { a.Spec.Communities = []string{"65535:65281", "no-export"} }),
			want: []string{`spec.communities[1] "no-export": duplicate community 65535:65281 (also spec.communities[0])`}},
		{name: "duplicate peers", mutate: ad(func(a *v1beta1.BGPAdvertisement) { a.Spec.Peers = []string{"peer-a", "peer-a"} }),
			want: []string{`spec.peers[1] "peer-a": duplicate of spec.peers[0]`}},
		{name: "unknown peer is a warning", mutate: ad(func(a *v1beta1.BGPAdvertisement) { a.Spec.Peers = []string{"peer-z"} }),
			warning: `BGPAdvertisement herald-system/bgp-b: spec.peers[0]: no BGPPeer named "peer-z"`},
		{name: "identical advertisements", mutate: func(r *Resources) { r.BGPAdvertisements = append(r.BGPAdvertisements, bgpad("bgp-c", "pool-b")) },
			want: []string{`BGPAdvertisement herald-system/bgp-c: spec: identical to BGPAdvertisement bgp-b`}},
		{name: "local pref same", mutate: two(func(x, y *v1beta1.BGPAdvertisement) {
			y.Spec.LocalPref = 100
			y.Spec.Communities = []string{"65000:1"}
		})},
		{name: "local pref conflict", mutate: two(func(x, y *v1beta1.BGPAdvertisement) {}),
			want: []string{`BGPAdvertisement herald-system/bgp-y: spec.localPref "200": conflicts with BGPAdvertisement bgp-x (localPref 100) on IPAddressPool pool-a`}},
		{name: "local pref with different aggregation", mutate: two(func(x, y *v1beta1.BGPAdvertisement) { y.Spec.AggregationLength = i32(24) })},
		{name: "local pref with disjoint peers", mutate: two(func(x, y *v1beta1.BGPAdvertisement) {
			x.Spec.Peers, y.Spec.Peers = []string{"peer-a"}, []string{"peer-b"}
		})},
		{name: "local pref with overlapping peers", mutate: two(func(x, y *v1beta1.BGPAdvertisement) {
			x.Spec.Peers, y.Spec.Peers = []string{"peer-a"}, []string{"peer-a", "peer-b"}
		}), want: []string{`bgp-y: spec.localPref "200": conflicts with BGPAdvertisement bgp-x`}},
		{name: "local pref with disjoint nodes", mutate: two(func(x, y *v1beta1.BGPAdvertisement) {
			x.Spec.NodeSelectors, y.Spec.NodeSelectors = []metav1.LabelSelector{sel("zone", "a")}, []metav1.LabelSelector{sel("zone", "b")}
		})},
		{name: "local pref with overlapping nodes", mutate: two(func(x, y *v1beta1.BGPAdvertisement) {
			x.Spec.NodeSelectors, y.Spec.NodeSelectors = []metav1.LabelSelector{sel("zone", "a")}, []metav1.LabelSelector{sel("kubernetes.io/hostname", "node-1")}
		}), want: []string{`bgp-y: spec.localPref "200": conflicts with BGPAdvertisement bgp-x`}},
		{name: "local pref conflict skipped with service selectors", mutate: two(func(x, y *v1beta1.BGPAdvertisement) {
			y.Spec.ServiceSelectors = []metav1.LabelSelector{sel("app", "web")}
		})},
		{name: "local pref dual-stack pool needs both families to differ", mutate: two(func(x, y *v1beta1.BGPAdvertisement) {
			x.Spec.IPAddressPools, y.Spec.IPAddressPools = []string{"pool-b"}, []string{"pool-b"}
			y.Spec.AggregationLength = i32(31)
		}), want: []string{`bgp-y: spec.localPref "200": conflicts with BGPAdvertisement bgp-x (localPref 100) on IPAddressPool pool-b`}},
		{name: "local pref dual-stack pool both families differ", mutate: two(func(x, y *v1beta1.BGPAdvertisement) {
			x.Spec.IPAddressPools, y.Spec.IPAddressPools = []string{"pool-b"}, []string{"pool-b"}
			y.Spec.AggregationLength, y.Spec.AggregationLengthV6 = i32(31), i32(127)
		})},
	})
}

func TestCommunityRules(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "aliases in two objects", mutate: func(r *Resources) {
			r.Communities = append(r.Communities, community("more", "blackhole", "65535:666", "big", "large:64500:0:1"))
		}},
		{name: "alias defined twice across objects", mutate: func(r *Resources) {
			r.Communities = append(r.Communities, community("more", "no-export", "65535:1"))
		}, want: []string{`Community herald-system/more: spec.communities[0].name "no-export": alias is already defined by Community herald-system/comms`}},
		{name: "alias defined twice in one object", mutate: func(r *Resources) {
			r.Communities[0] = community("comms", "a", "1:1", "a", "1:2")
		}, want: []string{`Community herald-system/comms: spec.communities[1].name "a": alias is already defined`}},
		{name: "alias with the reserved global administrator", mutate: func(r *Resources) { r.Communities[0] = community("comms", "a", "large:4294967295:0:0") },
			want: []string{`Community herald-system/comms: spec.communities[0].value "large:4294967295:0:0"`, `is reserved (RFC 7300)`}},
		{name: "alias with bad value", mutate: func(r *Resources) { r.Communities[0] = community("comms", "a", "1:2:3") },
			want: []string{`Community herald-system/comms: spec.communities[0].value "1:2:3"`, `RFC 1997`}},
		// MetalLB accepts an alias with an empty name (refused before).
		{name: "alias without name", mutate: func(r *Resources) { r.Communities[0] = community("comms", "", "1:2", "no-export", "65535:65281") }},
		{name: "alias without name used by an advertisement", mutate: func(r *Resources) {
			r.Communities[0] = community("comms", "", "1:2")
			r.BGPAdvertisements[0].Spec.Communities = []string{""}
		}},
		{name: "alias without name defined twice", mutate: func(r *Resources) {
			r.Communities = append(r.Communities, community("more", "", "1:3"), community("most", "", "1:4"))
		}, want: []string{`Community herald-system/most: spec.communities[0].name: alias is already defined by Community herald-system/more`}},
		{name: "alias without name defined twice in one object", mutate: func(r *Resources) {
			r.Communities[0] = community("comms", "", "1:3", "", "1:4")
		}, want: []string{`Community herald-system/comms: spec.communities[1].name: alias is already defined by Community herald-system/comms`}},
	})
}

func TestPeerRules(t *testing.T) {
	pe := func(f func(s *v1beta2.BGPPeerSpec)) func(r *Resources) {
		return func(r *Resources) { f(&r.Peers[0].Spec) }
	}
	const obj = "BGPPeer herald-system/peer-a: "
	runRuleCases(t, []ruleCase{
		{name: "myASN zero", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.MyASN = 0 }),
			want: []string{obj + "spec.myASN: is required and must not be 0"}},
		{name: "peerASN and dynamicASN", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.DynamicASN = v1beta2.ExternalASNMode }),
			want: []string{obj + `spec.dynamicASN "external": set exactly one of peerASN and dynamicASN, not both`}},
		{name: "neither peerASN nor dynamicASN", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.PeerASN = 0 }),
			want: []string{obj + "spec.peerASN: set exactly one of peerASN and dynamicASN"}},
		// Backend rules: what the gobgp speaker cannot open is refused here,
		// so the webhook never admits a peer no speaker opens.
		{name: "dynamicASN internal refused", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.PeerASN, s.DynamicASN = 0, v1beta2.InternalASNMode }),
			want: []string{obj + `spec.dynamicASN "internal": not supported by Herald's BGP backend, which would accept any ASN the router sends without checking that it is internal; set spec.peerASN to the router's ASN`}},
		{name: "dynamicASN external refused", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.PeerASN, s.DynamicASN = 0, v1beta2.ExternalASNMode }),
			want: []string{obj + `spec.dynamicASN "external": not supported by Herald's BGP backend`}},
		{name: "zoned peer address refused", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.PeerAddress = "fe80::1%eth1" }),
			want: []string{obj + `spec.peerAddress "fe80::1%eth1": an IPv6 zone is not supported by Herald's BGP backend (nor is unnumbered BGP, spec.interface): use the router's global address`}},
		{name: "link-local peer address without zone", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.PeerAddress = "fe80::1" })},
		{name: "hold time 65535s", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.HoldTime = dur(65535 * time.Second) })},
		{name: "hold time above 65535s refused", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.HoldTime = dur(65536 * time.Second) }),
			want: []string{obj + `spec.holdTime "18h12m16s": must be at most 65535s: the Hold Time field of the BGP OPEN message is 2 octets (RFC 4271 §4.2)`}},
		{name: "keepalive deriving a hold time above 65535s refused", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.KeepaliveTime = dur(30000 * time.Second) }),
			want: []string{obj + `spec.keepaliveTime "8h20m0s": the derived holdTime (3 x keepaliveTime = 25h0m0s) must be at most 65535s`}},
		{name: "dynamicASN bogus", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.PeerASN, s.DynamicASN = 0, "sideways" }),
			want: []string{obj + `spec.dynamicASN "sideways": must be "internal" or "external"`}},
		{name: "address and interface", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.Interface = "eth1" }),
			want: []string{obj + `spec.interface "eth1": set exactly one of peerAddress and interface, not both`}},
		{name: "neither address nor interface", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.PeerAddress = "" }),
			want: []string{obj + "spec.peerAddress: set exactly one of peerAddress and interface"}},
		// The session came up, but gobgp announced with next hop "::" and
		// FRR accepted no path (e2e TestBGPPeerVariants); admitted before.
		{name: "interface only", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.PeerAddress, s.Interface = "", "eth1" }),
			want: []string{obj + `spec.interface "eth1": unnumbered BGP is not supported by Herald's BGP backend: gobgp announces paths on such a session with the unspecified next hop (::)`, "set spec.peerAddress"}},
		{name: "interface name invalid", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.PeerAddress, s.Interface = "", "eth 1" }),
			want: []string{obj + `spec.interface "eth 1": not a valid network interface name`}},
		{name: "peer address ipv6", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.PeerAddress = "2001:db8::1" })},
		{name: "peer address not an IP", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.PeerAddress = "router.example" }),
			want: []string{obj + `spec.peerAddress "router.example": not an IP address`}},
		{name: "peer address multicast", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.PeerAddress = "224.0.0.5" }),
			want: []string{obj + `spec.peerAddress "224.0.0.5": must be a unicast address`}},
		{name: "source address valid", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.SourceAddress = "198.51.100.10" })},
		{name: "source address invalid", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.SourceAddress = "198.51.100" }),
			want: []string{obj + `spec.sourceAddress "198.51.100": not an IP address`}},
		{name: "source address family", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.SourceAddress = "2001:db8::10" }),
			want: []string{obj + `spec.sourceAddress "2001:db8::10": must be of the same IP family as peerAddress`}},
		{name: "router id valid", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.RouterID = "198.51.100.1" })},
		{name: "router id invalid", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.RouterID = "one" }),
			want: []string{obj + `spec.routerID "one": not an IP address`}},
		{name: "router id ipv6", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.RouterID = "2001:db8::1" }),
			want: []string{obj + `spec.routerID "2001:db8::1": must be a non-zero IPv4 address`}},
		// RFC 4271 allows 0, but gobgp silently sent 90 s instead.
		{name: "hold time zero", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.HoldTime = dur(0) }),
			want: []string{obj + `spec.holdTime "0s": a hold time of 0 (no keepalives, allowed by RFC 4271 §4.2) is not supported by Herald's BGP backend, which would send its default 90s in OPEN instead`}},
		{name: "keepalive time zero alone", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.KeepaliveTime = dur(0) }),
			want: []string{obj + `spec.keepaliveTime "0s": without holdTime the hold time is 3 x keepaliveTime = 0s (after truncation to whole seconds), and a hold time of 0 (no keepalives, allowed by RFC 4271 §4.2) is not supported by Herald's BGP backend, which would send its default 90s in OPEN instead; set keepaliveTime to at least 1s, or set holdTime to at least 3s`}},
		{name: "hold time 3.9s truncates to 3s", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.HoldTime = dur(3900 * time.Millisecond) })},
		{name: "hold time 2s", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.HoldTime = dur(2 * time.Second) }),
			want: []string{obj + `spec.holdTime "2s": must be at least 3s`}},
		{name: "hold time 2.9s truncates to 2s", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.HoldTime = dur(2900 * time.Millisecond) }),
			want: []string{obj + `spec.holdTime "2.9s": must be at least 3s after truncation`}},
		{name: "keepalive only", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.KeepaliveTime = dur(10 * time.Second) })},
		{name: "keepalive above hold", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.HoldTime, s.KeepaliveTime = dur(9*time.Second), dur(10*time.Second) }),
			want: []string{obj + `spec.keepaliveTime "10s": must not be greater than holdTime (9s)`}},
		{name: "keepalive with hold zero", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.HoldTime, s.KeepaliveTime = dur(0), dur(10*time.Second) }),
			want: []string{obj + `spec.holdTime "0s": a hold time of 0`}},
		{name: "connect time valid", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.ConnectTime = dur(10 * time.Second) })},
		{name: "connect time fractional", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.ConnectTime = dur(1500 * time.Millisecond) }),
			want: []string{obj + `spec.connectTime "1.5s": must be a whole number of seconds`}},
		{name: "connect time too long", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.ConnectTime = dur(65536 * time.Second) }),
			want: []string{obj + `spec.connectTime`, `must be between 1s and 65535s`}},
		{name: "password valid", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.Password = "s3cret" })},
		{name: "password too long", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.Password = strings.Repeat("x", 81) }),
			want: []string{obj + `spec.password: longer than 80 bytes`}},
		{name: "password and secret", mutate: pe(func(s *v1beta2.BGPPeerSpec) {
			s.Password, s.PasswordSecret = "s3cret", &corev1.SecretReference{Name: "bgp-pass"}
		}), want: []string{obj + `spec.passwordSecret: password and passwordSecret are mutually exclusive`}},
		// What MetalLB's configmaptocrs writes on every BGPPeer; MetalLB
		// treats it as absent (refused before).
		{name: "empty passwordSecret is absent", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.PasswordSecret = &corev1.SecretReference{} })},
		{name: "password with an empty passwordSecret", mutate: pe(func(s *v1beta2.BGPPeerSpec) {
			s.Password, s.PasswordSecret = "s3cret", &corev1.SecretReference{}
		})},
		{name: "passwordSecret with a namespace only is absent, with a warning", mutate: pe(func(s *v1beta2.BGPPeerSpec) {
			s.PasswordSecret = &corev1.SecretReference{Namespace: ns}
		}), warning: obj + `spec.passwordSecret: has a namespace but no name: ignored`},
		{name: "secret valid", mutate: pe(func(s *v1beta2.BGPPeerSpec) {
			s.PasswordSecret = &corev1.SecretReference{Name: "bgp-pass", Namespace: ns}
		})},
		{name: "secret missing is transient", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.PasswordSecret = &corev1.SecretReference{Name: "nope"} }),
			want: []string{obj + `spec.passwordSecret "herald-system/nope": Secret not found`}, transient: true},
		{name: "secret missing ignored by webhook", opts: Options{IgnoreTransient: true},
			mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.PasswordSecret = &corev1.SecretReference{Name: "nope"} })},
		{name: "secret wrong type", mutate: func(r *Resources) {
			r.Secrets[0].Type = corev1.SecretTypeOpaque
			r.Peers[0].Spec.PasswordSecret = &corev1.SecretReference{Name: "bgp-pass"}
		}, want: []string{obj + `spec.passwordSecret "herald-system/bgp-pass": Secret has type "Opaque"; it must be "kubernetes.io/basic-auth"`}},
		{name: "secret without password key", mutate: func(r *Resources) {
			r.Secrets[0].Data = map[string][]byte{"username": []byte("x")}
			r.Peers[0].Spec.PasswordSecret = &corev1.SecretReference{Name: "bgp-pass"}
		}, want: []string{obj + `spec.passwordSecret "herald-system/bgp-pass": Secret has no key "password"`}},
		{name: "secret in another namespace", mutate: pe(func(s *v1beta2.BGPPeerSpec) {
			s.PasswordSecret = &corev1.SecretReference{Name: "bgp-pass", Namespace: "default"}
		}), want: []string{obj + `spec.passwordSecret.namespace "default": the Secret must be in Herald's namespace "herald-system"`}},
		{name: "dualStackAddressFamily warns that the other family is not announced", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.DualStackAddressFamily = true }),
			warning: obj + `spec.dualStackAddressFamily: the session negotiates both address families, but Herald announces only the session's own family on it`},
		{name: "ebgp multihop on ebgp", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.EBGPMultiHop = true })},
		{name: "ebgp multihop on ibgp", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.EBGPMultiHop, s.PeerASN = true, 64500 }),
			want: []string{obj + `spec.ebgpMultiHop: cannot be set on an iBGP session`}},
		{name: "bfd profile accepted", mutate: func(r *Resources) {
			r.BFDProfiles = []v1beta1.BFDProfile{{ObjectMeta: meta("fast")}}
			r.Peers[0].Spec.BFDProfile = "fast"
		}},
		{name: "bfd profile missing is transient", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.BFDProfile = "nope" }),
			want: []string{obj + `spec.bfdProfile "nope": BFDProfile not found`}, transient: true},
		{name: "bfd profile invalid refuses the peer", mutate: func(r *Resources) {
			r.BFDProfiles = []v1beta1.BFDProfile{{ObjectMeta: meta("fast"), Spec: v1beta1.BFDProfileSpec{DetectMultiplier: u32(1)}}}
			r.Peers[0].Spec.BFDProfile = "fast"
		}, want: []string{`BFDProfile herald-system/fast: spec.detectMultiplier "1"`, obj + `spec.bfdProfile "fast": BFDProfile fast is invalid`}},
		{name: "bfd on an interface peer refused", mutate: func(r *Resources) {
			r.BFDProfiles = []v1beta1.BFDProfile{{ObjectMeta: meta("fast")}}
			r.Peers[0].Spec.PeerAddress, r.Peers[0].Spec.Interface, r.Peers[0].Spec.BFDProfile = "", "eth1", "fast"
		}, want: []string{obj + `spec.bfdProfile "fast": BFD is not supported on an unnumbered (spec.interface) peer`}},
		{name: "bfd in a vrf refused", mutate: func(r *Resources) {
			r.BFDProfiles = []v1beta1.BFDProfile{{ObjectMeta: meta("fast")}}
			r.Peers[0].Spec.VRF, r.Peers[0].Spec.BFDProfile = "red", "fast"
		}, want: []string{obj + `spec.bfdProfile "fast": BFD is not supported on a peer in a VRF`}},
		{name: "multihop bfd without source address refused", mutate: func(r *Resources) {
			r.BFDProfiles = []v1beta1.BFDProfile{{ObjectMeta: meta("fast")}}
			r.Peers[0].Spec.PeerASN, r.Peers[0].Spec.EBGPMultiHop, r.Peers[0].Spec.BFDProfile = 64999, true, "fast"
		}, want: []string{obj + `spec.bfdProfile "fast": multihop BFD (RFC 5883, with spec.ebgpMultiHop) needs spec.sourceAddress`}},
		{name: "multihop bfd with source address", mutate: func(r *Resources) {
			r.BFDProfiles = []v1beta1.BFDProfile{{ObjectMeta: meta("fast")}}
			r.Peers[0].Spec.PeerASN, r.Peers[0].Spec.EBGPMultiHop, r.Peers[0].Spec.BFDProfile = 64999, true, "fast"
			r.Peers[0].Spec.SourceAddress = "198.51.100.10"
		}},
		{name: "disableMP is a warning", mutate: pe(func(s *v1beta2.BGPPeerSpec) { s.DisableMP = true }),
			warning: `BGPPeer herald-system/peer-a: spec.disableMP: deprecated and ignored`},
		{name: "graceful restart, vrf, dual stack accepted", mutate: pe(func(s *v1beta2.BGPPeerSpec) {
			s.EnableGracefulRestart, s.VRF, s.DualStackAddressFamily = true, "red", true
		})},
		{name: "duplicate node selectors", mutate: pe(func(s *v1beta2.BGPPeerSpec) {
			s.NodeSelectors = []metav1.LabelSelector{sel("zone", "a"), sel("zone", "a")}
		}), want: []string{obj + `spec.nodeSelectors[1] "zone=a": duplicate of spec.nodeSelectors[0]`}},
		{name: "duplicate peer name", mutate: func(r *Resources) { r.Peers = append(r.Peers, peer("peer-a", 64500, 64509, "198.51.100.9")) },
			want: []string{obj + `metadata.name: duplicate BGPPeer name`}},
		{name: "peer in another namespace", mutate: func(r *Resources) { r.Peers[0].Namespace = "default" },
			want: []string{`BGPPeer default/peer-a: metadata.namespace "default"`}},
	})
}

func TestPeersOnOneNodeRules(t *testing.T) {
	second := func(f func(a, b *v1beta2.BGPPeerSpec)) func(r *Resources) {
		return func(r *Resources) {
			b := peer("peer-b", 64500, 64502, "198.51.100.253")
			f(&r.Peers[0].Spec, &b.Spec)
			r.Peers = append(r.Peers, b)
		}
	}
	zones := func(a, b *v1beta2.BGPPeerSpec) {
		a.NodeSelectors = []metav1.LabelSelector{sel("zone", "a")}
		b.NodeSelectors = []metav1.LabelSelector{sel("zone", "b")}
	}
	const obj = "BGPPeer herald-system/peer-b: "
	runRuleCases(t, []ruleCase{
		{name: "two peers agree", mutate: second(func(a, b *v1beta2.BGPPeerSpec) { a.RouterID, b.RouterID = "198.51.100.1", "198.51.100.1" })},
		// MetalLB's FRR mode refuses these; Herald takes unset as no
		// preference, so that routerID can be introduced one peer at a
		// time (the node used the one set before too, without a word).
		{name: "router id set on the newer peer only", mutate: second(func(a, b *v1beta2.BGPPeerSpec) { b.RouterID = "198.51.100.1" }),
			warning: `BGPPeer herald-system/peer-a: spec.routerID: unset, so on the nodes it shares with BGPPeer peer-b this session uses that peer's routerID 198.51.100.1`},
		{name: "router id set on the older peer only", mutate: second(func(a, b *v1beta2.BGPPeerSpec) { a.RouterID = "198.51.100.1" }),
			warning: `BGPPeer herald-system/peer-b: spec.routerID: unset, so on the nodes it shares with BGPPeer peer-a this session uses that peer's routerID 198.51.100.1`},
		{name: "router id unset on both", mutate: second(func(a, b *v1beta2.BGPPeerSpec) {})},
		{name: "router id on a peer of every node", mutate: func(r *Resources) { r.Peers[0].Spec.RouterID = "198.51.100.1" },
			warning: `BGPPeer herald-system/peer-a: spec.routerID: 198.51.100.1 is the BGP Identifier of all 2 nodes this peer selects (node-1, node-2)`},
		{name: "router id set on one, nodes disjoint", mutate: second(func(a, b *v1beta2.BGPPeerSpec) { b.RouterID = "198.51.100.1"; zones(a, b) })},
		{name: "router id conflict", mutate: second(func(a, b *v1beta2.BGPPeerSpec) { a.RouterID, b.RouterID = "198.51.100.1", "198.51.100.2" }),
			want: []string{obj + `spec.routerID "198.51.100.2": BGPPeer peer-a selects the same node with routerID 198.51.100.1: the BGPPeers of one node that set routerID must set the same one`}},
		{name: "router id conflict on disjoint nodes", mutate: second(func(a, b *v1beta2.BGPPeerSpec) {
			a.RouterID, b.RouterID = "198.51.100.1", "198.51.100.2"
			zones(a, b)
		})},
		{name: "router id conflict on a node matching both", mutate: second(func(a, b *v1beta2.BGPPeerSpec) {
			a.RouterID, b.RouterID = "198.51.100.1", "198.51.100.2"
			a.NodeSelectors = []metav1.LabelSelector{sel("zone", "a")}
			b.NodeSelectors = []metav1.LabelSelector{sel("kubernetes.io/hostname", "node-1")}
		}), want: []string{obj + `spec.routerID`}},
		{name: "myASN conflict", mutate: second(func(a, b *v1beta2.BGPPeerSpec) { b.MyASN = 64599 }),
			want: []string{obj + `spec.myASN "64599": BGPPeer peer-a selects the same node with myASN 64500`}},
		{name: "myASN conflict on disjoint nodes", mutate: second(func(a, b *v1beta2.BGPPeerSpec) { b.MyASN = 64599; zones(a, b) })},
		{name: "myASN conflict blames the newer peer", mutate: func(r *Resources) {
			second(func(a, b *v1beta2.BGPPeerSpec) { a.MyASN = 64599 })(r)
			r.Peers[0].CreationTimestamp = metav1.NewTime(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
			r.Peers[1].CreationTimestamp = metav1.NewTime(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
		}, want: []string{`BGPPeer herald-system/peer-a: spec.myASN "64599": BGPPeer peer-b selects the same node with myASN 64500`}},
		{name: "an object being created is the newest", mutate: func(r *Resources) {
			second(func(a, b *v1beta2.BGPPeerSpec) { a.MyASN = 64599 })(r)
			r.Peers[1].CreationTimestamp = metav1.NewTime(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
		}, want: []string{`BGPPeer herald-system/peer-a: spec.myASN "64599": BGPPeer peer-b selects the same node with myASN 64500`}},
		{name: "same address on one node", mutate: second(func(a, b *v1beta2.BGPPeerSpec) { b.PeerAddress, b.PeerPort = a.PeerAddress, 1790 }),
			want: []string{obj + `spec.peerAddress "198.51.100.254": BGPPeer peer-a selects the same node with the same peerAddress`}},
		{name: "same address in different VRFs", mutate: second(func(a, b *v1beta2.BGPPeerSpec) { b.PeerAddress, b.VRF = a.PeerAddress, "red" }),
			want: []string{obj + `spec.peerAddress "198.51.100.254": BGPPeer peer-a selects the same node with the same peerAddress: the same neighbor address in different VRFs (the default VRF and VRF red) is not supported by Herald's BGP backend, which keys its sessions by address alone (MetalLB's FRR mode accepts it)`}},
		{name: "same interface on one node", mutate: second(func(a, b *v1beta2.BGPPeerSpec) {
			a.PeerAddress, a.Interface = "", "eth1"
			b.PeerAddress, b.Interface, b.PeerASN = "", "eth1", 64503
		}), want: []string{obj + `spec.interface "eth1": unnumbered BGP is not supported`}},
		{name: "identical peers", mutate: second(func(a, b *v1beta2.BGPPeerSpec) { *b = *a }),
			want: []string{obj + `spec: identical to BGPPeer peer-a`}},
	})
}

func TestBFDProfileRules(t *testing.T) {
	prof := func(s v1beta1.BFDProfileSpec) func(r *Resources) {
		return func(r *Resources) { r.BFDProfiles = []v1beta1.BFDProfile{{ObjectMeta: meta("fast"), Spec: s}} }
	}
	runRuleCases(t, []ruleCase{
		{name: "profile valid", mutate: prof(v1beta1.BFDProfileSpec{ReceiveInterval: u32(100), DetectMultiplier: u32(5), MinimumTTL: u32(254)})},
		{name: "echo mode refused", mutate: prof(v1beta1.BFDProfileSpec{EchoMode: ptr.To(true), EchoInterval: u32(50)}),
			want: []string{`BFDProfile herald-system/fast: spec.echoMode "true": the BFD Echo function (RFC 5880 §6.4) is not supported by Herald`}},
		{name: "echo mode false accepted", mutate: prof(v1beta1.BFDProfileSpec{EchoMode: ptr.To(false), EchoInterval: u32(50)})},
		{name: "receive interval too small", mutate: prof(v1beta1.BFDProfileSpec{ReceiveInterval: u32(5)}),
			want: []string{`BFDProfile herald-system/fast: spec.receiveInterval "5": must be between 10 and 60000`}},
		{name: "transmit interval too large", mutate: prof(v1beta1.BFDProfileSpec{TransmitInterval: u32(60001)}),
			want: []string{`spec.transmitInterval "60001": must be between 10 and 60000`}},
		{name: "detect multiplier too small", mutate: prof(v1beta1.BFDProfileSpec{DetectMultiplier: u32(1)}),
			want: []string{`spec.detectMultiplier "1": must be between 2 and 255`}},
		{name: "echo interval too small", mutate: prof(v1beta1.BFDProfileSpec{EchoInterval: u32(9)}),
			want: []string{`spec.echoInterval "9": must be between 10 and 60000`}},
		{name: "minimum ttl zero", mutate: prof(v1beta1.BFDProfileSpec{MinimumTTL: u32(0)}),
			want: []string{`spec.minimumTtl "0": must be between 1 and 254`}},
	})
}

func TestPerNodeFiltering(t *testing.T) {
	badOnZoneB := func(r *Resources) {
		b := peer("peer-bad", 0, 64502, "198.51.100.253")
		b.Spec.NodeSelectors = []metav1.LabelSelector{sel("zone", "b")}
		r.Peers = append(r.Peers, b)
		ad := bgpad("bgp-bad", "pool-a")
		ad.Spec.AggregationLength = i32(8)
		ad.Spec.NodeSelectors = []metav1.LabelSelector{sel("zone", "b")}
		r.BGPAdvertisements = append(r.BGPAdvertisements, ad)
	}
	runRuleCases(t, []ruleCase{
		{name: "node-1 does not see the bad objects", mutate: badOnZoneB, opts: Options{NodeName: "node-1"}},
		{name: "node-2 does", mutate: badOnZoneB, opts: Options{NodeName: "node-2"},
			want: []string{`BGPPeer herald-system/peer-bad: spec.myASN`, `BGPAdvertisement herald-system/bgp-bad: spec.aggregationLength "8"`}},
		{name: "cluster-wide build does", mutate: badOnZoneB,
			want: []string{`BGPPeer herald-system/peer-bad: spec.myASN`}},
		{name: "unknown node is transient", opts: Options{NodeName: "node-9"},
			want: []string{`Node node-9: the speaker's own Node was not found`}, transient: true},
	})
}

func TestMixedErrorsAreNotTransient(t *testing.T) {
	r := base()
	r.Peers[0].Spec.PasswordSecret = &corev1.SecretReference{Name: "nope"}
	r.Pools[0].Spec.Addresses = []string{"bogus"}
	_, err := Build(r, Options{Namespace: ns})
	if err == nil || IsTransient(err) {
		t.Fatalf("want a non-transient error, got %v", err)
	}
	invalid, transient := Split(err)
	if len(invalid) != 1 || len(transient) != 1 {
		t.Fatalf("Split: %d invalid, %d transient; want 1 and 1: %v", len(invalid), len(transient), err)
	}
	if invalid[0].Kind != KindIPAddressPool || invalid[0].Name != "pool-a" || invalid[0].Field != "spec.addresses[0]" {
		t.Errorf("invalid[0] = %+v", invalid[0])
	}
	if transient[0].Kind != KindBGPPeer || transient[0].Field != "spec.passwordSecret" {
		t.Errorf("transient[0] = %+v", transient[0])
	}
	// Errors are sorted, so the text is stable.
	_, err2 := Build(r, Options{Namespace: ns})
	if err.Error() != err2.Error() {
		t.Errorf("error text not stable:\n%v\n%v", err, err2)
	}
}

func TestPoolAdvertised(t *testing.T) {
	withPoolC := func(r *Resources) {
		p := pool("pool-c", "203.0.113.128/25")
		p.Labels = map[string]string{"tier": "edge"}
		r.Pools = append(r.Pools, p)
	}
	cases := []struct {
		name   string
		mutate func(r *Resources)
		opts   Options
		want   bool
	}{
		{name: "no advertisement selects it", mutate: withPoolC},
		{name: "selected by name in an L2Advertisement", want: true, mutate: func(r *Resources) {
			withPoolC(r)
			r.L2Advertisements = append(r.L2Advertisements, l2ad("l2-c", "pool-c"))
		}},
		{name: "selected by label in a BGPAdvertisement", want: true, mutate: func(r *Resources) {
			withPoolC(r)
			ad := bgpad("bgp-c")
			ad.Spec.IPAddressPoolSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"tier": "edge"}}}
			r.BGPAdvertisements = append(r.BGPAdvertisements, ad)
		}},
		{name: "label selector not matching", mutate: func(r *Resources) {
			withPoolC(r)
			ad := bgpad("bgp-c")
			ad.Spec.IPAddressPoolSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"tier": "core"}}}
			r.BGPAdvertisements = append(r.BGPAdvertisements, ad)
		}},
		{name: "an advertisement without pools selects every pool", want: true, mutate: func(r *Resources) {
			withPoolC(r)
			r.L2Advertisements = append(r.L2Advertisements, l2ad("l2-all"))
		}},
		{name: "BGPAdvertisement for other nodes, node view", opts: Options{NodeName: "node-1"}, mutate: func(r *Resources) {
			withPoolC(r)
			ad := bgpad("bgp-c", "pool-c")
			ad.Spec.NodeSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"zone": "b"}}}
			r.BGPAdvertisements = append(r.BGPAdvertisements, ad)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := base()
			tc.mutate(&r)
			tc.opts.Namespace = ns
			snap, err := Build(r, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			pl, ok := snap.Pool("pool-c")
			if !ok {
				t.Fatal("pool-c missing")
			}
			if got := pl.Advertised(); got != tc.want {
				t.Errorf("Advertised() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPoolCovers(t *testing.T) {
	build := func(addrs ...string) *Pool {
		t.Helper()
		r := Resources{Pools: []v1beta1.IPAddressPool{pool("p", addrs...)}}
		snap, err := Build(r, Options{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		pl, _ := snap.Pool("p")
		return pl
	}
	cases := []struct {
		name       string
		old, new   []string
		wantCovers bool
	}{
		{"same", []string{"198.51.100.0/24"}, []string{"198.51.100.0/24"}, true},
		{"grown", []string{"198.51.100.0/25"}, []string{"198.51.100.0/24"}, true},
		{"same addresses split differently", []string{"198.51.100.0/24"}, []string{"198.51.100.0-198.51.100.99", "198.51.100.100-198.51.100.255"}, true},
		{"shrunk at the end", []string{"198.51.100.200-198.51.100.250"}, []string{"198.51.100.200-198.51.100.240"}, false},
		{"shrunk at the start", []string{"198.51.100.200-198.51.100.250"}, []string{"198.51.100.230-198.51.100.250"}, false},
		{"hole in the middle", []string{"198.51.100.0/24"}, []string{"198.51.100.0-198.51.100.9", "198.51.100.11-198.51.100.255"}, false},
		{"family dropped", []string{"198.51.100.0/24", "2001:db8::/120"}, []string{"198.51.100.0/24"}, false},
		{"moved elsewhere", []string{"198.51.100.0/24"}, []string{"203.0.113.0/24"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := build(tc.new...).Covers(build(tc.old...)); got != tc.wantCovers {
				t.Errorf("Covers = %v, want %v", got, tc.wantCovers)
			}
		})
	}
}

// TestBFDProfileParams: a peer naming a BFDProfile carries the profile's
// fields, defaults filled in, as internal/bfd's session parameters.
func TestBFDProfileParams(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec v1beta1.BFDProfileSpec
		want bfd.Params
	}{
		{name: "defaults", want: bfd.Params{ReceiveInterval: 300 * time.Millisecond, TransmitInterval: 300 * time.Millisecond, DetectMultiplier: 3, MinimumTTL: 254}},
		{name: "every field", spec: v1beta1.BFDProfileSpec{ReceiveInterval: u32(100), TransmitInterval: u32(200), DetectMultiplier: u32(5),
			EchoMode: ptr.To(false), EchoInterval: u32(70), PassiveMode: ptr.To(true), MinimumTTL: u32(250)},
			want: bfd.Params{ReceiveInterval: 100 * time.Millisecond, TransmitInterval: 200 * time.Millisecond, DetectMultiplier: 5, PassiveMode: true, MinimumTTL: 250}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := base()
			r.BFDProfiles = []v1beta1.BFDProfile{{ObjectMeta: meta("fast"), Spec: tc.spec}}
			r.Peers[0].Spec.BFDProfile = "fast"
			snap, err := Build(r, Options{Namespace: ns})
			if err != nil {
				t.Fatal(err)
			}
			p := snap.Peers()[0]
			if p.BFD == nil || p.BFDProfileName() != "fast" {
				t.Fatalf("peer %s: BFD = %+v, want profile fast", p.Name, p.BFD)
			}
			if got := p.BFD.Params(); got != tc.want {
				t.Errorf("Params() = %+v, want %+v", got, tc.want)
			}
			if err := p.BFD.Params().Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
	r := base()
	if snap, err := Build(r, Options{Namespace: ns}); err != nil || snap.Peers()[0].BFD != nil {
		t.Errorf("peer without bfdProfile: BFD = %+v, err %v", snap.Peers()[0].BFD, err)
	}
}

// TestBFDProfileChangeChangesSnapshot: a changed BFDProfile used by a peer
// is a changed configuration (the speaker re-applies its BFD sessions).
func TestBFDProfileChangeChangesSnapshot(t *testing.T) {
	build := func(rx uint32) *Snapshot {
		t.Helper()
		r := base()
		r.BFDProfiles = []v1beta1.BFDProfile{{ObjectMeta: meta("fast"), Spec: v1beta1.BFDProfileSpec{ReceiveInterval: u32(rx)}}}
		r.Peers[0].Spec.BFDProfile = "fast"
		snap, err := Build(r, Options{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		return snap
	}
	if a, b := build(300), build(200); a.Equal(b) || a.Fingerprint() == b.Fingerprint() {
		t.Errorf("receiveInterval 300 -> 200: snapshots equal (%x)", a.Fingerprint())
	}
	if a, b := build(300), build(300); !a.Equal(b) {
		t.Error("the same profile: snapshots differ")
	}
}

// A routerID shared by the nodes a peer selects is a warning only where the
// snapshot is the cluster's (webhook, controller), and only when the peer
// selects two nodes or more.
func TestSharedRouterIDWarning(t *testing.T) {
	const shared = "is the BGP Identifier of all"
	for _, tc := range []struct {
		name  string
		sel   []metav1.LabelSelector
		node  string // BuildOptions.NodeName
		warns bool
	}{
		{name: "every node", warns: true},
		{name: "one zone, one node", sel: []metav1.LabelSelector{sel("zone", "a")}},
		{name: "both zones", sel: []metav1.LabelSelector{sel("zone", "a"), sel("zone", "b")}, warns: true},
		{name: "a speaker's snapshot", node: "node-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := base()
			r.Peers[0].Spec.RouterID = "198.51.100.1"
			r.Peers[0].Spec.NodeSelectors = tc.sel
			snap, err := Build(r, Options{Namespace: ns, NodeName: tc.node})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(strings.Join(snap.Warnings(), "\n"), shared); got != tc.warns {
				t.Errorf("warned %v, want %v: %q", got, tc.warns, snap.Warnings())
			}
		})
	}
}

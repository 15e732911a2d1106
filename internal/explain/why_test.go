package explain

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/herald-lb/herald/api/v1beta1"
)

// TestWhyAllocation: the allocation part names the pool and how the
// address was chosen, or the cause of a pending Service, with the
// allocator's own error.
func TestWhyAllocation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(c *Cluster)
		// want: substrings of Allocation.Why; problem: of a problem ("" none).
		want, problem string
		pending       bool
	}{
		{"allocated", func(c *Cluster) {
			c.service("web", []string{"198.51.100.1"}, "n1")
			c.l2Status("web", winnerOf(c, "198.51.100.1"))
		},
			`pool "p" is the first of the candidate pools [p]`, "", false},
		// A higher-priority pool that has room now does not move a kept
		// allocation: why says so instead of "the first with a free address".
		{"kept in a lower-priority pool", func(c *Cluster) {
			c.Resources.Pools = append(c.Resources.Pools, v1beta1.IPAddressPool{ObjectMeta: hmeta("a-first"),
				Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"203.0.113.8/29"}}})
			c.service("web", []string{"198.51.100.1"}, "n1")
			c.l2Status("web", winnerOf(c, "198.51.100.1"))
		}, `pool "p" gave the addresses, and an allocation is kept while its pool still serves the Service: pool "a-first", before it among the candidate pools [a-first p]`, "", false},
		// Sharers too: the kept text, then the sharing note.
		{"kept and shared", func(c *Cluster) {
			c.Resources.Pools = append(c.Resources.Pools, v1beta1.IPAddressPool{ObjectMeta: hmeta("a-first"),
				Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"203.0.113.8/29"}}})
			s := c.service("web", []string{"198.51.100.1"}, "n1")
			s.Annotations["metallb.io/allow-shared-ip"] = "k"
			o := c.service("other", []string{"198.51.100.1"}, "n1")
			o.Annotations["metallb.io/allow-shared-ip"] = "k"
			o.Spec.Ports[0].Port = 81
			c.l2Status("web", winnerOf(c, "198.51.100.1"))
		}, `pool "p" gave the addresses, and an allocation is kept while its pool still serves the Service: pool "a-first", before it among the candidate pools [a-first p] (serviceAllocation priority, then name), has a free address now and would serve a new Service; shared (allow-shared-ip "k") with demo/other`, "", false},
		// A pool that left the candidates (autoAssign false) keeps what it
		// gave: why names the candidates without claiming it is first.
		{"kept in a pool no longer a candidate", func(c *Cluster) {
			c.Resources.Pools[0].Spec.AutoAssign = ptr.To(false)
			c.Resources.Pools = append(c.Resources.Pools, v1beta1.IPAddressPool{ObjectMeta: hmeta("a-first"),
				Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"203.0.113.8/29"}}})
			c.service("web", []string{"198.51.100.1"}, "n1")
			c.l2Status("web", winnerOf(c, "198.51.100.1"))
		}, `pool "p" gave the addresses, and an allocation is kept while its pool still serves the Service: the pool is no longer among the candidate pools [a-first] of a new allocation`, "", false},
		{"requested", func(c *Cluster) {
			s := c.service("web", []string{"198.51.100.5"}, "n1")
			s.Annotations["metallb.io/loadBalancerIPs"] = "198.51.100.5"
			c.l2Status("web", winnerOf(c, "198.51.100.5"))
		}, "requested", "", false},
		{"no matching pool", func(c *Cluster) {
			c.Resources.Pools[0].Spec.ServiceAllocation = &v1beta1.ServiceAllocation{Namespaces: []string{"prod"}}
			c.service("web", nil, "n1")
		}, "no pool may serve the Service", `namespace "demo" is not in serviceAllocation.namespaces [prod]`, true},
		{"pool full", func(c *Cluster) {
			for i, ip := range []string{"198.51.100.0", "198.51.100.1", "198.51.100.2", "198.51.100.3", "198.51.100.4", "198.51.100.5", "198.51.100.6", "198.51.100.7"} {
				c.service("holder"+string(rune('a'+i)), []string{ip})
			}
			c.service("web", nil, "n1")
		}, "every candidate pool is full", `address pool "p" has no free IPv4 address`, true},
		{"requested outside every pool", func(c *Cluster) {
			s := c.service("web", nil, "n1")
			s.Annotations["metallb.io/loadBalancerIPs"] = "203.0.113.9"
			s.Spec.LoadBalancerIP = ""
		}, "outside every allowed pool", "203.0.113.9", true},
		{"sharing conflict", func(c *Cluster) {
			o := c.service("other", []string{"198.51.100.3"})
			o.Annotations["metallb.io/allow-shared-ip"] = "k"
			s := c.service("web", nil, "n1")
			s.Annotations["metallb.io/allow-shared-ip"] = "k"
			s.Annotations["metallb.io/loadBalancerIPs"] = "198.51.100.3"
		}, "IP sharing conflict", "demo/other", true},
		{"not a LoadBalancer", func(c *Cluster) { c.service("web", nil).Spec.Type = corev1.ServiceTypeClusterIP }, "not a LoadBalancer", "", false},
		{"annotation disagrees", func(c *Cluster) {
			s := c.service("web", []string{"198.51.100.1"}, "n1")
			s.Annotations["metallb.io/ip-allocated-from-pool"] = "gone"
			c.l2Status("web", winnerOf(c, "198.51.100.1"))
		}, `pool "p"`, `annotation metallb.io/ip-allocated-from-pool says pool "gone"`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := lab()
			tc.setup(c)
			r := mustWhy(t, c, "web")
			if !strings.Contains(r.Allocation.Why, tc.want) {
				t.Errorf("allocation.why = %q, want it to contain %q", r.Allocation.Why, tc.want)
			}
			if r.Allocation.Pending != tc.pending {
				t.Errorf("pending = %v, want %v", r.Allocation.Pending, tc.pending)
			}
			if tc.problem == "" && len(r.Problems) > 0 {
				t.Errorf("problems %q, want none", r.Problems)
			}
			if tc.problem != "" && !hasProblem(r.Problems, tc.problem) && !strings.Contains(r.Allocation.Error, tc.problem) && !poolWhyNot(r, tc.problem) {
				t.Errorf("problems %q / error %q: none mentions %q", r.Problems, r.Allocation.Error, tc.problem)
			}
			if tc.pending && len(r.Problems) == 0 {
				t.Error("a pending Service reports no problem (exit status 0)")
			}
		})
	}
}

func poolWhyNot(r *WhyReport, sub string) bool {
	for _, p := range r.Allocation.Pools {
		if strings.Contains(p.WhyNot, sub) {
			return true
		}
	}
	return false
}

// winnerOf returns the node the speakers elect for ip in c as it is now.
func winnerOf(c *Cluster, ip string) string {
	for _, s := range c.Services {
		for _, ing := range s.Status.LoadBalancer.Ingress {
			if ing.IP == ip {
				r, _ := Why(c, s.Namespace, s.Name)
				for _, i := range r.IPs {
					if i.IP == ip && i.L2 != nil {
						return i.L2.Winner
					}
				}
			}
		}
	}
	return ""
}

// TestWhyNodeReasons: every reason announce.Decide gives for a node shows
// on that node's line, with the speaker's detail.
func TestWhyNodeReasons(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(c *Cluster)
		node   string
		reason string
		detail string
	}{
		{"network unavailable", func(c *Cluster) {
			c.node("n2").Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue}}
		}, "n2", "nodeNetworkUnavailable", "NetworkUnavailable"},
		{"exclude label", func(c *Cluster) {
			c.node("n2").Labels["node.kubernetes.io/exclude-from-external-load-balancers"] = ""
		}, "n2", "nodeLabeledExcludeBalancers", "exclude-from-external-load-balancers"},
		{"node selector", func(c *Cluster) {
			c.Resources.L2Advertisements[0].Spec.NodeSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"kubernetes.io/hostname": "n1"}}}
		}, "n2", "noMatchingAdvertisement", "selects node n2"},
		{"service selector", func(c *Cluster) {
			c.Resources.L2Advertisements[0].Spec.ServiceSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"expose": "yes"}}}
		}, "n2", "noMatchingAdvertisement", "covers the Service"},
		{"no local endpoint", func(c *Cluster) {
			c.Services[0].Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}, "n2", "noLocalEndpoints", "externalTrafficPolicy is Local"},
		{"no endpoints", func(c *Cluster) { c.EndpointSlices = nil }, "n2", "noEndpoints", "no serving endpoint"},
		{"not live", func(c *Cluster) { c.SpeakerPods[1] = speakerPod("n2", false) }, "n2", "notOwner", "is Running, not Ready"},
		{"no speaker pod", func(c *Cluster) { c.SpeakerPods = c.SpeakerPods[:1] }, "n2", "notOwner", "no speaker Pod runs on the node"},
		{"shared with service selectors", func(c *Cluster) {
			c.Services[0].Annotations["metallb.io/allow-shared-ip"] = "k"
			c.Services[0].Labels["expose"] = "yes"
			c.Resources.L2Advertisements[0].Spec.ServiceSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"expose": "yes"}}}
		}, "n2", "sharedIPWithServiceSelector", "allows IP sharing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := lab()
			c.service("web", []string{"198.51.100.1"}, "n1")
			tc.setup(c)
			r := mustWhy(t, c, "web")
			if len(r.IPs) != 1 {
				t.Fatalf("ips %+v", r.IPs)
			}
			v := verdict(t, r.IPs[0].L2, tc.node)
			if v.Announce || v.Reason != tc.reason || !strings.Contains(v.Detail, tc.detail) {
				t.Errorf("%s: %+v, want reason %s with detail containing %q", tc.node, v, tc.reason, tc.detail)
			}
		})
	}
}

// TestWhyElectionAndDisagreement: the winner is the node whose Decide
// announces, the ranking explains it, and a ServiceL2Status from another
// node is flagged (as is a missing one).
func TestWhyElectionAndDisagreement(t *testing.T) {
	c := lab()
	c.service("web", []string{"198.51.100.1"}, "n1", "n2", "n3")
	r := mustWhy(t, c, "web")
	m := r.IPs[0].L2
	if m.Winner == "" || m.Ranking[0].Node != m.Winner || len(m.Ranking) != 3 || !strings.Contains(m.WinnerWhy, "lowest rendezvous hash") {
		t.Fatalf("winner %q ranking %+v why %q", m.Winner, m.Ranking, m.WinnerWhy)
	}
	if !hasProblem(r.Problems, "wins the layer 2 election, but there is no ServiceL2Status") {
		t.Errorf("missing ServiceL2Status not flagged: %q", r.Problems)
	}
	loser := m.Ranking[1].Node
	c.l2Status("web", loser)
	r = mustWhy(t, c, "web")
	if !hasProblem(r.Problems, "node "+loser+" reports announcing in layer 2") {
		t.Errorf("ServiceL2Status of the loser %s not flagged: %q", loser, r.Problems)
	}
	c.L2Statuses = nil
	c.l2Status("web", m.Winner)
	if r = mustWhy(t, c, "web"); len(r.Problems) != 0 {
		t.Errorf("agreeing state flagged: %q", r.Problems)
	}

	// Preferences decide before the hash.
	c.Resources.L2Advertisements[0].Spec.PreferredNodeSelectors = []v1beta1.PreferredNodeSelector{{Weight: 50,
		Preference: metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/hostname": loser}}}}
	r = mustWhy(t, c, "web")
	if m := r.IPs[0].L2; m.Winner != loser || !strings.Contains(m.WinnerWhy, "preferredNodeSelectors score 50") {
		t.Errorf("with a preference for %s: winner %q why %q", loser, m.Winner, m.WinnerWhy)
	}
}

// TestWhyBGP: every eligible node announces, with the advertisement's
// attributes, to its peers; LOCAL_PREF shows because the peer is iBGP; a
// ServiceBGPStatus naming other peers is flagged.
func TestWhyBGP(t *testing.T) {
	c := lab()
	c.Resources.L2Advertisements = nil
	c.withBGP()
	c.service("web", []string{"198.51.100.1"}, "n1", "n2")
	c.Services[0].Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	for _, n := range []string{"n1", "n2"} {
		c.BGPStatuses = append(c.BGPStatuses, v1beta1.ServiceBGPStatus{ObjectMeta: hmeta("bgp-" + n),
			Status: v1beta1.ServiceBGPStatusStatus{ServiceStatusCommon: v1beta1.ServiceStatusCommon{Node: n, ServiceName: "web", ServiceNamespace: "demo"}, Peers: []string{"tor"}}})
	}
	r := mustWhy(t, c, "web")
	if r.IPs[0].L2 != nil {
		t.Error("layer 2 reported for a pool without L2Advertisement")
	}
	m := r.IPs[0].BGP
	if v := verdict(t, m, "n3"); v.Announce || v.Reason != "noLocalEndpoints" {
		t.Errorf("n3: %+v", v)
	}
	if len(m.Paths) != 2 {
		t.Fatalf("paths %+v, want one per announcing node", m.Paths)
	}
	p := m.Paths[0]
	if p.Prefix != "198.51.100.1/32" || p.Advertisement != "bgp" || strings.Join(p.Communities, ",") != "64512:100" ||
		p.LocalPref == nil || *p.LocalPref != 200 || strings.Join(p.Peers, ",") != "tor" {
		t.Errorf("path %+v", p)
	}
	if len(r.Problems) != 0 {
		t.Errorf("problems %q", r.Problems)
	}
	c.BGPStatuses[1].Status.Peers = []string{"other"}
	c.BGPStatuses = append(c.BGPStatuses, v1beta1.ServiceBGPStatus{ObjectMeta: hmeta("bgp-n3"),
		Status: v1beta1.ServiceBGPStatusStatus{ServiceStatusCommon: v1beta1.ServiceStatusCommon{Node: "n3", ServiceName: "web", ServiceNamespace: "demo"}}})
	r = mustWhy(t, c, "web")
	if !hasProblem(r.Problems, "node n2 reports BGP peers [other], computed [tor]") || !hasProblem(r.Problems, "node n3 reports announcing over BGP (ServiceBGPStatus bgp-n3), but computes no path there") {
		t.Errorf("problems %q", r.Problems)
	}
	c.SpeakerPods[0] = speakerPod("n1", false)
	r = mustWhy(t, c, "web")
	if v := verdict(t, r.IPs[0].BGP, "n1"); !v.Announce || v.Live || !strings.Contains(v.Detail, "would announce, but speaker Pod speaker-n1 is Running, not Ready") {
		t.Errorf("n1 not live: %+v", v)
	}
	if !hasProblem(r.Problems, "node n1 reports announcing over BGP (ServiceBGPStatus bgp-n1), but its speaker Pod is not Running and Ready") {
		t.Errorf("problems %q", r.Problems)
	}
}

// TestWhyUnannounced: an address with no advertisement, or with every node
// refused, is a problem (exit status 1) and names the reasons.
func TestWhyUnannounced(t *testing.T) {
	c := lab()
	c.Resources.L2Advertisements = nil
	c.service("web", []string{"198.51.100.1"}, "n1")
	c.l2Status("web", "n1")
	r := mustWhy(t, c, "web")
	if !hasProblem(r.Problems, `no L2Advertisement or BGPAdvertisement selects pool "p"`) {
		t.Errorf("problems %q", r.Problems)
	}
	c = lab()
	c.service("web", []string{"198.51.100.1"}, "n1")
	c.Services[0].Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	c.Resources.L2Advertisements[0].Spec.NodeSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"kubernetes.io/hostname": "n3"}}}
	r = mustWhy(t, c, "web")
	if !hasProblem(r.Problems, "no node announces it in layer 2 (noLocalEndpoints on n3; noMatchingAdvertisement on n1,n2)") {
		t.Errorf("problems %q", r.Problems)
	}
	if _, err := Why(c, "demo", "nope"); err == nil {
		t.Error("unknown Service: no error")
	}
}

// TestWhyInterfaces: when the L2Advertisement names interfaces, a
// ServiceL2Status that names none (the elected node has none of them) or
// another one is flagged.
func TestWhyInterfaces(t *testing.T) {
	c := lab()
	c.Resources.L2Advertisements[0].Spec.Interfaces = []string{"eth1"}
	c.service("web", []string{"198.51.100.1"}, "n1", "n2", "n3")
	w := winnerOf(c, "198.51.100.1")
	c.l2Status("web", w)
	r := mustWhy(t, c, "web")
	if v := verdict(t, r.IPs[0].L2, w); strings.Join(v.Interfaces, ",") != "eth1" {
		t.Fatalf("winner %s: %+v", w, v)
	}
	if !hasProblem(r.Problems, "names no interface, but the L2Advertisement restricts it to [eth1]") {
		t.Errorf("problems %q", r.Problems)
	}
	c.L2Statuses[0].Status.Interfaces = []v1beta1.InterfaceInfo{{Name: "eth0"}}
	if r = mustWhy(t, c, "web"); !hasProblem(r.Problems, "names interface eth0, outside the L2Advertisement's interfaces [eth1]") {
		t.Errorf("problems %q", r.Problems)
	}
	c.L2Statuses[0].Status.Interfaces = []v1beta1.InterfaceInfo{{Name: "eth1"}}
	if r = mustWhy(t, c, "web"); len(r.Problems) != 0 {
		t.Errorf("problems %q", r.Problems)
	}
}

// TestWhyWithoutMemberlist: speakers without memberlist take liveness from
// the Node conditions (announce.LiveFromNodeConditions), and so does the
// explanation: a Node that is not Ready is not live whatever its Pod, and
// Pods do not matter.
func TestWhyWithoutMemberlist(t *testing.T) {
	c := lab()
	c.MemberlistDisabled = true
	c.SpeakerPods = nil
	for i := range c.Resources.Nodes {
		c.Resources.Nodes[i].Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	}
	c.node("n2").Status.Conditions[0].Status = corev1.ConditionUnknown
	c.service("web", []string{"198.51.100.1"}, "n1", "n2", "n3")
	r := mustWhy(t, c, "web")
	if v := verdict(t, r.IPs[0].L2, "n2"); v.Live || v.Reason != "notOwner" || !strings.Contains(v.Detail, "Node n2 is not Ready (no memberlist") {
		t.Errorf("n2: %+v", v)
	}
	for _, n := range []string{"n1", "n3"} {
		if v := verdict(t, r.IPs[0].L2, n); !v.Live {
			t.Errorf("%s: %+v, want live (Ready, no Pod needed)", n, v)
		}
	}
	if !hasProblem(r.Notes, "run without memberlist") {
		t.Errorf("notes %q", r.Notes)
	}
}

// TestWhyNoCandidate: when no node is a candidate of the layer 2 election
// (no serving endpoint anywhere, or none local with externalTrafficPolicy
// Local), there is no winner, no ranking, and winnerWhy says "no
// candidate:" with the nodes' reason, never a hash verdict.
func TestWhyNoCandidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(c *Cluster)
		reason string
	}{
		{"no EndpointSlice, Cluster", func(c *Cluster) { c.EndpointSlices = nil }, "noEndpoints on n1,n2,n3"},
		{"no local endpoint, Local", func(c *Cluster) {
			c.Services[0].Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			c.EndpointSlices = nil
		}, "noLocalEndpoints on n1,n2,n3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := lab()
			c.service("web", []string{"198.51.100.1"}, "n1")
			tc.setup(c)
			m := mustWhy(t, c, "web").IPs[0].L2
			if m.Winner != "" || len(m.Ranking) != 0 || m.WinnerWhy != "no candidate: "+tc.reason {
				t.Errorf("winner %q ranking %+v winnerWhy %q, want no winner, no ranking, %q", m.Winner, m.Ranking, m.WinnerWhy, "no candidate: "+tc.reason)
			}
		})
	}
}

// TestProblemsOneLine: a problem holding a multi-line error (the
// allocator's errors.Join of one error per pool, a ConfigurationState's
// multi-line summary) is one line, its parts joined with "; ".
func TestProblemsOneLine(t *testing.T) {
	c := lab()
	// Two invalid pools: config.Build joins one error per object.
	c.Resources.Pools = append(c.Resources.Pools,
		v1beta1.IPAddressPool{ObjectMeta: hmeta("q"), Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"nope-q"}}},
		v1beta1.IPAddressPool{ObjectMeta: hmeta("r"), Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"nope-r"}}})
	c.service("web", []string{"198.51.100.1"}, "n1")
	c.ConfigStates = []v1beta1.ConfigurationState{{ObjectMeta: hmeta("controller"),
		Status: v1beta1.ConfigurationStateStatus{Result: v1beta1.ConfigurationResultInvalid, ErrorSummary: "bad pool x\nbad pool y"}}}
	check := func(what string, problems []string, want string) {
		t.Helper()
		if !hasProblem(problems, want) {
			t.Errorf("%s: problems %q, want one containing %q", what, problems, want)
		}
		for _, p := range problems {
			if strings.ContainsAny(p, "\r\n") {
				t.Errorf("%s: problem %q spans lines", what, p)
			}
		}
	}
	check("why", mustWhy(t, c, "web").Problems, `nope-q`)
	check("pools", Pools(c).Problems, `nope-q`)
	check("config", Config(c).Problems, "bad pool x; bad pool y")
}

// TestWhyPinnedPool: for a Service naming a pool (metallb.io/address-pool)
// the allocation tries that pool alone; every other pool shows as not
// tried, naming the pool, however its serviceAllocation would select the
// Service.
func TestWhyPinnedPool(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ips   []string
		order string
	}{
		{"allocated", []string{"203.0.113.1"}, "q"},
		{"pending", nil, "q"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := lab()
			c.Resources.Pools = append(c.Resources.Pools,
				v1beta1.IPAddressPool{ObjectMeta: hmeta("q"), Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"203.0.113.0/29"}}},
				v1beta1.IPAddressPool{ObjectMeta: hmeta("a-first"), Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"203.0.113.8/29"}}})
			s := c.service("web", tc.ips, "n1")
			s.Annotations["metallb.io/address-pool"] = "q"
			a := mustWhy(t, c, "web").Allocation
			if strings.Join(a.CandidateOrder, ",") != tc.order {
				t.Errorf("candidate order %v, want [%s]", a.CandidateOrder, tc.order)
			}
			if len(a.Pools) != 3 {
				t.Fatalf("pools %+v", a.Pools)
			}
			for _, p := range a.Pools {
				switch p.Name {
				case "q":
					if !p.Selected || p.WhyNot != "" {
						t.Errorf("named pool q: %+v, want selected", p)
					}
				default:
					if want := `not tried: the Service names pool "q" (metallb.io/address-pool)`; p.Selected || p.WhyNot != want {
						t.Errorf("pool %s: %+v, want not selected, whyNot %q", p.Name, p, want)
					}
				}
			}
		})
	}
}

// TestWhyRequestedIPs: a Service requesting addresses
// (metallb.io/loadBalancerIPs) is served by the pool holding them, not in
// the automatic order: the candidate order names that pool, or none when
// no pool holds them.
func TestWhyRequestedIPs(t *testing.T) {
	for _, tc := range []struct {
		name, ip, order string
	}{
		{"in pool q", "203.0.113.3", "q"},
		{"in no pool", "192.0.2.77", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := lab()
			c.Resources.Pools = append(c.Resources.Pools,
				v1beta1.IPAddressPool{ObjectMeta: hmeta("q"), Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"203.0.113.0/29"}}},
				v1beta1.IPAddressPool{ObjectMeta: hmeta("a-first"), Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"203.0.113.8/29"}}})
			s := c.service("web", nil, "n1")
			s.Annotations["metallb.io/loadBalancerIPs"] = tc.ip
			a := mustWhy(t, c, "web").Allocation
			if got := strings.Join(a.CandidateOrder, ","); got != tc.order {
				t.Errorf("candidate order %v, want [%s]", a.CandidateOrder, tc.order)
			}
		})
	}
}

// TestWhyNoMatchingInterface: the plugin cannot see node interfaces, so
// the elected node's speaker's own report decides: its newest
// announceFailed (noMatchingInterface) for the address, newer than any
// nodeAssigned for it, makes the node not announce, with the event's
// detail, and is the cause named in Problems; an older one, another
// node's or another address's is ignored.
func TestWhyNoMatchingInterface(t *testing.T) {
	const ip = "198.51.100.1"
	detail := func(n string) string {
		return "node " + n + " won the election for " + ip + " but has none of the interfaces of L2Advertisement l2 (interfaces eth5) (its interfaces answering ARP: eth0)"
	}
	failed := func(n, addr string, sec int) corev1.Event {
		return svcEvent(corev1.EventTypeWarning, "announceFailed", `failed to announce `+addr+` from node "`+n+`" with protocol "layer2": `+detail(n), sec)
	}
	assigned := func(n string, sec int) corev1.Event {
		return svcEvent(corev1.EventTypeNormal, "nodeAssigned", `announcing from node "`+n+`" with protocol "layer2": `+ip, sec)
	}
	c := lab()
	c.Resources.L2Advertisements[0].Spec.Interfaces = []string{"eth5"}
	c.service("web", []string{ip}, "n1", "n2", "n3")
	w := winnerOf(c, ip)
	other := "n1"
	if w == other {
		other = "n2"
	}
	for _, tc := range []struct {
		name   string
		events []corev1.Event
		fails  bool
	}{
		{"failed", []corev1.Event{failed(w, ip, 10)}, true},
		{"failed after assigned", []corev1.Event{assigned(w, 5), failed(w, ip, 10)}, true},
		{"assigned after failed", []corev1.Event{failed(w, ip, 5), assigned(w, 10)}, false},
		{"another node's", []corev1.Event{failed(other, ip, 10)}, false},
		{"another address's", []corev1.Event{failed(w, "198.51.100.2", 10)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.Events = tc.events
			r := mustWhy(t, c, "web")
			m := r.IPs[0].L2
			v := verdict(t, m, w)
			missing := hasProblem(r.Problems, "there is no ServiceL2Status")
			cause := hasProblem(r.Problems, "node "+w+" won the election but has none of the L2Advertisement's interfaces (noMatchingInterface, its speaker's announceFailed event): "+detail(w))
			if !tc.fails {
				if !v.Announce || m.Winner != w || cause || !missing {
					t.Errorf("%s: %+v winner %q problems %q, want it announcing (and its ServiceL2Status missing)", w, v, m.Winner, r.Problems)
				}
				return
			}
			if v.Announce || v.Reason != "noMatchingInterface" || v.Detail != detail(w) || len(v.Interfaces) != 0 {
				t.Errorf("%s: %+v, want not announcing, noMatchingInterface, the event's detail", w, v)
			}
			if m.Winner != "" || !cause || missing {
				t.Errorf("winner %q problems %q, want no winner and the cause named (no missing ServiceL2Status)", m.Winner, r.Problems)
			}
		})
	}
}

// svcEvent is an event of demo/web at sec seconds after 2026-01-01.
func svcEvent(typ, reason, msg string, sec int) corev1.Event {
	return corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web.%s.%d", reason, sec), Namespace: "demo"},
		InvolvedObject: corev1.ObjectReference{Kind: "Service", Namespace: "demo", Name: "web"}, Type: typ, Reason: reason, Message: msg,
		LastTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, sec, 0, time.UTC))}
}

// TestWhyEventsOfThisService: the events listed (and read for
// noMatchingInterface) are the Service's own, not those of an earlier
// Service of the same name that was deleted; events without a UID stay.
func TestWhyEventsOfThisService(t *testing.T) {
	c := lab()
	s := c.service("web", []string{"198.51.100.1"}, "n1")
	s.UID = "uid-new"
	c.l2Status("web", winnerOf(c, "198.51.100.1"))
	old := svcEvent(corev1.EventTypeNormal, "IPAllocated", `Assigned IP ["198.51.100.5"]`, 1)
	old.InvolvedObject.UID = "uid-old"
	mine := svcEvent(corev1.EventTypeNormal, "IPAllocated", `Assigned IP ["198.51.100.1"]`, 2)
	mine.InvolvedObject.UID = "uid-new"
	noUID := svcEvent(corev1.EventTypeNormal, "nodeAssigned", `announcing from node "n1" with protocol "layer2": 198.51.100.1`, 3)
	c.Events = []corev1.Event{old, mine, noUID}
	var got []string
	for _, e := range mustWhy(t, c, "web").Reported.Events {
		got = append(got, e.Reason+": "+e.Message)
	}
	want := []string{`IPAllocated: Assigned IP ["198.51.100.1"]`, `nodeAssigned: announcing from node "n1" with protocol "layer2": 198.51.100.1`}
	if !slices.Equal(got, want) {
		t.Errorf("events %q, want %q (not the deleted Service's)", got, want)
	}
}

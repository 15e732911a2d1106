package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/e2e/lab"
	"github.com/herald-lb/herald/internal/poll"
)

// obsNS is the namespace of the observability test's Services.
const obsNS = "obs-e2e"

// TestObservability runs Herald (manifests as shipped: metrics on HTTPS with
// Kubernetes authentication) with one BGP Service and one layer 2 Service in
// one lab, and checks what an operator watches: a real Prometheus started in
// the client namespace scrapes the controller and every speaker with a
// ServiceAccount token bound to herald-metrics-reader and answers PromQL
// through its HTTP API; every exposition passes `promtool check metrics`;
// an unauthenticated scrape is refused; ServiceBGPStatus, ServiceL2Status
// and the Services' and BGPPeer's events are present.
func TestObservability(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up network namespaces, FRR, an API server, Herald and Prometheus")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l := lab.UpForTest(t, lab.Config{Nodes: 3})
	h, err := l.InstallHerald(ctx, lab.InstallOptions{})
	if h != nil {
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("speaker and controller logs:\n%s", h.Logs(60))
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	c := h.Client()
	t.Cleanup(func() {
		if t.Failed() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			t.Logf("FRR at the end:\n%s", bgpFRRDump(ctx, l))
		}
	})

	// Configuration: one eBGP peer from every node, a BGP pool and a layer 2 pool.
	applyRouterAndPools(ctx, t, c, "obs")
	nodes := h.SpeakerNodes()
	bgpAddrs := bgpCreateService(ctx, t, l, bgpSvcSpec{Namespace: obsNS, Name: "bgp-web", Pool: "obs-bgp"})
	bgpCreateService(ctx, t, l, bgpSvcSpec{Namespace: obsNS, Name: "l2-web", Pool: "obs-l2"})
	var eps []lab.Endpoint
	for _, n := range nodes {
		eps = append(eps, lab.Endpoint{Node: n, Ready: true})
	}
	for _, s := range []string{"bgp-web", "l2-web"} {
		if err := l.SetEndpoints(ctx, obsNS, s, eps); err != nil {
			t.Fatal(err)
		}
	}
	var v4Nodes []string
	for _, n := range nodes {
		nd, _ := l.Node(n)
		v4Nodes = append(v4Nodes, nd.IPv4.String())
	}
	if _, err := bgpWaitPrefix(ctx, l, bgpHostPrefix(bgpAddrs[0]), v4Nodes, time.Minute); err != nil {
		t.Fatalf("BGP Service not announced, nothing to observe: %v", err)
	}

	token, err := l.MetricsReaderToken(ctx, lab.HeraldNamespace, "e2e-prometheus")
	if err != nil {
		t.Fatal(err)
	}
	targets := l.HeraldMetricsTargets(nodes)

	t.Run("PrometheusScrapesAndQueries", func(t *testing.T) {
		// Proves the endpoints work for a real scraper with the documented
		// RBAC, and the values an operator alerts on: every session up,
		// each speaker announcing the one BGP prefix, the controller counting
		// the two addresses in use.
		prom, err := l.StartPrometheus(ctx, lab.PrometheusConfig{Jobs: targets, BearerToken: token})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				ts, err := prom.Targets(context.Background())
				t.Logf("prometheus targets: %+v (%v); log %s", ts, err, prom.Process().Log)
			}
		})
		_, err = poll.Wait(ctx, time.Minute, "", func() error {
			ts, err := prom.Targets(ctx)
			if err != nil {
				return err
			}
			if len(ts) != len(nodes)+1 {
				return fmt.Errorf("%d targets, want %d", len(ts), len(nodes)+1)
			}
			for _, tg := range ts {
				if tg.Health != "up" {
					return fmt.Errorf("target %s (%s): health %q, last error %q", tg.URL, tg.Job, tg.Health, tg.LastError)
				}
			}
			return nil
		}, bgpEvery)
		if err != nil {
			t.Fatal(err)
		}
		peer := lab.RouterAddr.String() + ":179"
		checks := []struct {
			expr string
			want func([]lab.Sample) error
		}{
			{`metallb_bgp_session_up{job="herald-speaker"} == 1`, func(s []lab.Sample) error {
				return perInstance(s, len(nodes), func(x lab.Sample) bool { return x.Metric["peer"] == peer })
			}},
			{`metallb_bgp_announced_prefixes_total{job="herald-speaker"}`, func(s []lab.Sample) error {
				return perInstance(s, len(nodes), func(x lab.Sample) bool { return x.Metric["peer"] == peer && x.Value == 1 })
			}},
			{`metallb_bgp_pending_prefixes_total{job="herald-speaker"} == 0`, func(s []lab.Sample) error {
				return perInstance(s, len(nodes), func(lab.Sample) bool { return true })
			}},
			{`sum(metallb_speaker_announced{job="herald-speaker",protocol="layer2"})`, func(s []lab.Sample) error {
				if len(s) != 1 || s[0].Value != 1 {
					return fmt.Errorf("got %v, want exactly one layer 2 announcer", s)
				}
				return nil
			}},
			{`metallb_allocator_addresses_in_use_total{job="herald-controller"}`, func(s []lab.Sample) error {
				got := map[string]float64{}
				for _, x := range s {
					got[x.Metric["pool"]] = x.Value
				}
				if got["obs-bgp"] != 1 || got["obs-l2"] != 1 {
					return fmt.Errorf("in use by pool %v, want obs-bgp 1 and obs-l2 1", got)
				}
				return nil
			}},
			{`metallb_k8s_client_config_loaded_bool == 1`, func(s []lab.Sample) error {
				return perInstance(s, len(nodes)+1, func(lab.Sample) bool { return true })
			}},
			// Both components export their build (issue #17).
			{`herald_build_info == 1`, func(s []lab.Sample) error {
				return perInstance(s, len(nodes)+1, func(x lab.Sample) bool {
					return x.Metric["version"] != "" && x.Metric["commit"] != "" && strings.HasPrefix(x.Metric["goversion"], "go1.")
				})
			}},
		}
		for _, ch := range checks {
			var last []lab.Sample
			_, err := poll.Wait(ctx, 30*time.Second, "", func() error {
				var err error
				if last, err = prom.Query(ctx, ch.expr); err != nil {
					return err
				}
				return ch.want(last)
			}, bgpEvery)
			if err != nil {
				t.Errorf("PromQL %s: %v (last result %v)", ch.expr, err, last)
			}
		}
	})

	t.Run("PromtoolCheckMetrics", func(t *testing.T) {
		// Proves every exposition is well-formed and follows Prometheus'
		// naming conventions (promtool's lint), and that the HTTPS endpoint
		// refuses a scrape without a token.
		for job, addrs := range targets {
			for _, a := range addrs {
				body, err := l.ScrapeMetrics(ctx, l.ClientNamespace(), "https", a, token)
				if err != nil {
					t.Errorf("%s %s: %v", job, a, err)
					continue
				}
				if job == "herald-speaker" && !strings.Contains(string(body), "metallb_bgp_session_up") {
					t.Errorf("%s %s: no metallb_bgp_session_up in the exposition", job, a)
				}
				out, err := lab.PromtoolCheckMetrics(ctx, body)
				if bad := lintProblems(out); len(bad) > 0 || (err != nil && strings.TrimSpace(out) == "") {
					t.Errorf("%s %s: promtool check metrics: %v: %s", job, a, err, strings.Join(bad, "; "))
				} else if strings.TrimSpace(out) != "" {
					t.Logf("%s %s: promtool lint on MetalLB's own metric names (kept for compatibility): %s", job, a, strings.TrimSpace(out))
				}
				if _, err := l.ScrapeMetrics(ctx, l.ClientNamespace(), "https", a, ""); err == nil {
					t.Errorf("%s %s: scrape without a token succeeded; --metrics-secure should refuse it", job, a)
				}
			}
		}
	})

	t.Run("StatusObjects", func(t *testing.T) {
		// Proves the speakers report who announces: one ServiceBGPStatus per
		// announcing node for the BGP Service (listing the peer) and exactly
		// one ServiceL2Status (the elected node) for the layer 2 Service.
		_, err := poll.Wait(ctx, 30*time.Second, "", func() error {
			var bl v1beta1.ServiceBGPStatusList
			if err := c.List(ctx, &bl, client.InNamespace(lab.HeraldNamespace)); err != nil {
				return err
			}
			var bgpNodes []string
			for _, s := range bl.Items {
				if s.Status.ServiceNamespace == obsNS && s.Status.ServiceName == "bgp-web" {
					if !slices.Contains(s.Status.Peers, "router") {
						return fmt.Errorf("ServiceBGPStatus %s (node %s): peers %v, want router", s.Name, s.Status.Node, s.Status.Peers)
					}
					bgpNodes = append(bgpNodes, s.Status.Node)
				}
			}
			slices.Sort(bgpNodes)
			if !slices.Equal(bgpNodes, nodes) {
				return fmt.Errorf("ServiceBGPStatus for bgp-web on %v, want %v", bgpNodes, nodes)
			}
			var ll v1beta1.ServiceL2StatusList
			if err := c.List(ctx, &ll, client.InNamespace(lab.HeraldNamespace)); err != nil {
				return err
			}
			var l2Nodes []string
			for _, s := range ll.Items {
				if s.Status.ServiceNamespace == obsNS && s.Status.ServiceName == "l2-web" {
					l2Nodes = append(l2Nodes, s.Status.Node)
				}
				if s.Status.ServiceName == "bgp-web" {
					return fmt.Errorf("ServiceL2Status %s for the BGP-only Service", s.Name)
				}
			}
			if len(l2Nodes) != 1 {
				return fmt.Errorf("ServiceL2Status for l2-web on %v, want exactly one node", l2Nodes)
			}
			return nil
		}, bgpEvery)
		if err != nil {
			t.Error(err)
		}
	})

	t.Run("Events", func(t *testing.T) {
		// Proves the events users read in `kubectl describe`: IPAllocated
		// from the controller on both Services, nodeAssigned from the
		// speakers, sessionEstablished on the BGPPeer.
		want := []struct {
			ns, kind, name, reason string
		}{
			{obsNS, "Service", "bgp-web", "IPAllocated"},
			{obsNS, "Service", "l2-web", "IPAllocated"},
			{obsNS, "Service", "bgp-web", "nodeAssigned"},
			{obsNS, "Service", "l2-web", "nodeAssigned"},
			{lab.HeraldNamespace, "BGPPeer", "router", "sessionEstablished"},
		}
		for _, w := range want {
			_, err := poll.Wait(ctx, 30*time.Second, "", func() error {
				sel := fields.Set{"involvedObject.kind": w.kind, "involvedObject.name": w.name, "reason": w.reason}
				evs, err := l.Client().CoreV1().Events(w.ns).List(ctx, metav1.ListOptions{FieldSelector: sel.String()})
				if err != nil {
					return err
				}
				if len(evs.Items) == 0 {
					return fmt.Errorf("no %s event on %s %s/%s", w.reason, w.kind, w.ns, w.name)
				}
				return nil
			}, bgpEvery)
			if err != nil {
				all, _ := l.Client().CoreV1().Events(w.ns).List(ctx, metav1.ListOptions{})
				t.Errorf("%v; events in %s: %s", err, w.ns, describeEvents(all.Items))
			}
		}
	})
}

// metallbTotalGauges are MetalLB's gauges whose names end in _total. Herald
// keeps MetalLB's metric names (its dashboards and alerts use them), so
// promtool's "non-counter metrics should not have _total suffix" finding on
// exactly these names (and the opposite one on metallbCounters) is
// expected; any other finding is a failure.
var metallbTotalGauges = []string{
	"metallb_allocator_addresses_total",
	"metallb_allocator_ipv4_addresses_total",
	"metallb_allocator_ipv6_addresses_total",
	"metallb_allocator_addresses_in_use_total",
	"metallb_allocator_ipv4_addresses_in_use_total",
	"metallb_allocator_ipv6_addresses_in_use_total",
	"metallb_bgp_announced_prefixes_total",
	"metallb_bgp_pending_prefixes_total",
}

// metallbCounters are MetalLB's counters whose names lack the _total
// suffix, kept for the same reason.
var metallbCounters = []string{
	"metallb_layer2_requests_received",
	"metallb_layer2_responses_sent",
	"metallb_layer2_gratuitous_sent",
}

// lintProblems returns the lines of promtool check metrics output that are
// not the expected finding on a MetalLB-compatible name.
func lintProblems(out string) []string {
	var bad []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		if slices.Contains(metallbTotalGauges, name) && rest == `non-counter metrics should not have "_total" suffix` ||
			slices.Contains(metallbCounters, name) && rest == `counter metrics should have "_total" suffix` {
			continue
		}
		bad = append(bad, line)
	}
	return bad
}

// perInstance checks that samples hold exactly one sample per scrape
// target (label instance), n in all, each satisfying ok.
func perInstance(samples []lab.Sample, n int, ok func(lab.Sample) bool) error {
	seen := map[string]bool{}
	for _, s := range samples {
		if !ok(s) {
			return fmt.Errorf("unexpected sample %v = %v", s.Metric, s.Value)
		}
		seen[s.Metric["instance"]] = true
	}
	if len(seen) != n || len(samples) != n {
		return fmt.Errorf("%d samples from %d instances, want one from each of %d", len(samples), len(seen), n)
	}
	return nil
}

// describeEvents renders events one per line for failure reports.
func describeEvents(evs []corev1.Event) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "\n  %s %s/%s %s: %s", e.InvolvedObject.Kind, e.InvolvedObject.Namespace, e.InvolvedObject.Name, e.Reason, e.Message)
	}
	return b.String()
}

// applyRouterAndPools configures one eBGP peer "router" from every node to
// the lab's router, a BGP pool NAME-bgp (203.0.113.0/28) and a layer 2 pool
// NAME-l2 (198.51.100.200-209), each with its advertisement; none assigns
// automatically. Deleted at the end of t.
func applyRouterAndPools(ctx context.Context, t *testing.T, c client.Client, name string) {
	t.Helper()
	bgpApply(ctx, t, c, &v1beta2.BGPPeer{
		ObjectMeta: metav1.ObjectMeta{Name: "router", Namespace: lab.HeraldNamespace},
		Spec: v1beta2.BGPPeerSpec{MyASN: lab.NodeASN, PeerASN: lab.RouterASN, PeerAddress: lab.RouterAddr.String(),
			ConnectTime: &metav1.Duration{Duration: time.Second}},
	})
	bgpApply(ctx, t, c, &v1beta1.IPAddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-bgp", Namespace: lab.HeraldNamespace},
		Spec:       v1beta1.IPAddressPoolSpec{Addresses: []string{"203.0.113.0/28"}, AutoAssign: ptr.To(false)},
	})
	bgpApply(ctx, t, c, &v1beta1.BGPAdvertisement{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-bgp", Namespace: lab.HeraldNamespace},
		Spec:       v1beta1.BGPAdvertisementSpec{IPAddressPools: []string{name + "-bgp"}},
	})
	bgpApply(ctx, t, c, &v1beta1.IPAddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-l2", Namespace: lab.HeraldNamespace},
		Spec:       v1beta1.IPAddressPoolSpec{Addresses: []string{"198.51.100.200-198.51.100.209"}, AutoAssign: ptr.To(false)},
	})
	bgpApply(ctx, t, c, &v1beta1.L2Advertisement{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-l2", Namespace: lab.HeraldNamespace},
		Spec:       v1beta1.L2AdvertisementSpec{IPAddressPools: []string{name + "-l2"}},
	})
}

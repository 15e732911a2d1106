package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/herald-lb/herald/e2e/lab"
	"github.com/herald-lb/herald/internal/announce"
	"github.com/herald-lb/herald/internal/poll"
)

// dashNS is the namespace of the dashboard test's Services.
const dashNS = "dash-e2e"

// dashboardFile is the chart's Grafana dashboard.
const dashboardFile = "../charts/herald/dashboards/herald.json"

// dashRateInterval replaces Grafana's $__rate_interval in the queries (the
// lab scrapes every second).
const dashRateInterval = "2m"

// legendLabelRE finds the labels a Grafana legend prints ({{label}}).
var legendLabelRE = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// dashEventPanels are the panels whose query returns series at 0 (or none)
// until something happens: the test causes the event and then wants a
// value above 0 (not NaN) from them. Every other panel must return at
// least one sample.
var dashEventPanels = map[string]string{
	// The excluded node loses the address, another node gains it.
	"Layer 2 announcer changes (failovers)": "a layer 2 failover (the announcing node gets the exclude-from-external-load-balancers label)",
	// herald_layer2_conflicts_total has a series only after a conflict.
	"Layer 2 address conflicts": "another host claims the layer 2 address (arping -U from the control-plane namespace)",
	// rate() of the histogram is 0/0 without an allocation in the window.
	"Allocation latency": "a Service allocated within the rate window",
}

// TestDashboardQueries loads the chart's Grafana dashboard, substitutes its
// template variables (every variable its "All" value, $__rate_interval
// 2m) and runs every panel's queries against a real Prometheus scraping the
// lab's controller and speakers (one BGP Service, one layer 2 Service, three
// nodes with memberlist; targets labelled with pod, container and namespace
// as by the chart's ServiceMonitor): each returns data, and every label a
// panel's legend prints is set on its samples. The panels of
// dashEventPanels need an event, which the test causes first: a layer 2
// failover, an address conflict, a fresh allocation. It also runs each
// template variable's label_values() and wants values. Before the fix the
// failover panel read changes() of metallb_speaker_announced, 0 after a
// failover, and failed here.
//
// The same Prometheus evaluates the chart's alerts (helm template of its
// PrometheusRule): every rule evaluates without error, none is active on
// the healthy lab, and after the events exactly HeraldLayer2AddressConflict
// fires (the failover leaves one announcer).
func TestDashboardQueries(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up network namespaces, FRR, an API server, Herald and Prometheus")
	}
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Definition string `json:"definition"`
				AllValue   string `json:"allValue"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				RefID        string `json:"refId"`
				Expr         string `json:"expr"`
				LegendFormat string `json:"legendFormat"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	subst := []string{"$__rate_interval", dashRateInterval}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			if v.AllValue == "" {
				t.Fatalf("variable %s has no allValue to substitute", v.Name)
			}
			subst = append(subst, "${"+v.Name+"}", v.AllValue, "$"+v.Name, v.AllValue)
		}
	}
	repl := strings.NewReplacer(subst...)
	for title := range dashEventPanels {
		found := false
		for _, p := range d.Panels {
			found = found || p.Title == title
		}
		if !found {
			t.Fatalf("dashEventPanels names panel %q, which the dashboard does not have", title)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
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
	applyRouterAndPools(ctx, t, c, "dash")
	nodes := h.SpeakerNodes()
	bgpAddrs := bgpCreateService(ctx, t, l, bgpSvcSpec{Namespace: dashNS, Name: "bgp-web", Pool: "dash-bgp"})
	l2IP := bgpCreateService(ctx, t, l, bgpSvcSpec{Namespace: dashNS, Name: "l2-web", Pool: "dash-l2"})[0]
	var eps []lab.Endpoint
	for _, n := range nodes {
		eps = append(eps, lab.Endpoint{Node: n, Ready: true})
	}
	for _, s := range []string{"bgp-web", "l2-web"} {
		if err := l.SetEndpoints(ctx, dashNS, s, eps); err != nil {
			t.Fatal(err)
		}
	}
	var v4Nodes []string
	for _, n := range nodes {
		nd, _ := l.Node(n)
		v4Nodes = append(v4Nodes, nd.IPv4.String())
	}
	if _, err := bgpWaitPrefix(ctx, l, bgpHostPrefix(bgpAddrs[0]), v4Nodes, time.Minute); err != nil {
		t.Fatalf("BGP Service not announced: %v", err)
	}
	token, err := l.MetricsReaderToken(ctx, lab.HeraldNamespace, "e2e-prometheus")
	if err != nil {
		t.Fatal(err)
	}
	rules := chartAlertRules(ctx, t, h)
	prom, err := l.StartPrometheus(ctx, lab.PrometheusConfig{Jobs: l.HeraldMetricsTargets(nodes), BearerToken: token,
		TargetLabels: h.MetricsTargetLabels(nodes), Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			ts, err := prom.Targets(context.Background())
			t.Logf("prometheus targets: %+v (%v); log %s", ts, err, prom.Process().Log)
		}
	})
	query := func(expr string) ([]lab.Sample, error) { return prom.Query(ctx, expr) }

	// The layer 2 announcer, as the dashboard sees it.
	announcer := func() (string, error) {
		s, err := query(fmt.Sprintf(`metallb_speaker_announced{protocol="layer2",ip=%q}`, l2IP))
		if err != nil {
			return "", err
		}
		if len(s) != 1 {
			return "", fmt.Errorf("%d layer 2 announcers of %s: %v", len(s), l2IP, s)
		}
		return s[0].Metric["node"], nil
	}
	var owner string
	if _, err := poll.Wait(ctx, time.Minute, "", func() (err error) { owner, err = announcer(); return err }, bgpEvery); err != nil {
		t.Fatal(err)
	}

	// The chart's alerts on the healthy lab: every rule evaluates without
	// error and none is pending or firing once memberlist has converged.
	_, err = poll.Wait(ctx, time.Minute, "", func() error {
		rs, err := prom.Rules(ctx)
		if err != nil {
			return err
		}
		if len(rs) < 10 {
			return fmt.Errorf("%d rules loaded", len(rs))
		}
		for _, r := range rs {
			if !r.Evaluated || r.Health != "ok" {
				return fmt.Errorf("rule %s: evaluated %v, health %q %s", r.Name, r.Evaluated, r.Health, r.LastError)
			}
		}
		s, err := query(`min(herald_memberlist_members)`)
		if err == nil && (len(s) != 1 || s[0].Value != float64(len(nodes))) {
			err = fmt.Errorf("memberlist members %v, want %d on every speaker", s, len(nodes))
		}
		return err
	}, bgpEvery)
	if err != nil {
		t.Fatalf("chart alerts on the healthy lab: %v", err)
	}
	// Polled: a memberlist member count that dips for a moment on a
	// loaded machine makes an alert pending until it recovers; an
	// expression that is wrong on a healthy cluster stays active.
	_, err = poll.Wait(ctx, 30*time.Second, "", func() error {
		if active := activeAlerts(ctx, t, prom); len(active) > 0 {
			return fmt.Errorf("alerts active on the healthy lab: %v", active)
		}
		return nil
	}, bgpEvery)
	if err != nil {
		t.Error(err)
	}

	// Event: a layer 2 failover. The owner is excluded from load
	// balancers; another node takes the address over.
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:""}}}`, announce.ExcludeFromLBLabel)
	if _, err := l.Client().CoreV1().Nodes().Patch(ctx, owner, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	var next string
	_, err = poll.Wait(ctx, time.Minute, "", func() (err error) {
		if next, err = announcer(); err == nil && next == owner {
			err = fmt.Errorf("%s still announced by %s", l2IP, owner)
		}
		return err
	}, bgpEvery)
	if err != nil {
		t.Fatalf("no layer 2 failover after excluding %s: %v", owner, err)
	}
	t.Logf("layer 2 failover of %s: %s -> %s", l2IP, owner, next)

	// Traffic: ARP requests to the new announcer (metallb_layer2_requests_received).
	for range 3 {
		if _, err := l.Arping(ctx, l2IP); err != nil {
			t.Fatalf("arping %s: %v", l2IP, err)
		}
	}
	// Event: another host (the control-plane namespace) claims the address,
	// 30 times over 9 s: well above HeraldLayer2AddressConflict's default
	// threshold (10 in 10 minutes) even counted from the series' first
	// scrape (increase() of a new series starts at its first sample).
	_, _ = l.Exec(ctx, l.ControlNamespace(), "arping", "-U", "-c", "30", "-W", "0.3", "-w", "20", "-i", "eth0", "-S", l2IP.String(), l2IP.String())
	// Event: an allocation within the rate window.
	bgpCreateService(ctx, t, l, bgpSvcSpec{Namespace: dashNS, Name: "late", Pool: "dash-bgp"})

	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		// label_values(metric, label) as Grafana runs it: the label's values.
		inner := strings.TrimSuffix(strings.TrimPrefix(v.Definition, "label_values("), ")")
		metric, label, ok := strings.Cut(inner, ",")
		if !ok {
			t.Errorf("variable %s: %q is not label_values(metric, label)", v.Name, v.Definition)
			continue
		}
		expr := fmt.Sprintf("count by (%s) (%s)", strings.TrimSpace(label), metric)
		_, err := poll.Wait(ctx, 30*time.Second, "", func() error {
			s, err := query(expr)
			if err == nil && len(s) == 0 {
				err = fmt.Errorf("no values")
			}
			return err
		}, bgpEvery)
		if err != nil {
			t.Errorf("variable %s (%s): %v", v.Name, expr, err)
		}
	}
	n := 0
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		event, needsEvent := dashEventPanels[p.Title]
		var got [][]lab.Sample
		_, err := poll.Wait(ctx, 45*time.Second, "", func() error {
			got = nil
			positive := false
			for _, tg := range p.Targets {
				expr := repl.Replace(tg.Expr)
				if strings.Contains(expr, "$") {
					return fmt.Errorf("%s: unsubstituted variable in %s", tg.RefID, expr)
				}
				s, err := query(expr)
				if err != nil {
					return err
				}
				got = append(got, s)
				if len(s) == 0 && !needsEvent {
					return fmt.Errorf("query %s %s returned no data", tg.RefID, expr)
				}
				// Every label the legend prints is set on the samples.
				for _, m := range legendLabelRE.FindAllStringSubmatch(tg.LegendFormat, -1) {
					for _, x := range s {
						if x.Metric[m[1]] == "" {
							return fmt.Errorf("query %s %s: legend %q, but sample %v has no label %s", tg.RefID, expr, tg.LegendFormat, x.Metric, m[1])
						}
					}
				}
				for _, x := range s {
					positive = positive || (x.Value > 0 && !math.IsNaN(x.Value))
				}
			}
			if needsEvent && !positive {
				return fmt.Errorf("no value above 0 after %s", event)
			}
			return nil
		}, bgpEvery)
		if err != nil {
			t.Errorf("panel %q: %v (last results %v)", p.Title, err, got)
		}
		n++
	}
	t.Logf("%d panels checked", n)

	// The chart's alerts after the events: the conflict fires
	// HeraldLayer2AddressConflict (for: 0m) for the address; the failover
	// leaves one announcer, so HeraldLayer2MultipleAnnouncers stays quiet,
	// and nothing else is active.
	_, err = poll.Wait(ctx, time.Minute, "", func() error {
		active := activeAlerts(ctx, t, prom)
		want := fmt.Sprintf("HeraldLayer2AddressConflict{ip=%s} firing", l2IP)
		if len(active) != 1 || active[0] != want {
			return fmt.Errorf("active alerts %v, want [%s]", active, want)
		}
		return nil
	}, bgpEvery)
	if err != nil {
		t.Errorf("chart alerts after a failover and a conflict: %v", err)
	}
}

// chartAlertRules renders the chart's PrometheusRule (helm template,
// metrics.prometheusRule.enabled=true) and returns its groups as a
// Prometheus rules file.
func chartAlertRules(ctx context.Context, t *testing.T, h *lab.Herald) []byte {
	t.Helper()
	chart, err := filepath.Abs("../charts/herald")
	if err != nil {
		t.Fatal(err)
	}
	out, err := h.Helm(ctx, "template", "herald", chart, "--namespace", lab.HeraldNamespace,
		"--set", "metrics.prometheusRule.enabled=true", "--show-only", "templates/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rule struct {
		Spec struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal([]byte(out), &rule); err != nil || len(rule.Spec.Groups) == 0 {
		t.Fatalf("chart PrometheusRule: %v\n%s", err, out)
	}
	b, err := yaml.Marshal(map[string]any{"groups": rule.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// activeAlerts returns the pending and firing alerts as
// "Name{ip=...} state", sorted (ip only when the alert has one).
func activeAlerts(ctx context.Context, t *testing.T, prom *lab.Prometheus) []string {
	t.Helper()
	as, err := prom.Alerts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range as {
		s := a.Labels["alertname"]
		if ip := a.Labels["ip"]; ip != "" {
			s += "{ip=" + ip + "}"
		}
		out = append(out, s+" "+a.State)
	}
	sort.Strings(out)
	return out
}

package packaging

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/herald-lb/herald/internal/bfd/bfdnet"
	"github.com/herald-lb/herald/internal/bgp/gobgp"
	"github.com/herald-lb/herald/internal/k8s/allocation"
	"github.com/herald-lb/herald/internal/k8s/configload"
	"github.com/herald-lb/herald/internal/k8s/speaker"
	"github.com/herald-lb/herald/internal/layer2"
	"github.com/herald-lb/herald/internal/members"
)

// dashboardPath is the chart's Grafana dashboard, relative to this package.
const dashboardPath = "../../charts/herald/dashboards/herald.json"

// targetLabels are the labels Prometheus adds to every series of a target
// scraped through the chart's ServiceMonitor or PodMonitor (job, instance,
// and the Kubernetes service discovery's namespace, service, pod,
// container, endpoint); a query may filter and group on them although no
// Herald metric defines them.
var targetLabels = []string{"job", "instance", "namespace", "service", "pod", "container", "endpoint"}

// syntheticMetrics are series Prometheus itself writes per target.
var syntheticMetrics = map[string][]string{"up": nil}

// heraldMetrics returns every metric Herald's binaries register, by name,
// with its variable labels, collected from the packages that register them
// (MetricDescs: the descriptors of the collectors the binaries build). A
// histogram contributes its _bucket (with le), _sum and _count series.
func heraldMetrics(t *testing.T) map[string][]string {
	t.Helper()
	var descs []*prometheus.Desc
	for _, f := range []func() []*prometheus.Desc{
		allocation.MetricDescs, configload.MetricDescs, speaker.MetricDescs,
		layer2.MetricDescs, members.MetricDescs, gobgp.MetricDescs, bfdnet.MetricDescs,
	} {
		descs = append(descs, f()...)
	}
	out := map[string][]string{}
	for _, d := range descs {
		name, labels, err := parseDesc(d.String())
		if err != nil {
			t.Fatal(err)
		}
		out[name] = labels
	}
	// herald_allocation_duration_seconds is the one histogram.
	const hist = "herald_allocation_duration_seconds"
	if l, ok := out[hist]; ok {
		out[hist+"_bucket"] = append(slices.Clone(l), "le")
		out[hist+"_sum"] = l
		out[hist+"_count"] = l
	} else {
		t.Fatalf("no %s among the registered metrics", hist)
	}
	if len(out) < 30 {
		t.Fatalf("only %d metrics collected from the registries: %v", len(out), out)
	}
	return out
}

// descRE matches prometheus.Desc.String(): Desc{fqName: "name", help:
// "...", unit: "", constLabels: {...}, variableLabels: {a,b}}.
var descRE = regexp.MustCompile(`^Desc\{fqName: "([a-zA-Z_:][a-zA-Z0-9_:]*)", .*variableLabels: \{([^}]*)\}\}$`)

func parseDesc(s string) (string, []string, error) {
	m := descRE.FindStringSubmatch(s)
	if m == nil {
		return "", nil, fmt.Errorf("cannot read metric name and labels from %s", s)
	}
	var labels []string
	for _, l := range strings.Split(m[2], ",") {
		if l = strings.TrimSpace(l); l != "" {
			labels = append(labels, strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"))
		}
	}
	return m[1], labels, nil
}

// promqlRefs are the names a PromQL expression uses.
type promqlRefs struct {
	// metrics: metric name -> labels its selectors match on.
	metrics map[string][]string
	// grouping: labels named in by, without, on, ignoring, group_left
	// and group_right lists.
	grouping []string
}

// promqlKeywords are PromQL words that are neither metric nor function
// names; each of listKeywords is followed by a parenthesized label list.
var (
	promqlKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true,
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true}
	identRE      = regexp.MustCompile(`^[a-zA-Z_:]`)
	aggregations = map[string]bool{"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true,
		"stdvar": true, "count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true}
	listKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
	tokenRE      = regexp.MustCompile(`\s*("(?:[^"\\]|\\.)*"|\[[^\]]*\]|[a-zA-Z_:][a-zA-Z0-9_:]*|[0-9.]+(?:e[+-]?[0-9]+)?|=~|!~|!=|==|>=|<=|[-+*/%^(){},=<>])`)
)

// parsePromQL reads the metric names, their matchers' labels and the
// grouping labels of expr. It knows the subset of PromQL the dashboard and
// the alerts use (selectors, functions, aggregations with by/without,
// binary operators with on/ignoring/group_*) and fails on what it cannot
// read, so that a new construct is noticed, not skipped.
func parsePromQL(expr string) (promqlRefs, error) {
	refs := promqlRefs{metrics: map[string][]string{}}
	var toks []string
	rest := expr
	for strings.TrimSpace(rest) != "" {
		m := tokenRE.FindStringSubmatchIndex(rest)
		if m == nil || m[0] != 0 {
			return refs, fmt.Errorf("%q: cannot read at %q", expr, rest)
		}
		toks = append(toks, rest[m[2]:m[3]])
		rest = rest[m[1]:]
	}
	for i := 0; i < len(toks); i++ {
		tok := toks[i]
		next := ""
		if i+1 < len(toks) {
			next = toks[i+1]
		}
		switch {
		case listKeywords[tok]:
			if next != "(" {
				if tok == "group_left" || tok == "group_right" {
					continue // without a label list
				}
				return refs, fmt.Errorf("%q: %s without a label list", expr, tok)
			}
			j := i + 2
			for ; j < len(toks) && toks[j] != ")"; j++ {
				if toks[j] != "," {
					refs.grouping = append(refs.grouping, toks[j])
				}
			}
			i = j
		case promqlKeywords[strings.ToLower(tok)]:
		case identRE.MatchString(tok):
			if next == "(" {
				continue // a function or an aggregation
			}
			if i+2 < len(toks) && listKeywords[next] && aggregations[tok] {
				continue // an aggregation with its by list first
			}
			labels := refs.metrics[tok]
			if next == "{" {
				j := i + 2
				for ; j < len(toks) && toks[j] != "}"; j++ {
					if j+2 < len(toks) && (toks[j+1] == "=" || toks[j+1] == "=~" || toks[j+1] == "!=" || toks[j+1] == "!~") {
						labels = append(labels, toks[j])
						j += 2
					} else if toks[j] != "," {
						return refs, fmt.Errorf("%q: cannot read matcher at %q", expr, toks[j])
					}
				}
				i = j
			}
			refs.metrics[tok] = labels
		}
	}
	return refs, nil
}

// checkQuery checks one PromQL expression against the registered metrics:
// every metric exists, and every label it matches or groups on, and every
// label in extra (a legend's), is one a metric in the expression has or a
// target label.
func checkQuery(known map[string][]string, expr string, extra []string) []string {
	refs, err := parsePromQL(expr)
	if err != nil {
		return []string{err.Error()}
	}
	if len(refs.metrics) == 0 {
		return []string{fmt.Sprintf("%q: no metric", expr)}
	}
	var problems []string
	union := slices.Clone(targetLabels)
	for name, matched := range refs.metrics {
		labels, ok := known[name]
		if !ok {
			labels, ok = syntheticMetrics[name]
		}
		if !ok {
			problems = append(problems, fmt.Sprintf("%q: metric %s is registered by no Herald component", expr, name))
			continue
		}
		union = append(union, labels...)
		for _, l := range matched {
			if !slices.Contains(labels, l) && !slices.Contains(targetLabels, l) {
				problems = append(problems, fmt.Sprintf("%q: %s has no label %q (its labels: %v, and the target's %v)", expr, name, l, labels, targetLabels))
			}
		}
	}
	for _, l := range append(refs.grouping, extra...) {
		if !slices.Contains(union, l) {
			problems = append(problems, fmt.Sprintf("%q: no metric in it has label %q", expr, l))
		}
	}
	return problems
}

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID      int    `json:"id"`
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
		} `json:"targets"`
	} `json:"panels"`
}

var (
	legendRE      = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
	labelValuesRE = regexp.MustCompile(`^label_values\(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?,\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)
)

// TestDashboardQueriesUseRegisteredMetrics checks every query of the
// chart's Grafana dashboard (panels and template variables) against the
// metrics Herald's binaries register: each metric exists, and every label
// a query filters or groups on, or prints in its legend, exists on one of
// its metrics (or is a target label). Before the fix it failed on the BGP
// panel's metallb_bgp_session_up{node=~"$node"} (that metric has only
// peer).
func TestDashboardQueriesUseRegisteredMetrics(t *testing.T) {
	known := heraldMetrics(t)
	data, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValuesRE.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(metric, label)", v.Name, v.Definition)
			continue
		}
		for _, p := range checkQuery(known, m[1]+m[2], []string{m[3]}) {
			t.Errorf("variable %s: %s", v.Name, p)
		}
		n++
	}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			var legend []string
			for _, m := range legendRE.FindAllStringSubmatch(tg.LegendFormat, -1) {
				legend = append(legend, m[1])
			}
			for _, pr := range checkQuery(known, tg.Expr, legend) {
				t.Errorf("panel %q: %s", p.Title, pr)
			}
			n++
		}
	}
	if n < 20 {
		t.Errorf("only %d dashboard queries checked", n)
	}
}

// TestAlertsUseRegisteredMetrics checks the chart's alert expressions the
// same way (excluding MetalLB's own rules, which the chart does not ship).
func TestAlertsUseRegisteredMetrics(t *testing.T) {
	known := heraldMetrics(t)
	objs := parseObjects(t, helmTemplate(t, "herald", ns, "metrics.prometheusRule.enabled=true"))
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert string `json:"alert"`
					Expr  string `json:"expr"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(find(t, objs, "PrometheusRule", ns, "herald").Raw, &rule); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			names = append(names, r.Alert)
			for _, p := range checkQuery(known, r.Expr, nil) {
				t.Errorf("alert %s: %s", r.Alert, p)
			}
		}
	}
	sort.Strings(names)
	if len(names) < 10 {
		t.Errorf("only alerts %v checked", names)
	}
}

// TestParsePromQL pins the reader on the constructs the dashboard uses, so
// that the checks above cannot pass by reading nothing.
func TestParsePromQL(t *testing.T) {
	for _, tc := range []struct {
		expr     string
		metrics  map[string][]string
		grouping []string
		err      bool
	}{
		{expr: `sum(metallb_bgp_session_up{node=~"$node"}) or sum(metallb_bgp_session_up)`,
			metrics: map[string][]string{"metallb_bgp_session_up": {"node"}}},
		{expr: `max by (node, peer) (metallb_bgp_session_up * on (instance) group_left (node) group by (instance, node) (herald_layer2_announcer_changes_total{node=~".*"}))`,
			metrics:  map[string][]string{"metallb_bgp_session_up": nil, "herald_layer2_announcer_changes_total": {"node"}},
			grouping: []string{"node", "peer", "instance", "node", "instance", "node"}},
		{expr: `histogram_quantile(0.99, sum by (le) (rate(herald_allocation_duration_seconds_bucket[5m])))`,
			metrics: map[string][]string{"herald_allocation_duration_seconds_bucket": nil}, grouping: []string{"le"}},
		{expr: `100 * max by (pool) (a{pool=~"x|y", ip!="1"}) / max by (pool) (b > 0) > 75`,
			metrics: map[string][]string{"a": {"pool", "ip"}, "b": nil}, grouping: []string{"pool", "pool"}},
		{expr: `sum(a) # comment`, err: true},
	} {
		got, err := parsePromQL(tc.expr)
		if tc.err {
			if err == nil {
				t.Errorf("%s: no error", tc.expr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.expr, err)
			continue
		}
		if fmt.Sprint(got.metrics) != fmt.Sprint(tc.metrics) || !slices.Equal(got.grouping, tc.grouping) {
			t.Errorf("%s: metrics %v grouping %v, want %v %v", tc.expr, got.metrics, got.grouping, tc.metrics, tc.grouping)
		}
	}
}

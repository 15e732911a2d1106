package lab

// A real Prometheus (Debian's prometheus package) inside the lab, scraping
// Herald's metrics endpoints as a cluster's Prometheus would, and the
// helpers to read one endpoint directly (for promtool check metrics).
//
// Authentication: Herald's manifests run both binaries with
// --metrics-secure=true (HTTPS, every scrape checked with a TokenReview and
// a SubjectAccessReview for GET /metrics). The lab keeps the manifests as
// they are and scrapes like a cluster's Prometheus: with the token of a
// ServiceAccount bound to the manifests' ClusterRole herald-metrics-reader
// (see MetricsReaderToken). The serving certificate is self-signed, so TLS
// verification is off, as with MetalLB's ServiceMonitors.

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/herald-lb/herald/internal/poll"
)

// Names and defaults of the lab's Prometheus.
const (
	// PrometheusProcessName is the lab process name of Prometheus.
	PrometheusProcessName = "prometheus"
	// MetricsReaderClusterRole is the ClusterRole of Herald's manifests that
	// allows GET on the /metrics non-resource URL.
	MetricsReaderClusterRole = "herald-metrics-reader"
	// MetricsPort is Herald's metrics port (--port in the manifests).
	MetricsPort      = 9120
	prometheusBinary = "/usr/bin/prometheus"
	promtoolBinary   = "/usr/bin/promtool"
	prometheusListen = "127.0.0.1:9090"
)

// PrometheusConfig describes the lab's Prometheus.
type PrometheusConfig struct {
	// Jobs maps a scrape job name ("herald-speaker") to its targets.
	Jobs map[string][]netip.AddrPort
	// BearerToken authenticates the scrapes; empty scrapes without one.
	BearerToken string
	// Scheme is "https" (Herald's --metrics-secure=true, the default) or
	// "http". TLS certificates are not verified.
	Scheme string
	// Interval is the scrape interval; 0 means 1 s.
	Interval time.Duration
	// Namespace is the network namespace it runs in; empty means the
	// client's, which reaches every node and the control namespace.
	Namespace string
	// TargetLabels are labels added to every series of a target, as a
	// Kubernetes Prometheus adds its pod, container and namespace (see
	// Herald.MetricsTargetLabels); targets without an entry get none.
	TargetLabels map[netip.AddrPort]map[string]string
	// Rules is a Prometheus rules file (groups: ...), evaluated every
	// Interval; empty means none. See Prometheus.Rules and Alerts.
	Rules []byte
}

// Prometheus is a Prometheus server running as a lab process. Its HTTP API
// listens on 127.0.0.1:9090 inside its namespace.
type Prometheus struct {
	lab  *Lab
	ns   string
	proc *Process
	http *http.Client
}

// HeraldMetricsTargets returns the metrics endpoints of Herald in the lab:
// the controller (its process runs in the control namespace, so
// 198.51.100.254:9120) and the speaker of each node in nodes (the node's
// IPv4 address, port 9120; hostNetwork).
// prometheusDir under StateDir holds Prometheus's configuration, its
// scrape token and its TSDB; Cleanup removes it.
const prometheusDir = "prometheus"

func (l *Lab) HeraldMetricsTargets(nodes []string) map[string][]netip.AddrPort {
	jobs := map[string][]netip.AddrPort{
		"herald-controller": {netip.AddrPortFrom(APIServerAddr, MetricsPort)},
	}
	for _, name := range nodes {
		if n, ok := l.Node(name); ok {
			jobs["herald-speaker"] = append(jobs["herald-speaker"], netip.AddrPortFrom(n.IPv4, MetricsPort))
		}
	}
	return jobs
}

// MetricsTargetLabels returns, for the targets of HeraldMetricsTargets(nodes),
// the labels a Kubernetes Prometheus attaches through the chart's
// ServiceMonitor or PodMonitor: pod (the lab process, named after its Pod),
// container ("controller" or "speaker") and namespace.
func (h *Herald) MetricsTargetLabels(nodes []string) map[netip.AddrPort]map[string]string {
	out := map[netip.AddrPort]map[string]string{
		netip.AddrPortFrom(APIServerAddr, MetricsPort): {"pod": h.ControllerProcessName(), "container": "controller", "namespace": HeraldNamespace},
	}
	for _, name := range nodes {
		if n, ok := h.lab.Node(name); ok {
			out[netip.AddrPortFrom(n.IPv4, MetricsPort)] = map[string]string{"pod": h.SpeakerProcessName(name), "container": "speaker", "namespace": HeraldNamespace}
		}
	}
	return out
}

// MetricsReaderToken creates ServiceAccount namespace/name (unless it
// exists), binds it to the ClusterRole herald-metrics-reader with a
// ClusterRoleBinding of the same name as the account, and returns a token
// for it from the TokenRequest API, valid for 24 hours: what a cluster's
// Prometheus presents to Herald's --metrics-secure endpoints.
func (l *Lab) MetricsReaderToken(ctx context.Context, namespace, name string) (string, error) {
	if err := l.EnsureServiceAccount(ctx, namespace, name); err != nil {
		return "", fmt.Errorf("metrics reader token: %w", err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{ManagedByLabel: ManagedByValue}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: MetricsReaderClusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}},
	}
	_, err := l.Client().RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("metrics reader token: clusterrolebinding %s: %w", name, err)
	}
	tr, err := l.Client().CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("metrics reader token: serviceaccount %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}

// prometheusConfig renders prometheus.yml (rulesFile: the rules' path, or
// empty).
func prometheusConfig(cfg PrometheusConfig, tokenFile, rulesFile string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "global:\n  scrape_interval: %s\n  scrape_timeout: %s\n  evaluation_interval: %s\n",
		model(cfg.Interval), model(cfg.Interval), model(cfg.Interval))
	if rulesFile != "" {
		fmt.Fprintf(&b, "rule_files:\n- %q\n", rulesFile)
	}
	b.WriteString("scrape_configs:\n")
	for job, targets := range cfg.Jobs {
		fmt.Fprintf(&b, "- job_name: %q\n  scheme: %s\n", job, cfg.Scheme)
		if cfg.Scheme == "https" {
			b.WriteString("  tls_config:\n    insecure_skip_verify: true\n")
		}
		if tokenFile != "" {
			fmt.Fprintf(&b, "  authorization:\n    type: Bearer\n    credentials_file: %q\n", tokenFile)
		}
		// One static config per target, for its own labels.
		b.WriteString("  static_configs:\n")
		for _, t := range targets {
			fmt.Fprintf(&b, "  - targets: [%q]\n", t.String())
			if ls := cfg.TargetLabels[t]; len(ls) > 0 {
				keys := make([]string, 0, len(ls))
				for k := range ls {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				b.WriteString("    labels:\n")
				for _, k := range keys {
					fmt.Fprintf(&b, "      %s: %q\n", k, ls[k])
				}
			}
		}
	}
	return b.String()
}

// model writes a duration in Prometheus' notation ("1500ms", "2s").
func model(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.Itoa(int(d/time.Second)) + "s"
	}
	return strconv.Itoa(int(d/time.Millisecond)) + "ms"
}

// StartPrometheus writes a static scrape configuration for cfg.Jobs under
// StateDir/prometheus, starts /usr/bin/prometheus as lab process
// "prometheus" in cfg.Namespace (stopped by Down like every lab process)
// and waits until its API answers /-/ready.
func (l *Lab) StartPrometheus(ctx context.Context, cfg PrometheusConfig) (*Prometheus, error) {
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	if cfg.Scheme == "" {
		cfg.Scheme = "https"
	}
	if cfg.Namespace == "" {
		cfg.Namespace = l.ClientNamespace()
	}
	if len(cfg.Jobs) == 0 {
		return nil, errors.New("start prometheus: no scrape jobs")
	}
	if _, err := os.Stat(prometheusBinary); err != nil {
		return nil, fmt.Errorf("start prometheus: %w (install Debian's prometheus package: hack/install-deps.sh)", err)
	}
	dir := filepath.Join(l.StateDir(), prometheusDir)
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return nil, fmt.Errorf("start prometheus: %w", err)
	}
	tokenFile := ""
	if cfg.BearerToken != "" {
		tokenFile = filepath.Join(dir, "token")
		if err := os.WriteFile(tokenFile, []byte(cfg.BearerToken), 0o600); err != nil {
			return nil, fmt.Errorf("start prometheus: %w", err)
		}
	}
	rulesFile := ""
	if len(cfg.Rules) > 0 {
		rulesFile = filepath.Join(dir, "rules.yml")
		if err := os.WriteFile(rulesFile, cfg.Rules, 0o644); err != nil {
			return nil, fmt.Errorf("start prometheus: %w", err)
		}
	}
	conf := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(conf, []byte(prometheusConfig(cfg, tokenFile, rulesFile)), 0o644); err != nil {
		return nil, fmt.Errorf("start prometheus: %w", err)
	}
	if out, err := exec.CommandContext(ctx, promtoolBinary, "check", "config", conf).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("start prometheus: promtool check config: %w\n%s", err, out)
	}
	proc, err := l.Start(cfg.Namespace, PrometheusProcessName, []string{prometheusBinary,
		"--config.file=" + conf,
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + prometheusListen,
		"--storage.tsdb.retention.time=1h",
		"--log.level=info",
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("start prometheus: %w", err)
	}
	p := &Prometheus{lab: l, ns: cfg.Namespace, proc: proc, http: &http.Client{
		Transport: &http.Transport{DialContext: l.DialContext(cfg.Namespace)},
		Timeout:   10 * time.Second,
	}}
	_, err = poll.Wait(ctx, 30*time.Second, "", func() error {
		if !proc.Alive() {
			return poll.Stop(fmt.Errorf("prometheus exited, see %s", proc.Log))
		}
		_, err := p.get(ctx, "/-/ready", nil)
		return err
	}, labEvery)
	if err != nil {
		return nil, fmt.Errorf("start prometheus: %w", err)
	}
	return p, nil
}

// Process returns Prometheus' lab process (its log is Process().Log).
func (p *Prometheus) Process() *Process { return p.proc }

// Stop stops Prometheus and forgets its lab process.
func (p *Prometheus) Stop() error { return p.lab.StopProcess(p.proc.Name) }

func (p *Prometheus) get(ctx context.Context, path string, q url.Values) ([]byte, error) {
	u := "http://" + prometheusListen + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return body, fmt.Errorf("prometheus %s: %s: %s", path, resp.Status, bytes.TrimSpace(body))
	}
	return body, nil
}

// Sample is one element of an instant vector returned by Query.
type Sample struct {
	Metric map[string]string
	Value  float64
}

// Query evaluates the PromQL expression expr now (GET /api/v1/query) and
// returns its instant vector; an expression of another result type is an
// error.
func (p *Prometheus) Query(ctx context.Context, expr string) ([]Sample, error) {
	body, err := p.get(ctx, "/api/v1/query", url.Values{"query": {expr}})
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("query %q: %w", expr, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %q: %s", expr, r.Error)
	}
	if r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %q: result type %q, want vector", expr, r.Data.ResultType)
	}
	out := make([]Sample, 0, len(r.Data.Result))
	for _, s := range r.Data.Result {
		str, _ := s.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			return nil, fmt.Errorf("query %q: value %v: %w", expr, s.Value[1], err)
		}
		out = append(out, Sample{Metric: s.Metric, Value: v})
	}
	return out, nil
}

// Rule is one alerting or recording rule as /api/v1/rules reports it.
type Rule struct {
	Group string
	Name  string
	// Health is "ok", "err" or "unknown" (not evaluated yet); LastError
	// is the evaluation error when "err".
	Health    string
	LastError string
	// Evaluated: the rule has been evaluated at least once.
	Evaluated bool
}

// Rules returns the loaded rules and their evaluation health.
func (p *Prometheus) Rules(ctx context.Context) ([]Rule, error) {
	body, err := p.get(ctx, "/api/v1/rules", nil)
	if err != nil {
		return nil, err
	}
	var r struct {
		Data struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []struct {
					Name           string `json:"name"`
					Health         string `json:"health"`
					LastError      string `json:"lastError"`
					LastEvaluation string `json:"lastEvaluation"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	var out []Rule
	for _, g := range r.Data.Groups {
		for _, x := range g.Rules {
			out = append(out, Rule{Group: g.Name, Name: x.Name, Health: x.Health, LastError: x.LastError,
				Evaluated: x.LastEvaluation != "" && !strings.HasPrefix(x.LastEvaluation, "0001-")})
		}
	}
	return out, nil
}

// Alert is one active (pending or firing) alert as /api/v1/alerts reports it.
type Alert struct {
	Labels map[string]string
	State  string // "pending", "firing"
}

// Alerts returns the active alerts.
func (p *Prometheus) Alerts(ctx context.Context) ([]Alert, error) {
	body, err := p.get(ctx, "/api/v1/alerts", nil)
	if err != nil {
		return nil, err
	}
	var r struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("alerts: %w", err)
	}
	out := make([]Alert, 0, len(r.Data.Alerts))
	for _, a := range r.Data.Alerts {
		out = append(out, Alert{Labels: a.Labels, State: a.State})
	}
	return out, nil
}

// Target is one scrape target as /api/v1/targets reports it.
type Target struct {
	Job       string
	URL       string
	Health    string // "up", "down", "unknown"
	LastError string
}

// Targets returns the active scrape targets and their health.
func (p *Prometheus) Targets(ctx context.Context) ([]Target, error) {
	body, err := p.get(ctx, "/api/v1/targets", url.Values{"state": {"active"}})
	if err != nil {
		return nil, err
	}
	var r struct {
		Data struct {
			Active []struct {
				Labels    map[string]string `json:"labels"`
				ScrapeURL string            `json:"scrapeUrl"`
				Health    string            `json:"health"`
				LastError string            `json:"lastError"`
			} `json:"activeTargets"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("targets: %w", err)
	}
	var out []Target
	for _, t := range r.Data.Active {
		out = append(out, Target{Job: t.Labels["job"], URL: t.ScrapeURL, Health: t.Health, LastError: t.LastError})
	}
	return out, nil
}

// ScrapeMetrics fetches the metrics of one Herald endpoint from inside
// network namespace ns, as Prometheus would: GET https://target/metrics
// (TLS not verified) with the bearer token (none when empty); use scheme
// "http" for --metrics-secure=false.
func (l *Lab) ScrapeMetrics(ctx context.Context, ns, scheme string, target netip.AddrPort, token string) ([]byte, error) {
	tr := &http.Transport{
		DialContext:     l.DialContext(ns),
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // unverified: the lab's self-signed serving certificate
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+target.String()+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", target, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", target, err)
	}
	if resp.StatusCode != http.StatusOK {
		return body, fmt.Errorf("scrape %s: %s: %s", target, resp.Status, bytes.TrimSpace(body))
	}
	return body, nil
}

// PromtoolCheckMetrics pipes an exposition (text format) into `promtool
// check metrics` and returns its output; a non-zero exit (lint problems) is
// an error carrying that output.
func PromtoolCheckMetrics(ctx context.Context, exposition []byte) (string, error) {
	cmd := exec.CommandContext(ctx, promtoolBinary, "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("promtool check metrics: %w: %s", err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

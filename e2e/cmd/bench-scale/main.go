// Command bench-scale measures Herald's layer 2 speakers on many lab nodes
// (`make bench-scale`): for each lab size, one lab (a node is a network
// namespace, one API server for all speakers) with Herald's manifests and
// a speaker per node, and
//
//   - memberlist convergence: from the start of every speaker at once
//     until each reports herald_memberlist_members == nodes;
//   - layer 2 failover: SIGKILL of the announcing node's speaker until the
//     client's neighbour cache names another node (lab.L2Failover, the
//     probe of bench-failover), --trials times;
//   - API server requests caused by the speakers: the rise of their
//     client-go rest_client_requests_total, at rest (--rest) and during a
//     --burst-Service burst (Services with an EndpointSlice each, created
//     until every one has a ServiceL2Status), with the API server's own
//     apiserver_request_total (every client) next to it;
//   - CPU (utime+stime from /proc) and RSS per speaker, at rest and in the
//     burst;
//   - false failovers under full CPU load (the chaos suite's CPU load
//     scenario, e2e/chaos.CPULoad) at the sizes in --cpuload-at.
//
// Usage:
//
//	bench-scale [--sizes 10,50,100] [--trials 5] [--rest 30s] [--burst 1000]
//	  [--cpuload-at 100] [--cpuload 30s] [--speaker-args "--ml-probe-interval=100ms ..."]
//	  [--record docs/performance.md]
//
// With --record the table replaces the "Layer 2 scale" section of that file
// (appended when missing), with the date and the machine.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/e2e/chaos"
	"github.com/herald-lb/herald/e2e/lab"
)

type options struct {
	sizes       []int
	trials      int
	rest        time.Duration
	burst       int
	cpuloadAt   map[int]bool
	cpuload     time.Duration
	speakerArgs []string
	record      string
	binDir      string
}

func main() {
	var o options
	sizes := flag.String("sizes", "10,50,100", "comma-separated lab sizes (nodes, each a speaker)")
	flag.IntVar(&o.trials, "trials", 5, "SIGKILL failovers per size")
	flag.DurationVar(&o.rest, "rest", 30*time.Second, "window at rest for API requests and CPU")
	flag.IntVar(&o.burst, "burst", 1000, "Services in the burst (0: none)")
	cpuAt := flag.String("cpuload-at", "100", "comma-separated sizes that run the full CPU load check (empty: none)")
	flag.DurationVar(&o.cpuload, "cpuload", 30*time.Second, "how long the CPU load runs")
	args := flag.String("speaker-args", "", "space-separated extra speaker args (memberlist timings: --ml-probe-interval=100ms ...)")
	flag.StringVar(&o.record, "record", "", "Markdown file whose \"Layer 2 scale\" section gets the table")
	flag.StringVar(&o.binDir, "bin-dir", "", "prebuilt controller and speaker (default: $"+lab.BinDirEnv+" or go build)")
	flag.Parse()
	var err error
	if o.sizes, err = ints(*sizes); err != nil {
		fmt.Fprintln(os.Stderr, "bench-scale: --sizes:", err)
		os.Exit(2)
	}
	at, err := ints(*cpuAt)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-scale: --cpuload-at:", err)
		os.Exit(2)
	}
	o.cpuloadAt = map[int]bool{}
	for _, n := range at {
		o.cpuloadAt[n] = true
	}
	o.speakerArgs = strings.Fields(*args)
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	crlog.SetLogger(logr.FromSlogHandler(log.Handler()))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var rows []row
	for _, n := range o.sizes {
		r, err := runSize(ctx, log, o, n)
		if err != nil {
			log.Error("size failed", "nodes", n, "error", err)
			r.failure = err.Error()
		}
		rows = append(rows, r)
		if ctx.Err() != nil {
			break
		}
	}
	table := render(rows, o)
	fmt.Print(table)
	if o.record != "" {
		if err := lab.ReplaceSection(o.record, sectionTitle, "# Performance", intro+table); err != nil {
			fmt.Fprintln(os.Stderr, "bench-scale:", err)
			os.Exit(1)
		}
	}
	for _, r := range rows {
		if r.failure != "" {
			os.Exit(1)
		}
	}
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// window is what the speakers did between two snapshots.
type window struct {
	d time.Duration
	// requests is the speakers' rest_client_requests_total rise (all of
	// them), apiserver the API server's apiserver_request_total rise (every
	// client: speakers, controller, this program).
	requests, apiserver float64
	// failed is the rise of herald_memberlist_member_events_total{event="failed"}
	// summed over the speakers: each speaker counts each member it declares
	// failed, so one member failed in every other speaker's view counts n−1.
	// At rest nothing is killed, so every one is a false failure.
	failed float64
	// cpu is each speaker's utime+stime over d; rss its VmRSS at the end,
	// hwm its VmHWM (peak) at the end.
	cpu      []time.Duration
	rss, hwm []uint64
}

type row struct {
	nodes                  int
	ready, converged       time.Duration
	failovers              []time.Duration
	failoverErrs           []string
	rest, burst            *window
	burstServices          int
	cpuload                *chaos.Result
	failure                string
	convergedAfterFailover []time.Duration
	// neigh is what the lab raised of the host's neighbour table limits.
	neigh string
	// ctlRestarts: times the controller had exited (leader election lost
	// on an overloaded API server) and was started again, as the kubelet
	// would, before a step that needs its webhook.
	ctlRestarts int
}

type bench struct {
	l     *lab.Lab
	h     *lab.Herald
	token string
	nodes []string
}

func runSize(ctx context.Context, log *slog.Logger, o options, n int) (r row, err error) {
	r.nodes = n
	cfg := lab.Config{Prefix: "hsc-" + strings.TrimPrefix(lab.RandomPrefix(), "hl-"), Nodes: n}
	l, finish, err := lab.UpTemp(ctx, cfg, "bench-scale-")
	if err != nil {
		return r, err
	}
	log.Info("lab up", "nodes", n, "prefix", cfg.Prefix, "state", l.StateDir())
	if r.neigh = l.NeighbourLimitsRaised(); r.neigh != "" {
		log.Info("host neighbour table limits raised", "nodes", n, "changes", r.neigh)
	}
	defer func() {
		var kept string
		if kept, err = finish(err, false); kept != "" {
			log.Info("logs kept", "dir", kept)
		}
	}()
	// No speaker yet: they start together below, on the clock.
	h, err := l.InstallHerald(ctx, lab.InstallOptions{BinDir: o.binDir, SpeakerNodes: []string{}, SpeakerArgs: o.speakerArgs})
	if err != nil {
		return r, err
	}
	b := &bench{l: l, h: h}
	for _, nd := range l.Nodes {
		b.nodes = append(b.nodes, nd.Name)
	}
	ip, err := h.CreateL2BenchService(ctx)
	if err != nil {
		return r, err
	}
	if b.token, err = l.MetricsReaderToken(ctx, lab.HeraldNamespace, "bench-scale"); err != nil {
		return r, err
	}

	t0 := time.Now()
	if err := h.AddSpeakers(ctx, b.nodes, 16); err != nil {
		return r, err
	}
	r.ready = time.Since(t0)
	seen, err := h.WaitMembers(ctx, b.token, b.nodes, n, 5*time.Minute)
	if err != nil {
		return r, fmt.Errorf("convergence: %w", err)
	}
	for _, t := range seen {
		r.converged = max(r.converged, t.Sub(t0))
	}
	log.Info("converged", "nodes", n, "ready", r.ready.Round(time.Millisecond), "converged", r.converged.Round(time.Millisecond))

	if r.rest, err = b.measure(ctx, func(ctx context.Context) error {
		select {
		case <-time.After(o.rest):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}); err != nil {
		return r, fmt.Errorf("at rest: %w", err)
	}
	log.Info("at rest", "nodes", n, "req/s", r.rest.requests/r.rest.d.Seconds())

	for i := range o.trials {
		node, took, err := h.L2Failover(ctx, ip, lab.FailoverKill)
		if err != nil {
			log.Warn("failover failed", "nodes", n, "trial", i+1, "error", err)
			r.failoverErrs = append(r.failoverErrs, err.Error())
		} else {
			log.Info("failover", "nodes", n, "trial", i+1, "killed", node, "took", took.Round(time.Millisecond))
			r.failovers = append(r.failovers, took)
		}
		// The restarted speaker rejoins before the next trial.
		t1 := time.Now()
		seen, err := h.WaitMembers(ctx, b.token, b.nodes, n, 2*time.Minute)
		if err != nil {
			return r, fmt.Errorf("after failover %d: %w", i+1, err)
		}
		var c time.Duration
		for _, t := range seen {
			c = max(c, t.Sub(t1))
		}
		r.convergedAfterFailover = append(r.convergedAfterFailover, c)
	}

	if o.cpuloadAt[n] {
		if err := b.controllerUp(ctx, log, &r); err != nil {
			return r, err
		}
		res, err := chaos.CPULoad(ctx, &chaos.Env{Lab: l, Herald: h, Log: log}, chaos.CPULoadOptions{Load: o.cpuload})
		if err != nil {
			return r, fmt.Errorf("cpu load: %w", err)
		}
		r.cpuload = &res
		log.Info("cpu load", "nodes", n, "rows", res.Rows)
	}

	if o.burst > 0 {
		if err := b.controllerUp(ctx, log, &r); err != nil {
			return r, err
		}
		if r.burst, err = b.measure(ctx, func(ctx context.Context) error { return burst(ctx, h, b.nodes, o.burst) }); err != nil {
			return r, fmt.Errorf("burst: %w", err)
		}
		r.burstServices = o.burst
		log.Info("burst", "nodes", n, "took", r.burst.d.Round(time.Millisecond), "req/s", r.burst.requests/r.burst.d.Seconds())
	}
	return r, nil
}

func lbService(ns, name, pool string, v6 bool) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
		Annotations: map[string]string{"metallb.io/address-pool": pool}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(int32(lab.BackendPort))}}}}
	if v6 {
		s.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
	}
	return s
}

// burst creates count IPv6 layer 2 Services (pool "burst",
// 2001:db8:100::1:0/112, on the segment), each with a ready endpoint on
// one node (round robin), eight at a time, and waits until each has a
// ServiceL2Status (its winner announces it).
func burst(ctx context.Context, h *lab.Herald, nodes []string, count int) error {
	c := h.Client()
	pool := &v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "burst", Namespace: lab.HeraldNamespace},
		Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"2001:db8:100::1:0/112"}, AutoAssign: ptr.To(false)}}
	adv := &v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "burst", Namespace: lab.HeraldNamespace},
		Spec: v1beta1.L2AdvertisementSpec{IPAddressPools: []string{"burst"}}}
	for _, o := range []client.Object{pool, adv} {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	l := h.Lab()
	if err := l.EnsureNamespace(ctx, "burst"); err != nil {
		return err
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	sem := make(chan struct{}, 8)
	for i := range count {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			name := fmt.Sprintf("s%04d", i)
			_, err := l.Client().CoreV1().Services("burst").Create(ctx, lbService("burst", name, "burst", true), metav1.CreateOptions{})
			if err == nil {
				err = l.SetEndpoints(ctx, "burst", name, []lab.Endpoint{{Node: nodes[i%len(nodes)], Ready: true}})
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		var sl v1beta1.ServiceL2StatusList
		if err := c.List(ctx, &sl, client.InNamespace(lab.HeraldNamespace), client.MatchingLabels{v1beta1.LabelServiceNamespace: "burst"}); err != nil {
			return err
		}
		if len(sl.Items) >= count {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d Services have a ServiceL2Status after 10 min", len(sl.Items), count)
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// controllerUp starts the controller again when it has exited (as the
// kubelet would: on a saturated machine the API server can be too slow for
// the controller to renew its leader lease, and it exits then), counting it
// in r.
func (b *bench) controllerUp(ctx context.Context, log *slog.Logger, r *row) error {
	restarted, err := b.h.RestartControllerIfExited(ctx)
	if restarted {
		r.ctlRestarts++
		log.Warn("the controller had exited and was started again", "nodes", r.nodes, "log", b.h.Controller().Log)
	}
	return err
}

type snapshot struct {
	at        time.Time
	requests  map[string]float64
	failed    map[string]float64
	apiserver float64
	usage     map[string]lab.ProcUsage
}

func (b *bench) snapshot(ctx context.Context) (snapshot, error) {
	s := snapshot{requests: map[string]float64{}, failed: map[string]float64{}, usage: map[string]lab.ProcUsage{}}
	bodies, err := b.h.ScrapeSpeakers(ctx, b.token, b.nodes, 8)
	if err != nil {
		return s, err
	}
	s.at = time.Now()
	for _, n := range b.nodes {
		p := b.h.Speaker(n)
		if p == nil {
			return s, fmt.Errorf("speaker %s not running", n)
		}
		u, err := lab.ReadProcUsage(p.PID)
		if err != nil {
			return s, err
		}
		s.usage[n] = u
		v, ok := lab.MetricSum(bodies[n], "rest_client_requests_total")
		if !ok {
			return s, fmt.Errorf("speaker %s exports no rest_client_requests_total", n)
		}
		s.requests[n] = v
		// The exposition writes the one label as event="failed".
		s.failed[n], _ = lab.MetricSum(bodies[n], `herald_memberlist_member_events_total{event="failed"}`)
	}
	raw, err := b.l.Client().CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return s, fmt.Errorf("API server metrics: %w", err)
	}
	s.apiserver, _ = lab.MetricSum(raw, "apiserver_request_total")
	return s, nil
}

// measure snapshots, runs fn, snapshots again and returns the difference.
func (b *bench) measure(ctx context.Context, fn func(context.Context) error) (*window, error) {
	s0, err := b.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	if err := fn(ctx); err != nil {
		return nil, err
	}
	s1, err := b.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	w := &window{d: s1.at.Sub(s0.at), apiserver: s1.apiserver - s0.apiserver}
	for _, n := range b.nodes {
		w.requests += s1.requests[n] - s0.requests[n]
		w.failed += s1.failed[n] - s0.failed[n]
		w.cpu = append(w.cpu, s1.usage[n].CPU-s0.usage[n].CPU)
		w.rss = append(w.rss, s1.usage[n].RSS)
		w.hwm = append(w.hwm, s1.usage[n].HWM)
	}
	return w, nil
}

func median[T int64 | uint64 | time.Duration](s []T) T {
	if len(s) == 0 {
		return 0
	}
	s = slices.Clone(s)
	slices.Sort(s)
	return s[len(s)/2]
}

func mib(b uint64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

// cpuPct is cpu over d as a percentage of one core.
func cpuPct(cpu, d time.Duration) string {
	return fmt.Sprintf("%.1f", 100*cpu.Seconds()/d.Seconds())
}

func sec(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

const sectionTitle = "## Layer 2 scale"

const intro = "`make bench-scale` (e2e/cmd/bench-scale): one lab per size (a node is a network namespace on one\n" +
	"Linux bridge, one kube-apiserver for every speaker), Herald's manifests, a speaker per node started all at\n" +
	"once. *Converged*: from that start until every speaker's `herald_memberlist_members` equals the node count.\n" +
	"*Failover*: SIGKILL of the announcing speaker until the client's neighbour cache names another node (the probe\n" +
	"of `make bench-failover`). *API requests*: the rise of the speakers' client-go `rest_client_requests_total`\n" +
	"(all speakers together; a watch counts once when it starts), with the API server's `apiserver_request_total`\n" +
	"(every client) in brackets. *Burst*: Services created with an EndpointSlice each until every one has its\n" +
	"ServiceL2Status. CPU is utime+stime from /proc in % of one core, median / max over the speakers; RSS is\n" +
	"VmRSS at the end (burst: VmHWM, the peak). *CPU load*: the chaos suite's scenario (busy loops in every node).\n\n"

func render(rows []row, o options) string {
	host, _ := os.Hostname()
	var b strings.Builder
	timings := "the manifests' memberlist timings (probe 150 ms, timeout 75 ms, suspicion x3)"
	if len(o.speakerArgs) > 0 {
		timings = "speaker args `" + strings.Join(o.speakerArgs, " ") + "`"
	}
	fmt.Fprintf(&b, "Measured %s on %s (%s/%s, %d CPUs as seen by Go; 2 cores shared with other jobs, noisy), %s, %d SIGKILL failovers per size, %s at rest.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), host, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), timings, o.trials, o.rest)
	fmt.Fprintln(&b, "| nodes | all ready | converged | failover p50 / max (n) | API req/s at rest | CPU at rest % | RSS MiB | burst: Services, time | burst req/s | burst CPU % | burst peak RSS MiB |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		cells := []string{strconv.Itoa(r.nodes), sec(r.ready), sec(r.converged)}
		if len(r.failovers) > 0 {
			cells = append(cells, fmt.Sprintf("%d / %d ms (%d)", median(r.failovers).Milliseconds(), slices.Max(r.failovers).Milliseconds(), len(r.failovers)))
		} else {
			cells = append(cells, "–")
		}
		if w := r.rest; w != nil {
			cells = append(cells, fmt.Sprintf("%.2f (%.2f)", w.requests/w.d.Seconds(), w.apiserver/w.d.Seconds()),
				cpuPct(median(w.cpu), w.d)+" / "+cpuPct(slices.Max(w.cpu), w.d),
				mib(median(w.rss))+" / "+mib(slices.Max(w.rss)))
		} else {
			cells = append(cells, "–", "–", "–")
		}
		if w := r.burst; w != nil {
			cells = append(cells, fmt.Sprintf("%d, %s", r.burstServices, sec(w.d)),
				fmt.Sprintf("%.1f (%.1f)", w.requests/w.d.Seconds(), w.apiserver/w.d.Seconds()),
				cpuPct(median(w.cpu), w.d)+" / "+cpuPct(slices.Max(w.cpu), w.d),
				mib(median(w.hwm))+" / "+mib(slices.Max(w.hwm)))
		} else {
			cells = append(cells, "–", "–", "–", "–")
		}
		fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
	}
	var notes []string
	for _, r := range rows {
		if r.neigh != "" {
			notes = append(notes, fmt.Sprintf("%d nodes: the lab raised the host's neighbour table limits (%s): about %d ARP entries for a full mesh.", r.nodes, r.neigh, lab.NeighbourEntries(r.nodes)))
		}
		if r.rest != nil {
			notes = append(notes, fmt.Sprintf("%d nodes: %.0f failed-member events in the %s at rest, summed over the speakers (nothing was killed: each is a false failure, counted once by every speaker that saw it).", r.nodes, r.rest.failed, sec(r.rest.d)))
		}
		if r.ctlRestarts > 0 {
			notes = append(notes, fmt.Sprintf("%d nodes: the controller exited %d time(s) (leader election lost: the API server too slow to renew its lease) and was started again, as the kubelet would.", r.nodes, r.ctlRestarts))
		}
		if len(r.convergedAfterFailover) > 0 {
			var ms []string
			for _, d := range r.convergedAfterFailover {
				ms = append(ms, fmt.Sprintf("%.1f", d.Seconds()))
			}
			notes = append(notes, fmt.Sprintf("%d nodes: the killed speaker restarted, every speaker saw %d members again after %s s.", r.nodes, r.nodes, strings.Join(ms, ", ")))
		}
		for _, e := range r.failoverErrs {
			notes = append(notes, fmt.Sprintf("%d nodes: failed failover trial: %s", r.nodes, e))
		}
		if r.cpuload != nil {
			for _, row := range r.cpuload.Rows {
				met := "met"
				if !row.Met {
					met = "**not met**"
				}
				notes = append(notes, fmt.Sprintf("%d nodes, CPU load (%s): %s: %s (target %s, %s).", r.nodes, r.cpuload.Form, row.Measure, row.Value(), row.Target, met))
			}
			for _, n := range r.cpuload.Notes {
				notes = append(notes, fmt.Sprintf("%d nodes, CPU load: %s", r.nodes, n))
			}
		}
		if r.failure != "" {
			notes = append(notes, fmt.Sprintf("%d nodes: **run failed**: %s", r.nodes, r.failure))
		}
	}
	if len(notes) > 0 {
		b.WriteString("\n")
		for _, n := range notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

// Command bench-speaker-mem measures the memory of Herald's speaker against
// MetalLB's on the same objects in the same lab (`make bench-speaker-mem`).
//
// The lab has three nodes: n1 runs Herald's speaker built from this tree,
// n2 MetalLB's speaker (v0.16.2 from bin/metallb, native BGP mode), n3 an
// optional baseline Herald speaker (-baseline, e.g. built from the commit
// before a memory change), so a change is compared with its baseline and
// with MetalLB in one run. Both implementations read one configuration in
// metallb-system (Herald installed there, as in the migration guide): an
// IPv4 pool, a BGPAdvertisement and a BGPPeer: the lab's FRR router, so
// every speaker sends it every Service address's /32 (an established
// session each). IPv4, because MetalLB's native BGP mode refuses IPv6 pools
// with a BGPAdvertisement (and a BGPPeer's connectTime); the lab's IPv4
// range for Service addresses (203.0.113.0/24) has 250 of them, so each
// address is shared (metallb.io/allow-shared-ip) by up to 40 Services with
// their own ports (sharedPerAddr).
// The controllers are stopped once the configuration is in place; the
// benchmark writes each Service's address itself (status.loadBalancer),
// so the API server only carries the Services, their EndpointSlices and the
// speakers' own writes.
//
// The objects look like a cluster's: each Service as `kubectl apply`
// writes it (labels, a selector, two ports, the
// kubectl.kubernetes.io/last-applied-configuration annotation) and one
// EndpointSlice with three ready endpoints (Pod targetRefs, zones, the
// EndpointSlice controller's labels, annotation and owner reference).
//
// At each count of -counts (cumulative: the Services are added) it waits
// until every speaker has announced every Service (its log) and its CPU
// time stops growing, then reads VmRSS and VmHWM (/proc/<pid>/status) and
// go_memstats_heap_inuse_bytes (the speaker's /metrics) of each, and saves
// Herald's heap profiles (/debug/pprof/heap, --pprof) into -profiles.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/herald-lb/herald/e2e/lab"
)

const (
	benchNS  = "bench-spkmem"
	poolName = "spkmem-v4"
	ipsAnno  = "metallb.io/loadBalancerIPs"
	// sharingAnno lets the Services of one address share it.
	sharingAnno = "metallb.io/allow-shared-ip"
	// heraldManifests installs Herald into metallb-system (its default
	// mode there), next to MetalLB's speaker.
	heraldManifests = "manifests/herald-metallb-system.yaml"
	metricsPortML   = 9120 // MetalLB's --port in metallb-native.yaml
)

// speaker is one measured process.
type speaker struct {
	label   string // table column
	node    string
	process string // lab process name
	herald  bool
	pprof   bool
	env     []corev1.EnvVar // added to the container's (Herald only)
	metrics netip.AddrPort
}

func main() {
	counts := flag.String("counts", "0,1000,10000", "comma-separated Service counts to measure at (ascending)")
	workers := flag.Int("workers", 8, "parallel API writers")
	baseline := flag.String("baseline", "", "a Herald speaker binary to run on n3 as the baseline (empty: none)")
	baselinePprof := flag.Bool("baseline-pprof", false, "the baseline binary has --pprof")
	env := flag.String("env", "", "comma-separated NAME=value environment variables for Herald's speaker on n1 (e.g. GOGC=50)")
	baselineEnv := flag.String("baseline-env", "", "comma-separated NAME=value environment variables for the baseline speaker on n3")
	rest := flag.Duration("rest", 2*time.Minute, "after the last count, read every speaker again after this long at rest (0: not)")
	profiles := flag.String("profiles", "bin/bench-speaker-mem", "directory for Herald's heap profiles (heap-<label>-<count>.pb.gz)")
	record := flag.String("record", "", "Markdown file whose \"## Speaker memory\" section gets the table (replaced, or appended)")
	stateDir := flag.String("state-dir", "", "lab state directory (default: a temporary one, removed after)")
	keep := flag.Bool("keep", false, "leave the lab up afterwards")
	flag.Parse()
	// The lab's controller-runtime clients log through slog (without a
	// logger, controller-runtime complains after 30 s and drops them).
	crlog.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, nil)))
	var ns []int
	for _, f := range strings.Split(*counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || (len(ns) > 0 && n < ns[len(ns)-1]) {
			fmt.Fprintln(os.Stderr, "bench-speaker-mem: -counts must be ascending non-negative integers")
			os.Exit(2)
		}
		ns = append(ns, n)
	}
	envs := [2][]corev1.EnvVar{}
	for i, f := range []string{*env, *baselineEnv} {
		for _, kv := range strings.Split(f, ",") {
			if kv = strings.TrimSpace(kv); kv == "" {
				continue
			}
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				fmt.Fprintln(os.Stderr, "bench-speaker-mem: -env and -baseline-env take NAME=value pairs, got", kv)
				os.Exit(2)
			}
			envs[i] = append(envs[i], corev1.EnvVar{Name: k, Value: v})
		}
	}
	if err := run(ns, *workers, *baseline, *baselinePprof, envs, *rest, *profiles, *record, *stateDir, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "bench-speaker-mem:", err)
		os.Exit(1)
	}
}

// sample is one speaker's memory at one count.
type sample struct {
	rss, hwm, heap int64 // bytes; -1 unknown
	anon, file     int64 // RssAnon, RssFile (bytes; -1 unknown)
	cpu            int64 // utime+stime since the process started (clock ticks, 100/s)
	settle         time.Duration
}

// readSample reads pid's memory from /proc/<pid>/status and, if the
// speaker's metrics answer, its Go heap in use.
func readSample(ctx context.Context, l *lab.Lab, s *speaker, pid int) sample {
	smp := sample{rss: procKB(pid, "VmRSS"), hwm: procKB(pid, "VmHWM"), anon: procKB(pid, "RssAnon"), file: procKB(pid, "RssFile"), cpu: cpuTicks(pid), heap: -1}
	n, _ := l.Node(s.node)
	if body, err := get(ctx, l, n.Namespace, "http://"+s.metrics.String()+"/metrics"); err == nil {
		smp.heap = metricValue(body, "go_memstats_heap_inuse_bytes")
	} else {
		logf("%s metrics: %v", s.label, err)
	}
	return smp
}

func run(counts []int, workers int, baseline string, baselinePprof bool, envs [2][]corev1.EnvVar, rest time.Duration, profiles, record, stateDir string, keep bool) (err error) {
	// SIGINT and SIGTERM end the run through the clean-up below (lab
	// down, temporary state directory removed), as a failure does.
	sctx, sstop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer sstop()
	ctx, stop := context.WithTimeout(sctx, 90*time.Minute)
	defer stop()
	if stateDir == "" {
		d, err := os.MkdirTemp("", "bench-speaker-mem-")
		if err != nil {
			return err
		}
		stateDir = d
		if !keep {
			defer os.RemoveAll(d)
		}
	}
	if err := os.MkdirAll(profiles, 0o755); err != nil {
		return err
	}
	if baseline != "" {
		if baseline, err = filepath.Abs(baseline); err != nil {
			return err
		}
	}
	logf("bringing the lab up in %s ...", stateDir)
	l, err := lab.Up(ctx, lab.Config{Prefix: lab.RandomPrefix(), Nodes: 3, StateDir: stateDir})
	if err != nil {
		return err
	}
	if !keep {
		defer func() {
			if derr := l.Down(); derr != nil {
				err = errors.Join(err, derr)
			}
		}()
	}
	logf("installing MetalLB (speaker on n2) ...")
	ml, err := l.InstallMetalLB(ctx, []string{"n2"})
	if err != nil {
		if ml != nil {
			logf("%s", ml.Logs(40))
		}
		return err
	}
	cfg := filepath.Join(stateDir, "spkmem-config.yaml")
	if err := os.WriteFile(cfg, []byte(configYAML+peerYAML()), 0o644); err != nil {
		return err
	}
	if _, err := l.Apply(ctx, cfg); err != nil { // through MetalLB's webhook
		return fmt.Errorf("apply the configuration: %w", err)
	}
	if err := ml.StopController(ctx); err != nil {
		return err
	}
	if _, err := l.Kubectl(ctx, "delete", "validatingwebhookconfiguration", lab.MetalLBWebhookConfig, "--ignore-not-found"); err != nil {
		return err
	}
	logf("installing Herald in %s (no speaker yet) ...", lab.MetalLBNamespace)
	h, err := l.InstallHerald(ctx, lab.InstallOptions{Manifests: heraldManifests, Namespace: lab.MetalLBNamespace, SpeakerNodes: []string{}})
	if err != nil {
		if h != nil {
			logf("%s", h.Logs(40))
		}
		return err
	}
	if err := h.StopController(); err != nil {
		return err
	}
	speakers := []*speaker{{label: "Herald", node: "n1", herald: true, pprof: true, env: envs[0]}, {label: "MetalLB v0.16.2", node: "n2"}}
	if baseline != "" {
		speakers = append(speakers, &speaker{label: "Herald baseline", node: "n3", herald: true, pprof: baselinePprof, env: envs[1]})
	}
	for _, s := range speakers {
		n, _ := l.Node(s.node)
		if !s.herald {
			s.process = ml.SpeakerProcessName(s.node)
			s.metrics = netip.AddrPortFrom(n.IPv4, metricsPortML)
			continue
		}
		bin := filepath.Join(h.BinDir(), "speaker")
		if s.label == "Herald baseline" {
			bin = baseline
		}
		if s.process, err = startHeraldSpeaker(ctx, l, s.node, bin, s.pprof, s.env); err != nil {
			return err
		}
		s.metrics = netip.AddrPortFrom(n.IPv4, lab.MetricsPort)
	}
	if err := l.EnsureNamespace(ctx, benchNS); err != nil {
		return err
	}
	cs := l.Client()
	results := map[string][]sample{}
	created := 0
	for _, n := range counts {
		if n > created {
			logf("creating Services %d..%d with their EndpointSlices ...", created, n-1)
			t0 := time.Now()
			if err := createServices(ctx, cs, created, n, workers); err != nil {
				return err
			}
			logf("created in %s", time.Since(t0).Round(time.Second))
			created = n
		}
		for _, s := range speakers {
			p := l.Process(s.process)
			if p == nil || !p.Alive() {
				return fmt.Errorf("%s speaker (%s) is not running", s.label, s.process)
			}
			t0 := time.Now()
			if err := waitSettled(ctx, p.PID, p.Log, s.herald, n); err != nil {
				return fmt.Errorf("%s speaker at %d Services: %w (log %s)", s.label, n, err, p.Log)
			}
			settle := time.Since(t0)
			smp := readSample(ctx, l, s, p.PID)
			smp.settle = settle
			if err := saveProfile(ctx, l, s, profiles, fmt.Sprint(n)); err != nil {
				return err
			}
			logf("%d Services, %s: VmRSS %s (anon %s, file %s), VmHWM %s, heap in use %s (settled in %s)", n, s.label,
				mib(smp.rss), mib(smp.anon), mib(smp.file), mib(smp.hwm), mib(smp.heap), smp.settle.Round(time.Second))
			results[s.label] = append(results[s.label], smp)
		}
	}
	rows := make([]string, 0, len(counts)+1)
	for _, n := range counts {
		rows = append(rows, fmt.Sprintf("%d", n))
	}
	if rest > 0 && len(counts) > 0 {
		// The runtime returns heap freed during the burst to the kernel
		// gradually (its background scavenger), so the reading right
		// after settling holds some of the burst; this one is the
		// speaker at rest.
		logf("at rest for %s ...", rest)
		if err := sleep(ctx, rest); err != nil {
			return err
		}
		rows = append(rows, fmt.Sprintf("%d, %s later", counts[len(counts)-1], rest))
		for _, s := range speakers {
			p := l.Process(s.process)
			if p == nil || !p.Alive() {
				return fmt.Errorf("%s speaker (%s) is not running", s.label, s.process)
			}
			smp := readSample(ctx, l, s, p.PID)
			if err := saveProfile(ctx, l, s, profiles, "rest"); err != nil {
				return err
			}
			logf("at rest, %s: VmRSS %s (anon %s, file %s), VmHWM %s, heap in use %s", s.label,
				mib(smp.rss), mib(smp.anon), mib(smp.file), mib(smp.hwm), mib(smp.heap))
			results[s.label] = append(results[s.label], smp)
		}
	}
	table := renderTable(rows, speakers, results)
	fmt.Println()
	fmt.Print(table)
	if record != "" {
		return lab.ReplaceSection(record, "## Speaker memory", "# Performance", sectionIntro+table)
	}
	return nil
}

// saveProfile writes the speaker's heap profile (if it serves one) to
// profiles/heap-<label>-<suffix>.pb.gz.
func saveProfile(ctx context.Context, l *lab.Lab, s *speaker, profiles, suffix string) error {
	if !s.pprof {
		return nil
	}
	n, _ := l.Node(s.node)
	body, err := get(ctx, l, n.Namespace, "http://"+s.metrics.String()+"/debug/pprof/heap")
	if err != nil {
		return fmt.Errorf("%s heap profile: %w", s.label, err)
	}
	f := filepath.Join(profiles, fmt.Sprintf("heap-%s-%s.pb.gz", strings.ReplaceAll(strings.ToLower(s.label), " ", "-"), suffix))
	return os.WriteFile(f, body, 0o644)
}

// startHeraldSpeaker creates node's Pod from Herald's speaker DaemonSet
// template and runs bin as it, with plain-HTTP metrics (the benchmark
// reads them from inside the node's namespace) and --pprof if asked;
// it waits until /readyz answers.
func startHeraldSpeaker(ctx context.Context, l *lab.Lab, node, bin string, pprof bool, env []corev1.EnvVar) (string, error) {
	pod, err := l.CreateDaemonSetPod(ctx, lab.MetalLBNamespace, lab.SpeakerDaemonSet, node)
	if err != nil {
		return "", err
	}
	c := &pod.Spec.Containers[0]
	var args []string
	for _, a := range c.Args {
		if !strings.HasPrefix(a, "--metrics-secure") {
			args = append(args, a)
		}
	}
	args = append(args, "--metrics-secure=false")
	if pprof {
		args = append(args, "--pprof")
	}
	c.Args = args
	c.Env = append(c.Env, env...)
	p, err := l.StartPod(ctx, pod, c.Name, bin)
	if err != nil {
		return "", err
	}
	n, _ := l.Node(node)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := l.Exec(ctx, n.Namespace, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "2", "http://127.0.0.1:17472/readyz")
		if err == nil && strings.TrimSpace(out) == "200" {
			return p.Name, nil
		}
		if !p.Alive() || time.Now().After(deadline) {
			return "", fmt.Errorf("herald speaker on %s not ready (log %s): %q %v", node, p.Log, out, err)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

const configYAML = `apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: ` + poolName + `
  namespace: metallb-system
spec:
  addresses: ["203.0.113.1-203.0.113.250"]
  autoAssign: false
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata:
  name: spkmem
  namespace: metallb-system
spec:
  ipAddressPools: ["` + poolName + `"]
`

// peerYAML is the BGPPeer every speaker opens a session with: the lab's
// FRR router (dynamic neighbors), so each speaker sends it every Service
// address's /32, as in a cluster announcing over BGP.
func peerYAML() string {
	return fmt.Sprintf(`---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata:
  name: spkmem
  namespace: metallb-system
spec:
  myASN: %d
  peerASN: %d
  peerAddress: %s
`, lab.NodeASN, lab.RouterASN, lab.RouterAddr)
}

// poolAddrs is the number of addresses of the pool (203.0.113.1-250).
const poolAddrs = 250

// sharedPerAddr is the most Services sharing one address: 10,000 Services
// on poolAddrs addresses.
const sharedPerAddr = 40

// sharingKey is every bench Service's metallb.io/allow-shared-ip.
const sharingKey = "bench-spkmem"

// addr is the address of Service i: 203.0.113.<1 + i mod 250>, shared by
// the Services whose numbers differ by multiples of 250 (each with the
// ports of servicePorts).
func addr(i int) netip.Addr {
	a := lab.BGPPrefixV4.Addr().As4()
	a[3] = byte(1 + i%poolAddrs)
	return netip.AddrFrom4(a)
}

// servicePorts are the ports (http, https) of Service i: distinct among
// the Services sharing its address.
func servicePorts(i int) (http, https int32) {
	g := int32(i / poolAddrs)
	return 1000 + 2*g, 1001 + 2*g
}

// createServices creates Services from..to-1 with their EndpointSlices and
// writes their status, with workers writers.
func createServices(ctx context.Context, cs kubernetes.Interface, from, to, workers int) error {
	if to > poolAddrs*sharedPerAddr {
		return fmt.Errorf("at most %d Services (%d addresses shared by %d each)", poolAddrs*sharedPerAddr, poolAddrs, sharedPerAddr)
	}
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	errs := make([]error, workers)
	var done atomic.Int64
	for w := range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= to || ctx.Err() != nil {
					return
				}
				if err := createOne(ctx, cs, i); err != nil {
					errs[w] = err
					return
				}
				if d := done.Add(1); d%1000 == 0 {
					logf("  %d of %d", d, to-from)
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func createOne(ctx context.Context, cs kubernetes.Interface, i int) error {
	name := fmt.Sprintf("svc-%05d", i)
	ip := addr(i)
	httpPort, httpsPort := servicePorts(i)
	labels := map[string]string{"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "shop", "app.kubernetes.io/version": "1.4.2"}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNS, Labels: labels,
			Annotations: map[string]string{ipsAnno: ip.String(), sharingAnno: sharingKey}},
		Spec: corev1.ServiceSpec{
			Type:                          corev1.ServiceTypeLoadBalancer,
			AllocateLoadBalancerNodePorts: ptr.To(false),
			IPFamilies:                    []corev1.IPFamily{corev1.IPv4Protocol},
			IPFamilyPolicy:                ptr.To(corev1.IPFamilyPolicySingleStack),
			Selector:                      map[string]string{"app.kubernetes.io/name": name},
			Ports: []corev1.ServicePort{
				{Name: "http", Port: httpPort, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP},
				{Name: "https", Port: httpsPort, TargetPort: intstr.FromString("https"), Protocol: corev1.ProtocolTCP},
			},
		},
	}
	applied, err := json.Marshal(svc)
	if err != nil {
		return err
	}
	svc.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = string(applied)
	out, err := cs.CoreV1().Services(benchNS).Create(ctx, svc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		out, err = cs.CoreV1().Services(benchNS).Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("create service %s: %w", name, err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-x7k2p", Namespace: benchNS,
			Labels: map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io",
				"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "shop", "app.kubernetes.io/version": "1.4.2"},
			Annotations:     map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": time.Now().UTC().Format(time.RFC3339)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: name, UID: out.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)},
			{Name: ptr.To("https"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8443)},
		},
	}
	for k := 1; k <= 3; k++ {
		pod := fmt.Sprintf("%s-7d9f8b6c5-%c%c%c%c%c", name, 'a'+k, 'b'+k, 'c'+k, 'd'+k, 'e'+k)
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", 244+k, (i+1)>>8, (i+1)&0xff)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: benchNS, Name: pod, UID: out.UID},
			NodeName:   ptr.To(lab.NodeName(k)),
			Zone:       ptr.To(fmt.Sprintf("zone-%c", 'a'+k-1)),
		})
	}
	if _, err := cs.DiscoveryV1().EndpointSlices(benchNS).Create(ctx, slice, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create endpointslice of %s: %w", name, err)
	}
	out.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip.String(), IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}
	if _, err := cs.CoreV1().Services(benchNS).UpdateStatus(ctx, out, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("status of %s: %w", name, err)
	}
	return nil
}

// waitSettled waits until the speaker's log announces n distinct bench
// Services and its CPU time grows by less than 2 % of a core over 3 s.
func waitSettled(ctx context.Context, pid int, logPath string, herald bool, n int) error {
	deadline := time.Now().Add(40 * time.Minute)
	for {
		got, err := countAnnounced(logPath, herald)
		if err != nil {
			return err
		}
		if got >= n {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d Services announced", got, n)
		}
		if err := sleep(ctx, 2*time.Second); err != nil {
			return err
		}
	}
	for {
		c0 := cpuTicks(pid)
		if err := sleep(ctx, 3*time.Second); err != nil {
			return err
		}
		// 100 ticks per second: 2 % of 3 s is 6 ticks.
		if cpuTicks(pid)-c0 < 6 || time.Now().After(deadline) {
			return nil
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// countAnnounced counts the bench Services the speaker's log says it
// announces: the distinct Services of Herald's "announcing" lines; for
// MetalLB the number of its serviceAnnounced lines, which name only the
// addresses (v0.16.2: {"event":"serviceAnnounced","ips":[...],...}, no
// Service), and which it logs once per Service whose announcement starts.
func countAnnounced(logPath string, herald bool) (int, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	marker := `"event":"serviceAnnounced"`
	if herald {
		marker = `"msg":"announcing"`
	}
	seen := map[string]bool{}
	lines := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, marker) {
			continue
		}
		lines++
		if _, rest, ok := strings.Cut(line, benchNS+`/svc-`); ok && len(rest) >= 5 {
			seen[rest[:5]] = true
		}
	}
	if !herald {
		return lines, sc.Err()
	}
	return len(seen), sc.Err()
}

// cpuTicks is utime+stime of pid (proc(5), clock ticks).
func cpuTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st
}

// procKB returns a /proc/<pid>/status field ("VmRSS") in bytes, -1 if unknown.
func procKB(pid int, field string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && k == field {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err == nil {
				return kb * 1024
			}
		}
	}
	return -1
}

// get fetches url from inside network namespace ns.
func get(ctx context.Context, l *lab.Lab, ns, url string) ([]byte, error) {
	tr := &http.Transport{DialContext: l.DialContext(ns)}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return body, nil
}

// metricValue returns the value of an unlabelled metric in a text
// exposition, -1 if absent.
func metricValue(body []byte, name string) int64 {
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return int64(f)
			}
		}
	}
	return -1
}

func mib(b int64) string {
	if b < 0 {
		return "?"
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().UTC().Format("15:04:05 ")+format+"\n", args...)
}

func renderTable(rows []string, speakers []*speaker, results map[string][]sample) string {
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "Measured %s on %s (%d CPUs shared with other work, %s/%s; load average at the end %s).\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), host, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, loadAvg())
	b.WriteString("| Services | speaker | VmRSS | RssAnon / RssFile | VmHWM (peak) | Go heap in use | CPU since start | RSS vs MetalLB |\n|---|---|---|---|---|---|---|---|\n")
	for i, n := range rows {
		ref := results["MetalLB v0.16.2"][i].rss
		for _, s := range speakers {
			smp := results[s.label][i]
			ratio := "?"
			if ref > 0 && smp.rss > 0 {
				ratio = fmt.Sprintf("%.2f×", float64(smp.rss)/float64(ref))
			}
			label := s.label
			if len(s.env) > 0 {
				var kv []string
				for _, e := range s.env {
					kv = append(kv, e.Name+"="+e.Value)
				}
				label += " (" + strings.Join(kv, " ") + ")"
			}
			cpu := "?"
			if smp.cpu >= 0 {
				cpu = fmt.Sprintf("%.1f s", float64(smp.cpu)/100)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s / %s | %s | %s | %s | %s |\n", n, label, mib(smp.rss), mib(smp.anon), mib(smp.file), mib(smp.hwm), mib(smp.heap), cpu, ratio)
		}
	}
	return b.String()
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}

const sectionIntro = `Measured with ` + "`make bench-speaker-mem`" + ` (e2e/cmd/bench-speaker-mem) in
the lab: one Herald speaker (n1), one MetalLB v0.16.2 speaker (n2, native
BGP mode) and, where named, a baseline Herald speaker (n3) watch the same
API server and the same objects: an IPv4 pool and a BGPAdvertisement in
metallb-system and a BGPPeer (the lab's FRR router: each speaker sends it
every address's /32), N single-stack IPv4 LoadBalancer Services as ` + "`kubectl apply`" + `
writes them (labels, selector, two ports, the last-applied-configuration
annotation) with one EndpointSlice each (three ready endpoints with Pod
targetRefs and zones); the Services share the pool's 250 addresses, up to
40 on one (metallb.io/allow-shared-ip, each with its own ports), because
MetalLB's native BGP mode announces no IPv6 pool, and the lab's IPv4 range
for Service addresses is one /24. The controllers are stopped; the benchmark writes
the addresses. At each N (cumulative) every speaker has announced every
Service and is idle; VmRSS and VmHWM are /proc/<pid>/status, the Go heap is
go_memstats_heap_inuse_bytes from its /metrics, RssAnon and RssFile (the
binary's pages) from /proc/<pid>/status, CPU the process's utime+stime since
it started; the last row is read -rest later with nothing changing. No
GOMEMLIMIT (the lab sets no memory limit); Herald's speakers run with the
DaemonSet's GOGC (50) unless named otherwise.

`

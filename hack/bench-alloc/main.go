// Command bench-alloc measures how fast Herald's controller gives new
// LoadBalancer Services their addresses, and how much memory it needs for
// them, against a real kube-apiserver (started here through envtest), next
// to an ideal allocator and MetalLB's controller in the same run.
//
// The ideal allocator is this command re-executed with -mode=ideal: a minimal
// watcher that writes one status patch per new Service (the next address of a
// counter) and nothing else, with the same client rate limits and worker
// count as the controller. MetalLB's controller (-metallb, built by make
// metallb-assets; left out when missing) runs with its own defaults and an
// --lb-class of its own. The allocators run as subprocesses, one after the
// other, on the same API server, each one's Services deleted before the
// next starts; each burst creates N Services from 32 goroutines and
// measures, per Service, the time from its Create call returning to a watch
// event showing its first ingress IP. After its bursts (and an optional
// fill up to -rss-services) each allocator's peak RSS (VmHWM in
// /proc/<pid>/status) and CPU time are read, so the peaks compare the same
// number of Services. -profile-dir saves Herald's heap profiles (half-way
// through and after the largest burst) and a CPU profile of that burst.
//
// The Services are single-stack IPv6 (ClusterIPs from the API server's
// IPv6 Service range, LoadBalancer IPs from 2001:db8::/32), because the IPv4
// documentation ranges are far too small for 10k Services.
//
// Usage: go run ./hack/bench-alloc -controller bin/controller [-bursts 1000,3000,10000] [-profile-dir DIR]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/k8s/allocation/allocationtest"
)

const (
	heraldNS   = "herald-system"
	idealClass = "bench.herald.io/ideal"
	// metallbClass is MetalLB's --lb-class in the bench.
	metallbClass = "bench.herald.io/metallb"
	runLabel     = "bench.herald.io/run"
)

func main() {
	mode := flag.String("mode", "bench", "bench (the measurement) or ideal (the ideal allocator, run by bench)")
	kubeconfig := flag.String("ideal-kubeconfig", "", "ideal mode: kubeconfig file")
	var o benchOptions
	flag.StringVar(&o.controller, "controller", "bin/controller", "bench mode: Herald's controller binary")
	flag.StringVar(&o.baseline, "baseline-controller", "", "bench mode: another build of Herald's controller, measured too (as herald-base) for before/after figures")
	flag.StringVar(&o.metallb, "metallb", "bin/metallb/controller", "bench mode: MetalLB's controller binary (make metallb-assets); empty or missing: left out")
	bursts := flag.String("bursts", "1000,3000,10000", "bench mode: burst sizes")
	flag.IntVar(&o.rssServices, "rss-services", 0, "bench mode: Services each allocator holds when its peak RSS is read (filled up after the bursts; at most the bursts' sum: no fill)")
	flag.Float64Var(&o.qps, "qps", 500, "client QPS of Herald and the ideal allocator (the controller's --kube-api-qps)")
	flag.IntVar(&o.burst, "burst", 1000, "client burst of Herald and the ideal allocator")
	flag.IntVar(&o.workers, "workers", 8, "workers of Herald and the ideal allocator")
	flag.StringVar(&o.profileDir, "profile-dir", "", "bench mode: write Herald's heap profiles (mid-way through and after the largest burst) and a CPU profile of that burst here (controller --pprof-address)")
	flag.IntVar(&o.cpuSeconds, "cpu-seconds", 30, "bench mode: length of the CPU profile from the start of the largest burst")
	flag.Parse()
	var err error
	switch *mode {
	case "ideal":
		err = runIdeal(*kubeconfig, o.qps, o.burst, o.workers)
	case "bench":
		for _, f := range strings.Split(*bursts, ",") {
			n, perr := strconv.Atoi(strings.TrimSpace(f))
			if perr != nil || n <= 0 {
				log.Fatalf("-bursts %q: %q is not a positive count", *bursts, f)
			}
			o.sizes = append(o.sizes, n)
		}
		// SIGINT and SIGTERM end the run through runBench's clean-up
		// (the allocators, kube-apiserver and etcd stopped, their
		// directories removed); a second signal still waits for it.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = runBench(ctx, o)
		stop()
	default:
		err = fmt.Errorf("-mode %q: bench or ideal", *mode)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// runIdeal is the ideal allocator: one status patch per new Service of the
// ideal class, addresses from a counter in 2001:db8:2::/64.
func runIdeal(kubeconfig string, qps float64, burst, workers int) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = float32(qps), burst
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx := context.Background()
	q := workqueue.NewTyped[types.NamespacedName]()
	inf := informers.NewSharedInformerFactory(cs, 0).Core().V1().Services().Informer()
	_, _ = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		s := obj.(*corev1.Service)
		if s.Spec.LoadBalancerClass != nil && *s.Spec.LoadBalancerClass == idealClass && len(s.Status.LoadBalancer.Ingress) == 0 {
			q.Add(types.NamespacedName{Namespace: s.Namespace, Name: s.Name})
		}
	}})
	go inf.Run(ctx.Done())
	var mu sync.Mutex
	next := netip.MustParseAddr("2001:db8:2::1")
	for range workers {
		go func() {
			for {
				key, shutdown := q.Get()
				if shutdown {
					return
				}
				mu.Lock()
				ip := next
				next = next.Next()
				mu.Unlock()
				body := fmt.Sprintf(`{"status":{"loadBalancer":{"ingress":[{"ip":%q,"ipMode":"VIP"}]}}}`, ip)
				if _, err := cs.CoreV1().Services(key.Namespace).Patch(ctx, key.Name, types.MergePatchType, []byte(body), metav1.PatchOptions{}, "status"); err != nil {
					log.Printf("patch %s: %v", key, err)
				}
				q.Done(key)
			}
		}()
	}
	select {}
}

// result is one burst's measurement.
type result struct {
	who      string
	n        int
	p50, p99 time.Duration
	max      time.Duration
	missing  int
	// unmeasured: created by a call that timed out (createRetrying).
	unmeasured int
	duration   time.Duration
}

// usage is one allocator's resources over its bursts (and the fill).
type usage struct {
	who  string
	held int           // Services it held when its peak RSS was read
	hwm  int64         // VmHWM, KiB
	rss  int64         // VmRSS at the end, KiB
	cpu  time.Duration // user+system CPU over the bursts and the fill
	// events: Services of the bursts with an IPAllocated event, counted
	// after the peak RSS was read (-1: not counted, the ideal writes none).
	events int
}

// allocator is one of the compared allocators: how to start it and the
// loadBalancerClass of its Services. It is ready once a probe Service got
// its address.
type allocator struct {
	who   string
	class *string
	start func() (*exec.Cmd, error)
	// pprof is the address of the process's net/http/pprof server ("" = none).
	pprof string
}

// benchOptions are the bench mode's flags.
type benchOptions struct {
	controller, metallb string
	// baseline is another build of Herald's controller measured in the
	// same run ("herald-base"), for before/after figures; "" = none.
	baseline       string
	sizes          []int
	rssServices    int
	qps            float64
	burst, workers int
	profileDir     string
	cpuSeconds     int
}

// runBench runs the measurement until it is done or ctx ends; every exit
// path stops what it started and removes its files.
func runBench(ctx context.Context, o benchOptions) error {
	if _, err := os.Stat(o.controller); err != nil {
		return fmt.Errorf("controller binary: %w (run make build)", err)
	}
	if o.metallb != "" {
		if _, err := os.Stat(o.metallb); err != nil {
			log.Printf("MetalLB's controller %s: %v; MetalLB is left out (make metallb-assets builds it)", o.metallb, err)
			o.metallb = ""
		}
	}
	log.Printf("starting kube-apiserver and etcd")
	srv, err := allocationtest.Start()
	if err != nil {
		return err
	}
	defer func() { _ = srv.Stop() }()
	dir, err := os.MkdirTemp("", "bench-alloc-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, srv.KubeConfig, 0o600); err != nil {
		return err
	}
	cfg := rest.CopyConfig(srv.Config)
	cfg.QPS, cfg.Burst = 2000, 4000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: heraldNS}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := srv.Client.Create(ctx, &v1beta1.IPAddressPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: heraldNS, Name: "bench"},
		Spec:       v1beta1.IPAddressPoolSpec{Addresses: []string{"2001:db8:1::/64"}},
	}); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	common := []string{"-ideal-kubeconfig", kc, "-qps", fmt.Sprint(o.qps), "-burst", fmt.Sprint(o.burst), "-workers", fmt.Sprint(o.workers)}
	// One after the other on the same API server; each one's Services are
	// deleted before the next starts, so every cache (and RSS) holds only
	// its own.
	allocs := []allocator{{who: "ideal", class: ptr.To(idealClass),
		start: func() (*exec.Cmd, error) {
			return startProc(nil, self, append([]string{"-mode", "ideal"}, common...)...)
		}}}
	if o.metallb != "" {
		// MetalLB's own defaults (its client rate limits cannot be set);
		// webhooks off, as Herald's.
		allocs = append(allocs, allocator{who: "metallb", class: ptr.To(metallbClass),
			start: func() (*exec.Cmd, error) {
				return startProc([]string{"KUBECONFIG=" + kc}, o.metallb, "--namespace", heraldNS,
					"--webhook-mode", "disabled", "--port", fmt.Sprint(freePort()), "--log-level", "error", "--lb-class", metallbClass)
			}})
	}
	heraldArgs := []string{"--kubeconfig", kc, "--namespace", heraldNS, "--webhook-mode", "disabled",
		"--port", "0", "--health-probe-port", "0", "--log-level", "error",
		"--kube-api-qps", fmt.Sprint(o.qps), "--kube-api-burst", fmt.Sprint(o.burst), "--workers", fmt.Sprint(o.workers)}
	if o.baseline != "" {
		allocs = append(allocs, allocator{who: "herald-base",
			start: func() (*exec.Cmd, error) { return startProc(nil, o.baseline, heraldArgs...) }})
	}
	herald := allocator{who: "herald"}
	if o.profileDir != "" {
		if err := os.MkdirAll(o.profileDir, 0o755); err != nil {
			return err
		}
		herald.pprof = fmt.Sprintf("127.0.0.1:%d", freePort())
	}
	herald.start = func() (*exec.Cmd, error) {
		args := slices.Clone(heraldArgs)
		if herald.pprof != "" {
			args = append(args, "--pprof-address", herald.pprof)
		}
		return startProc(nil, o.controller, args...)
	}
	allocs = append(allocs, herald)

	var results []result
	var usages []usage
	for i, a := range allocs {
		rs, u, err := runAllocator(ctx, cs, a, o)
		if err != nil && a.who == "metallb" && ctx.Err() == nil {
			// Not this project's binary: its failure leaves it out.
			log.Printf("MetalLB left out: %v", err)
			for _, n := range o.sizes {
				deleteNamespaceServices(ctx, cs, fmt.Sprintf("%s-%d", a.who, n))
			}
			deleteNamespaceServices(ctx, cs, a.who+"-fill")
			deleteNamespaceServices(ctx, cs, a.who+"-probe")
			continue
		}
		if err != nil {
			return err
		}
		results = append(results, rs...)
		usages = append(usages, u)
		if i < len(allocs)-1 {
			for _, r := range rs {
				deleteNamespaceServices(ctx, cs, fmt.Sprintf("%s-%d", r.who, r.n))
			}
			deleteNamespaceServices(ctx, cs, a.who+"-fill")
		}
	}
	printReport(results, usages, o.sizes)
	return nil
}

// runAllocator starts a, measures its bursts (and fills it up to
// o.rssServices Services), reads its peak RSS and stops it.
func runAllocator(ctx context.Context, cs kubernetes.Interface, a allocator, o benchOptions) ([]result, usage, error) {
	u := usage{who: a.who}
	cmd, err := a.start()
	if err != nil {
		return nil, u, err
	}
	defer stopProc(cmd)
	if err := probe(ctx, cs, a.who, a.class, 180*time.Second); err != nil {
		return nil, u, fmt.Errorf("%s: %w", a.who, err)
	}
	pid := cmd.Process.Pid
	cpuBefore, _ := cpuTime(pid)
	largest := slices.Max(o.sizes)
	var results []result
	for _, n := range o.sizes {
		var mid func()
		var cpuDone chan struct{}
		if a.pprof != "" && n == largest {
			mid = func() {
				saveProfile(a.pprof, "heap", filepath.Join(o.profileDir, fmt.Sprintf("heap-during-%d.pb.gz", n)))
			}
			cpuDone = make(chan struct{})
			go func() {
				defer close(cpuDone)
				saveProfile(a.pprof, fmt.Sprintf("profile?seconds=%d", o.cpuSeconds), filepath.Join(o.profileDir, fmt.Sprintf("cpu-burst-%d.pb.gz", n)))
			}()
		}
		r, err := measureBurst(ctx, cs, a.who, fmt.Sprintf("%s-%d", a.who, n), n, a.class, mid)
		if cpuDone != nil {
			<-cpuDone
		}
		if err != nil {
			return nil, u, err
		}
		u.held += n
		results = append(results, r)
	}
	if fill := o.rssServices - u.held; fill > 0 {
		log.Printf("%s: filling up to %d Services", a.who, o.rssServices)
		if _, err := measureBurst(ctx, cs, a.who, a.who+"-fill", fill, a.class, nil); err != nil {
			return nil, u, err
		}
		u.held += fill
	}
	cpu, _ := cpuTime(pid)
	u.cpu = cpu - cpuBefore
	if a.pprof != "" {
		saveProfile(a.pprof, "heap?gc=1", filepath.Join(o.profileDir, "heap-after.pb.gz"))
	}
	if u.hwm, err = vmHWM(pid); err != nil {
		return nil, u, err
	}
	u.rss, _ = vmField(pid, "VmRSS")
	u.events = -1
	if a.who != "ideal" {
		u.events = 0
		for _, n := range o.sizes {
			u.events += allocatedEvents(ctx, cs, fmt.Sprintf("%s-%d", a.who, n))
		}
	}
	return results, u, nil
}

// allocatedEvents counts the Services in ns with an IPAllocated event. The
// allocators write events after the status (Herald from a low-priority
// queue), so it waits until the count has not grown for 15 s (at most 5
// minutes). A recorder that drops events under load shows here.
func allocatedEvents(ctx context.Context, cs kubernetes.Interface, ns string) int {
	count := func() int {
		l, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=IPAllocated"})
		if err != nil {
			log.Printf("list events in %s: %v", ns, err)
			return 0
		}
		seen := map[string]bool{}
		for _, e := range l.Items {
			seen[e.InvolvedObject.Name] = true
		}
		return len(seen)
	}
	last, since, deadline := count(), time.Now(), time.Now().Add(5*time.Minute)
	for time.Since(since) < 15*time.Second && time.Now().Before(deadline) {
		time.Sleep(3 * time.Second)
		if c := count(); c != last {
			last, since = c, time.Now()
		}
	}
	return last
}

func printReport(results []result, usages []usage, sizes []int) {
	host, _ := os.Hostname()
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("\n%s, %s, %d CPUs, load average %s\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), host, runtime.NumCPU(),
		strings.Join(strings.Fields(string(load))[:3], " "))
	fmt.Printf("\n| allocator | burst | p50 | p99 | max | not addressed | not measured (create timed out) | burst wall time |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		fmt.Printf("| %s | %d | %s | %s | %s | %d | %d | %s |\n", r.who, r.n, ms(r.p50), ms(r.p99), ms(r.max), r.missing, r.unmeasured, ms(r.duration))
	}
	fmt.Printf("\n| allocator | Services held | peak RSS (VmHWM) | RSS at the end | CPU over the bursts | burst Services with an IPAllocated event |\n|---|---|---|---|---|---|\n")
	var ideal usage
	for _, u := range usages {
		if u.who == "ideal" {
			ideal = u
		}
		events := "(writes none)"
		if u.events >= 0 {
			events = fmt.Sprint(u.events)
		}
		fmt.Printf("| %s | %d | %.1f MiB | %.1f MiB | %.1f s | %s |\n", u.who, u.held, float64(u.hwm)/1024, float64(u.rss)/1024, u.cpu.Seconds(), events)
	}
	fmt.Println()
	find := func(who string, n int) result {
		for _, r := range results {
			if r.n == n && r.who == who {
				return r
			}
		}
		return result{}
	}
	for _, u := range usages {
		if u.who == "ideal" {
			continue
		}
		for _, n := range sizes {
			h, i := find(u.who, n), find("ideal", n)
			fmt.Printf("%s burst %d: p99 ratio to ideal = %.2f (p50 ratio %.2f)\n", u.who, n, ratio(h.p99, i.p99), ratio(h.p50, i.p50))
		}
		fmt.Printf("%s peak RSS ratio to ideal = %.2f (%d Services each)\n", u.who, float64(u.hwm)/float64(max(ideal.hwm, 1)), u.held)
	}
}

// probe creates one Service of class in namespace <who>-probe and waits
// until it has an address: the allocator is then watching and writing. The
// Service is deleted again.
func probe(ctx context.Context, cs kubernetes.Interface, who string, class *string, timeout time.Duration) error {
	ns := who + "-probe"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, benchService(ns, "probe", class), metav1.CreateOptions{}); err != nil {
		return err
	}
	defer func() { _ = cs.CoreV1().Services(ns).Delete(ctx, "probe", metav1.DeleteOptions{}) }()
	w, err := cs.CoreV1().Services(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=probe"})
	if err != nil {
		return err
	}
	defer w.Stop()
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return errors.New("probe watch closed")
			}
			if s, ok := ev.Object.(*corev1.Service); ok && len(s.Status.LoadBalancer.Ingress) > 0 {
				return nil
			}
		case <-t.C:
			return errors.New("the probe Service got no address")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// saveProfile fetches http://addr/debug/pprof/<what> into path (logged, not
// fatal, on failure).
func saveProfile(addr, what, path string) {
	resp, err := http.Get("http://" + addr + "/debug/pprof/" + what)
	if err != nil {
		log.Printf("profile %s: %v", what, err)
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("HTTP %s", resp.Status)
	}
	if err == nil {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil {
		log.Printf("profile %s: %v", what, err)
		return
	}
	log.Printf("profile %s written to %s", what, path)
}

// freePort returns a TCP port free on 127.0.0.1 a moment ago.
func freePort() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

// measureBurst creates n Services of class in namespace ns and measures
// create -> first ingress IP for each. mid, when set, is called (in its own
// goroutine) once half of them are created.
func measureBurst(ctx context.Context, cs kubernetes.Interface, who, ns string, n int, class *string, mid func()) (result, error) {
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return result{}, err
	}
	var mu sync.Mutex
	created := make(map[string]time.Time, n)
	addressed := make(map[string]time.Time, n)
	stop := make(chan struct{})
	defer close(stop)
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Services().Informer()
	see := func(obj any) {
		s, ok := obj.(*corev1.Service)
		if !ok || len(s.Status.LoadBalancer.Ingress) == 0 {
			return
		}
		now := time.Now()
		mu.Lock()
		if _, done := addressed[s.Name]; !done {
			addressed[s.Name] = now
		}
		mu.Unlock()
	}
	_, _ = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, n any) { see(n) }})
	go inf.Run(stop)
	if !toolscache.WaitForCacheSync(stop, inf.HasSynced) {
		return result{}, errors.New("watch did not sync")
	}
	log.Printf("%s: creating %d Services", who, n)
	start := time.Now()
	var wg, midDone sync.WaitGroup
	defer midDone.Wait()
	var createErr error
	unknown := 0 // created by a call that timed out: start unknown, not measured
	for w := range 32 {
		wg.Go(func() {
			for i := w; i < n; i += 32 {
				name := fmt.Sprintf("svc-%05d", i)
				s := benchService(ns, name, class)
				known, err := createRetrying(ctx, cs, s)
				if err != nil {
					mu.Lock()
					createErr = err
					mu.Unlock()
					return
				}
				now := time.Now()
				mu.Lock()
				if !known {
					unknown++
				} else {
					created[name] = now
				}
				half := len(created)+unknown == n/2
				mu.Unlock()
				if half && mid != nil {
					midDone.Add(1)
					go func() { defer midDone.Done(); mid() }()
				}
			}
		})
	}
	wg.Wait()
	if createErr != nil {
		return result{}, createErr
	}
	deadline := time.Now().Add(120 * time.Second)
	for {
		mu.Lock()
		done := len(addressed)
		mu.Unlock()
		if done >= n || time.Now().After(deadline) {
			break
		}
		if err := ctx.Err(); err != nil {
			return result{}, err
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	r := result{who: who, n: n}
	var lat []time.Duration
	var last time.Time
	for name, c := range created {
		a, ok := addressed[name]
		if !ok {
			r.missing++
			continue
		}
		lat = append(lat, max(a.Sub(c), 0))
		if a.After(last) {
			last = a
		}
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		r.p50 = lat[len(lat)*50/100]
		r.p99 = lat[min(len(lat)-1, len(lat)*99/100)]
		r.max = lat[len(lat)-1]
	}
	r.duration = last.Sub(start)
	r.unmeasured = unknown
	log.Printf("%s %d: p50 %v p99 %v max %v missing %d unmeasured %d", who, n, r.p50, r.p99, r.max, r.missing, r.unmeasured)
	return r, nil
}

// createRetrying creates s, retrying (up to 5 times, 1 s apart) when the
// API server answers that it timed out or is overloaded (a loaded machine:
// one such answer used to end the whole run). known is false when a
// timed-out call had created s after all (a retry meets AlreadyExists): its
// creation time is unknown, so its latency is not measured.
func createRetrying(ctx context.Context, cs kubernetes.Interface, s *corev1.Service) (known bool, err error) {
	timedOut := false
	for attempt := 0; ; attempt++ {
		_, err := cs.CoreV1().Services(s.Namespace).Create(ctx, s, metav1.CreateOptions{})
		switch {
		case err == nil:
			return !timedOut, nil
		case timedOut && apierrors.IsAlreadyExists(err):
			return false, nil
		case attempt < 5 && (apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err)):
			timedOut = true
			log.Printf("create %s/%s: %v; retrying", s.Namespace, s.Name, err)
			time.Sleep(time.Second)
		default:
			return false, err
		}
	}
}

func benchService(ns, name string, class *string) *corev1.Service {
	single := corev1.IPFamilyPolicySingleStack
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{runLabel: ns}},
		Spec: corev1.ServiceSpec{
			Type:                          corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass:             class,
			AllocateLoadBalancerNodePorts: ptr.To(false),
			IPFamilyPolicy:                &single,
			IPFamilies:                    []corev1.IPFamily{corev1.IPv6Protocol},
			Selector:                      map[string]string{"app": name},
			Ports:                         []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
}

func deleteNamespaceServices(ctx context.Context, cs kubernetes.Interface, ns string) {
	list, err := cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		log.Printf("list %s: %v", ns, err)
		return
	}
	var wg sync.WaitGroup
	ch := make(chan string)
	for range 32 {
		wg.Go(func() {
			for name := range ch {
				_ = cs.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{})
			}
		})
	}
	for _, s := range list.Items {
		ch <- s.Name
	}
	close(ch)
	wg.Wait()
}

// startProc starts bin with args; env is added to this process's. The
// process gets SIGTERM when this one dies (even by SIGKILL, which skips
// every clean-up here), so no allocator outlives the bench.
func startProc(env []string, bin string, args ...string) (*exec.Cmd, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	return cmd, nil
}

func stopProc(cmd *exec.Cmd) {
	if cmd.ProcessState != nil {
		return
	}
	_ = cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// vmHWM returns the peak resident set size of pid in KiB.
func vmHWM(pid int) (int64, error) { return vmField(pid, "VmHWM") }

func vmField(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s not in /proc/%d/status", field, pid)
}

// cpuTime returns the user+system CPU time of pid (/proc/<pid>/stat fields
// 14 and 15, in clock ticks of 1/100 s).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	u, _ := strconv.ParseInt(fields[11], 10, 64)
	st, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond, nil
}

// Command bench-alloc measures how fast Herald's controller gives new
// LoadBalancer Services their addresses, against a real kube-apiserver
// (started here through envtest), next to an ideal allocator in the same run.
//
// The ideal allocator is this command re-executed with -mode=ideal: a minimal
// watcher that writes one status patch per new Service (the next address of a
// counter) and nothing else, with the same client rate limits and worker
// count as the controller. Both run as subprocesses, one after the other, on
// the same API server; each burst creates N Services (allocateLoadBalancerNodePorts
// false) from 32 goroutines and measures, per Service, the time from its
// Create call returning to a watch event showing its first ingress IP. The
// controller is then filled up to -rss-services Services and its peak RSS
// (VmHWM in /proc/<pid>/status) is read.
//
// The Services are single-stack IPv6 (ClusterIPs from the API server's
// IPv6 Service range, LoadBalancer IPs from 2001:db8::/32), because the IPv4
// documentation ranges are far too small for 10k Services.
//
// Usage: go run ./hack/bench-alloc -controller bin/controller
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	"github.com/herald-lb/herald/internal/testenv"
)

const (
	heraldNS   = "herald-system"
	idealClass = "bench.herald.io/ideal"
	runLabel   = "bench.herald.io/run"
)

func main() {
	mode := flag.String("mode", "bench", "bench (the measurement) or ideal (the ideal allocator, run by bench)")
	kubeconfig := flag.String("ideal-kubeconfig", "", "ideal mode: kubeconfig file")
	controller := flag.String("controller", "bin/controller", "bench mode: the controller binary")
	bursts := flag.String("bursts", "1000,3000", "bench mode: burst sizes")
	rssServices := flag.Int("rss-services", 10000, "bench mode: Services held by the controller when its peak RSS is read")
	qps := flag.Float64("qps", 500, "client QPS of both allocators (the controller's --kube-api-qps)")
	burst := flag.Int("burst", 1000, "client burst of both allocators")
	workers := flag.Int("workers", 8, "workers of both allocators")
	flag.Parse()
	var err error
	switch *mode {
	case "ideal":
		err = runIdeal(*kubeconfig, *qps, *burst, *workers)
	case "bench":
		err = runBench(*controller, *bursts, *rssServices, *qps, *burst, *workers)
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
	duration time.Duration
}

func runBench(controllerBin, burstList string, rssServices int, qps float64, burst, workers int) error {
	var sizes []int
	for _, s := range strings.Split(burstList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return fmt.Errorf("-bursts %q: %v", burstList, err)
		}
		sizes = append(sizes, n)
	}
	if _, err := os.Stat(controllerBin); err != nil {
		return fmt.Errorf("controller binary: %w (run make build)", err)
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
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: heraldNS}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := srv.Client.Create(ctx, &v1beta1.IPAddressPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: heraldNS, Name: "bench"},
		Spec:       v1beta1.IPAddressPoolSpec{Addresses: []string{"2001:db8:1::/64"}},
	}); err != nil {
		return err
	}
	common := []string{"-ideal-kubeconfig", kc, "-qps", fmt.Sprint(qps), "-burst", fmt.Sprint(burst), "-workers", fmt.Sprint(workers)}

	// Ideal allocator first, then its Services are deleted so that the
	// controller's cache (and RSS) holds only its own.
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ideal, err := startProc(self, append([]string{"-mode", "ideal"}, common...)...)
	if err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // informer sync
	var results []result
	for _, n := range sizes {
		r, err := measureBurst(ctx, cs, "ideal", n, ptr.To(idealClass))
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	idealHWM, _ := vmHWM(ideal.Process.Pid)
	idealCPU, _ := cpuTime(ideal.Process.Pid)
	stopProc(ideal)
	for _, n := range sizes {
		deleteNamespaceServices(ctx, cs, fmt.Sprintf("ideal-%d", n))
	}

	ctl, err := startProc(controllerBin, "--kubeconfig", kc, "--namespace", heraldNS, "--webhook-mode", "disabled",
		"--port", "0", "--health-probe-port", "0", "--log-level", "error",
		"--kube-api-qps", fmt.Sprint(qps), "--kube-api-burst", fmt.Sprint(burst), "--workers", fmt.Sprint(workers))
	if err != nil {
		return err
	}
	defer stopProc(ctl)
	if err := waitConfigValid(ctx, srv, 180*time.Second); err != nil {
		return err
	}
	held := 0
	cpuBefore, _ := cpuTime(ctl.Process.Pid)
	for _, n := range sizes {
		r, err := measureBurst(ctx, cs, "herald", n, nil)
		if err != nil {
			return err
		}
		held += n
		results = append(results, r)
	}
	heraldCPU, _ := cpuTime(ctl.Process.Pid)
	heraldCPU -= cpuBefore
	if fill := rssServices - held; fill > 0 {
		log.Printf("filling the controller up to %d Services", rssServices)
		if _, err := measureBurst(ctx, cs, "fill", fill, nil); err != nil {
			return err
		}
	}
	time.Sleep(3 * time.Second)
	hwm, err := vmHWM(ctl.Process.Pid)
	if err != nil {
		return err
	}
	rss, _ := vmField(ctl.Process.Pid, "VmRSS")

	fmt.Printf("\n| allocator | burst | p50 | p99 | max | not addressed | burst wall time |\n|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		fmt.Printf("| %s | %d | %s | %s | %s | %d | %s |\n", r.who, r.n, ms(r.p50), ms(r.p99), ms(r.max), r.missing, ms(r.duration))
	}
	fmt.Println()
	for _, n := range sizes {
		var h, i result
		for _, r := range results {
			if r.n == n && r.who == "herald" {
				h = r
			}
			if r.n == n && r.who == "ideal" {
				i = r
			}
		}
		fmt.Printf("burst %d: p99 ratio herald/ideal = %.2f (p50 ratio %.2f)\n", n, ratio(h.p99, i.p99), ratio(h.p50, i.p50))
	}
	fmt.Printf("CPU time over the bursts: controller %.1f s, ideal allocator %.1f s\n", heraldCPU.Seconds(), idealCPU.Seconds())
	fmt.Printf("controller peak RSS (VmHWM) holding %d Services: %.1f MiB (VmRSS now %.1f MiB); ideal allocator VmHWM %.1f MiB\n",
		max(rssServices, held), float64(hwm)/1024, float64(rss)/1024, float64(idealHWM)/1024)
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

// measureBurst creates n Services in namespace <who>-<n> and measures
// create -> first ingress IP for each.
func measureBurst(ctx context.Context, cs kubernetes.Interface, who string, n int, class *string) (result, error) {
	ns := fmt.Sprintf("%s-%d", who, n)
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
	var wg sync.WaitGroup
	var createErr error
	for w := range 32 {
		wg.Go(func() {
			for i := w; i < n; i += 32 {
				name := fmt.Sprintf("svc-%05d", i)
				s := benchService(ns, name, class)
				if _, err := cs.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
					mu.Lock()
					createErr = err
					mu.Unlock()
					return
				}
				now := time.Now()
				mu.Lock()
				created[name] = now
				mu.Unlock()
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
	log.Printf("%s %d: p50 %v p99 %v max %v missing %d", who, n, r.p50, r.p99, r.max, r.missing)
	return r, nil
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

func waitConfigValid(ctx context.Context, srv *testenv.Env, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var cs v1beta1.ConfigurationState
		if err := srv.Client.Get(ctx, typesKey(heraldNS, "controller"), &cs); err == nil && cs.Status.Result == v1beta1.ConfigurationResultValid {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.New("controller did not load its configuration")
}

func typesKey(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

func startProc(bin string, args ...string) (*exec.Cmd, error) {
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
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

package speaker

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/annotations"
	"github.com/herald-lb/herald/internal/k8s/eventrec"
	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

// Environment of BenchmarkSpeakerHeap.
const (
	// envHeapServices: how many Services (default 2,000).
	envHeapServices = "HERALD_SPKHEAP_SERVICES"
	// envHeapProfile: a file to write the heap profile to after the
	// forced collections (none by default).
	envHeapProfile = "HERALD_SPKHEAP_PROFILE"
)

// heapSharedPerAddr is how many Services share one address, as in
// e2e/cmd/bench-speaker-mem at 10,000 Services (250 addresses).
const heapSharedPerAddr = 40

// maxHeapPerService is the regression bound of BenchmarkSpeakerHeap, in
// bytes of live heap per Service (informer cache and event recorder
// included): the speaker kept about 10 KB before issue #16's compaction,
// about 7 KB after.
const maxHeapPerService = 9000

// BenchmarkSpeakerHeap measures the live heap one speaker keeps per Service
// once every Service is decided: the real reconcile loop on a real API
// server (internal/testenv) with the fake announcers, layer 2 and BGP on,
// the shape of e2e/cmd/bench-speaker-mem (IPv4 Services sharing each
// address among up to 40 with metallb.io/allow-shared-ip, one EndpointSlice
// with three ready endpoints each, a BGPAdvertisement and a BGPPeer, no
// L2Advertisement). It creates one Service, waits until the speaker is
// idle (work queue, status writer and BGP path applier) and collects
// twice, then does the same with the other Services and reports the live
// heap (runtime.MemStats.HeapAlloc) they added, in B/service and MiB, the
// heap in use, and the seconds from the first of those Services' creation
// until the speaker is idle after deciding them all (s-settle: the
// creation's own time and the 2 s idle check included) and from the last
// creation (s-lag), the EndpointSlice reads of the decisions and the
// bytes allocated per Service, the collections meanwhile, and the time the
// reconcile worker was busy (s-reconcile). Run it once:
//
//	go test -run '^$' -bench SpeakerHeap -benchtime 1x ./internal/k8s/speaker/
//
// HERALD_SPKHEAP_SERVICES sets the count (default 2,000),
// HERALD_SPKHEAP_PROFILE a file for the heap profile after the collections.
// It fails when the figure exceeds maxHeapPerService.
func BenchmarkSpeakerHeap(b *testing.B) {
	n := 2000
	if v := os.Getenv(envHeapServices); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 2 {
			b.Fatalf("%s=%q: want a count of 2 or more", envHeapServices, v)
		}
	}
	if os.Getenv(envHeapProfile) != "" {
		// One sample per 4 KiB (default 512 KiB): a profile of a
		// 20 MiB heap that names the small per-Service allocations.
		runtime.MemProfileRate = 4096
	}
	// envtest's default Service range (10.0.0.0/24) holds 254 Services.
	env := testenv.StartWith(b, testenv.Options{APIServerFlags: map[string]string{"service-cluster-ip-range": "10.96.0.0/16"}})
	ctx := context.Background()
	c := env.Client
	ns := env.Namespace(b)
	svcNS := env.Namespace(b)
	for i, name := range []string{"n1", "n2", "n3"} {
		createReadyNode(b, c, name, fmt.Sprintf("198.51.100.%d", 11+i))
	}
	must(b, c.Create(ctx, &v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns},
		Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"203.0.113.0/24"}, AutoAssign: ptr.To(false)}}))
	must(b, c.Create(ctx, &v1beta1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "bgp", Namespace: ns},
		Spec: v1beta1.BGPAdvertisementSpec{IPAddressPools: []string{"pool"}}}))
	must(b, c.Create(ctx, &v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: ns},
		Spec: v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64513, PeerAddress: "192.0.2.1"}}))

	live := &liveness{live: map[string]bool{"n1": true, "n2": true, "n3": true}}
	// As speaker/main.go: the real event recorder, logs at info level
	// (discarded here).
	rec, err := eventrec.New(env.Config, env.Scheme, eventrec.Options{Component: eventrec.Speaker, Registerer: prometheus.NewRegistry()})
	must(b, err)
	b.Cleanup(func() { rec.Stop(context.Background()) })
	s := startSpeakerProbed(b, env, ns, "n1", live.member("n1"), 7946, "0", func(_ *testSpeaker, o *Options) {
		o.Recorder = rec
		o.Logger = slog.New(slog.DiscardHandler)
	})
	poll.Until(b, time.Minute, "configuration and BGP peer applied", func() error {
		if !s.spk.configured.Load() || len(s.bgp.Peers()) != 1 {
			return fmt.Errorf("configured %v, peers %v", s.spk.configured.Load(), s.bgp.Peers())
		}
		return nil
	})
	// One Service first: what the speaker sets up on its first decision
	// and status write (REST mappings, the status kinds' clients, the
	// event recorder) is not per Service.
	announced := func(want int) {
		b.Helper()
		poll.Until(b, 60*time.Minute, fmt.Sprintf("%d Services announced over BGP", want), func() error {
			if got := countSeries(s.reg, "metallb_speaker_announced", map[string]string{"protocol": protoBGP}); got != want {
				return fmt.Errorf("%d announced", got)
			}
			return nil
		}, poll.Every(time.Second))
		waitSpeakerIdle(b, s)
	}
	createHeapServices(b, c, svcNS, 0, 1, n)
	announced(1)
	before := liveHeap()
	readsBefore := s.spk.endpointReads.Load()
	busyBefore := reconcileSeconds()

	start := time.Now()
	createHeapServices(b, c, svcNS, 1, n, n)
	created := time.Since(start)
	announced(n)
	settled := time.Since(start)
	after := liveHeap()

	if path := os.Getenv(envHeapProfile); path != "" {
		f, err := os.Create(path)
		must(b, err)
		must(b, pprof.Lookup("heap").WriteTo(f, 0))
		must(b, f.Close())
	}
	added := n - 1
	perService := float64(after.HeapAlloc-before.HeapAlloc) / float64(added)
	b.ReportMetric(perService, "B/service")
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MiB-live")
	b.ReportMetric(float64(after.HeapInuse)/(1<<20), "MiB-inuse")
	b.ReportMetric(settled.Seconds(), "s-settle")
	b.ReportMetric((settled - created).Seconds(), "s-lag")
	b.ReportMetric(float64(s.spk.endpointReads.Load()-readsBefore)/float64(added), "reads/service")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(added), "B-alloc/service")
	b.ReportMetric(float64(after.NumGC-before.NumGC), "GCs")
	b.ReportMetric(reconcileSeconds()-busyBefore, "s-reconcile")
	b.ReportMetric(0, "ns/op")
	b.Logf("%d Services after the first: live heap +%.1f MiB (%.0f B/service), heap in use %.1f MiB; created in %.1f s, settled %.1f s after the first creation",
		added, float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), perService, float64(after.HeapInuse)/(1<<20), created.Seconds(), settled.Seconds())
	if perService > maxHeapPerService {
		b.Errorf("%d Services keep %.0f B of live heap each, more than %d", added, perService, maxHeapPerService)
	}
}

// reconcileSeconds returns the time the speaker's reconcile worker has
// spent in Reconcile (controller_runtime_reconcile_time_seconds' sum).
func reconcileSeconds() float64 {
	fams, _ := crmetrics.Registry.Gather()
	sum := 0.0
	for _, fam := range fams {
		if fam.GetName() != "controller_runtime_reconcile_time_seconds" {
			continue
		}
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "speaker" {
					sum += m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return sum
}

// liveHeap returns the memory statistics after two collections (the
// second frees what finalizers of the first kept).
func liveHeap() runtime.MemStats {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms
}

// waitSpeakerIdle waits until s's reconcile queue is empty and stays so
// with no reconcile for a second, and its status writer and BGP path
// applier have nothing to do.
func waitSpeakerIdle(tb testing.TB, s *testSpeaker) {
	tb.Helper()
	last, stable := -1.0, 0
	poll.Until(tb, 30*time.Minute, "speaker idle", func() error {
		depth := sumSeries(crmetrics.Registry, "workqueue_depth", map[string]string{"name": "speaker"})
		total := sumSeries(crmetrics.Registry, "controller_runtime_reconcile_total", map[string]string{"controller": "speaker"})
		busy := depth > 0 || s.spk.status.queue.Len() > 0 || !s.spk.paths.idle() || total != last
		last = total
		if busy {
			stable = 0
			return fmt.Errorf("queue %v, status queue %d, paths idle %v", depth, s.spk.status.queue.Len(), s.spk.paths.idle())
		}
		if stable++; stable < 2 {
			return fmt.Errorf("idle for %d polls", stable)
		}
		return nil
	}, poll.Every(time.Second))
}

// countSeries returns how many series of name have the labels lbls.
func countSeries(reg prometheus.Gatherer, name string, lbls map[string]string) int {
	n := 0
	eachSeries(reg, name, lbls, func(float64) { n++ })
	return n
}

// sumSeries returns the sum of the counters or gauges name with lbls.
func sumSeries(reg prometheus.Gatherer, name string, lbls map[string]string) float64 {
	sum := 0.0
	eachSeries(reg, name, lbls, func(v float64) { sum += v })
	return sum
}

func eachSeries(reg prometheus.Gatherer, name string, lbls map[string]string, f func(float64)) {
	fams, _ := reg.Gather()
	for _, fam := range fams {
		if fam.GetName() != name {
			continue
		}
	series:
		for _, m := range fam.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range lbls {
				if got[k] != v {
					continue series
				}
			}
			if m.GetGauge() != nil {
				f(m.GetGauge().GetValue())
			} else {
				f(m.GetCounter().GetValue())
			}
		}
	}
}

// createHeapServices creates Services from..to-1 of n in ns as
// bench-speaker-mem does: Service i has 203.0.113.<1 + i mod a> (a: the
// number of addresses n Services need, heapSharedPerAddr per address) and
// its own ports, and one EndpointSlice with three ready endpoints on n1, n2
// and n3.
func createHeapServices(tb testing.TB, c client.Client, ns string, from, to, n int) {
	tb.Helper()
	addrs := (n + heapSharedPerAddr - 1) / heapSharedPerAddr
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= to {
					return
				}
				if err := createHeapService(c, ns, i, addrs); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
}

func createHeapService(c client.Client, ns string, i, addrs int) error {
	ctx := context.Background()
	name := fmt.Sprintf("svc-%05d", i)
	ip := netip.AddrFrom4([4]byte{203, 0, 113, byte(1 + i%addrs)})
	g := int32(i / addrs)
	labels := map[string]string{"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "shop", "app.kubernetes.io/version": "1.4.2"}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels,
			Annotations: map[string]string{annotations.AllowSharedIP: "bench"}},
		Spec: corev1.ServiceSpec{
			Type:                          corev1.ServiceTypeLoadBalancer,
			AllocateLoadBalancerNodePorts: ptr.To(false),
			Selector:                      map[string]string{"app.kubernetes.io/name": name},
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 1000 + 2*g, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP},
				{Name: "https", Port: 1001 + 2*g, TargetPort: intstr.FromString("https"), Protocol: corev1.ProtocolTCP},
			},
		},
	}
	if err := c.Create(ctx, svc); err != nil {
		return fmt.Errorf("create Service %s: %w", name, err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-x7k2p", Namespace: ns,
			Labels: map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	for k := 1; k <= 3; k++ {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", 244+k, (i+1)>>8, (i+1)&0xff)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: fmt.Sprintf("%s-%d", name, k), UID: svc.UID},
			NodeName:   ptr.To(fmt.Sprintf("n%d", k)),
		})
	}
	if err := c.Create(ctx, slice); err != nil {
		return fmt.Errorf("create EndpointSlice of %s: %w", name, err)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip.String()}}
	if err := c.Status().Update(ctx, svc); err != nil {
		return fmt.Errorf("status of %s: %w", name, err)
	}
	return nil
}

package allocation

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/internal/annotations"
	"github.com/herald-lb/herald/internal/ipam"
	"github.com/herald-lb/herald/internal/k8s/eventrec"
)

// benchCache is the part of the informer cache the allocation loop reads
// (Get), over a map of Services and one Namespace. Get returns the stored
// object itself (a shallow copy of the struct), as the real cache does with
// readOnly.
type benchCache struct {
	cache.Cache
	svcs map[client.ObjectKey]*corev1.Service
	ns   *corev1.Namespace
}

func (c *benchCache) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	switch o := obj.(type) {
	case *corev1.Service:
		s, ok := c.svcs[key]
		if !ok {
			return fmt.Errorf("bench cache: no Service %s", key)
		}
		*o = *s
	case *corev1.Namespace:
		*o = *c.ns
	default:
		return fmt.Errorf("bench cache: no %T", obj)
	}
	return nil
}

// benchClient accepts every status patch without sending it; patches
// counts them and bytes adds up their sizes.
type benchClient struct {
	client.Client
	patches, bytes int
}

func (c *benchClient) Status() client.SubResourceWriter { return benchStatus{c: c} }

// benchStatus is benchClient's status writer: Patch only.
type benchStatus struct {
	client.SubResourceWriter
	c *benchClient
}

func (w benchStatus) Patch(_ context.Context, obj client.Object, p client.Patch, _ ...client.SubResourcePatchOption) error {
	b, err := p.Data(obj)
	if err != nil {
		return err
	}
	w.c.patches++
	w.c.bytes += len(b)
	return nil
}

// BenchmarkNewService measures the controller's own work for one new
// Service of a burst, in process and without an API server (the cache and
// the client are stubs; the patch is built but not sent, no event is
// written): the informer's add handler, the reconcile (requests, the
// allocation, the condition and the status patch), the update handler on
// the echo of that write, and the low-priority pass (the pool annotation
// check and the rendering of the IPAllocated event). The Services are
// bench-alloc's (single-stack IPv6, one port, a run label), in a namespace
// with one label. Per op: one Service (ns/op, B/op and allocs/op, and
// "patch-B" the status patch's size). Run with -short (no API server
// needed; "cpu-ns/op" is the process's CPU time per Service, which unlike
// ns/op holds on a busy machine): go test -short -run '^$' -bench BenchmarkNewService -benchmem.
func BenchmarkNewService(b *testing.B) {
	c, cch, cl := stubController(b, nil)
	created := make([]*corev1.Service, b.N)
	echoes := make([]*corev1.Service, b.N)
	keys := make([]string, b.N)
	for i := range b.N {
		created[i], echoes[i] = stubService(b, i)
		keys[i] = Key(created[i])
	}
	ctx := context.Background()

	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU(b)
	for i := range b.N {
		key := keys[i]
		cch.svcs[client.ObjectKeyFromObject(created[i])] = created[i]
		c.markSince(key, true) // the add handler
		c.svcQueue.Add(key)
		k, _ := c.svcQueue.Get()
		if err := c.reconcile(ctx, k); err != nil {
			b.Fatal(err)
		}
		c.svcQueue.Done(k)
		c.svcQueue.Forget(k)

		cch.svcs[client.ObjectKeyFromObject(echoes[i])] = echoes[i]
		c.serviceUpdated(created[i], echoes[i])

		k, _ = c.annQueue.Get()
		c.mu.Lock()
		evs := c.deferred[k]
		c.mu.Unlock()
		for j := range evs {
			_, _, _ = evs[j].render()
			_ = evs[j].ref(k)
		}
		if err := c.syncSecondary(ctx, k); err != nil {
			b.Fatal(err)
		}
		c.annQueue.Done(k)
		c.annQueue.Forget(k)
	}
	cpu := processCPU(b) - cpu0
	b.StopTimer()
	if cl.patches != b.N || c.svcQueue.Len() != 0 || c.annQueue.Len() != 0 {
		b.Fatalf("%d status patches for %d Services; %d and %d keys left in the queues", cl.patches, b.N, c.svcQueue.Len(), c.annQueue.Len())
	}
	b.ReportMetric(float64(cl.bytes)/float64(b.N), "patch-B")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// processCPU is the user and system CPU time the process has used so far
// (getrusage RUSAGE_SELF: every thread, the garbage collector's included).
// Unlike ns/op it does not count time spent waiting for a CPU, so runs on a
// busy machine compare.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// stubNamespace is the namespace of stubService's Services.
const stubNamespace = "herald-bench"

// stubPools is stubController's one pool: 2001:db8:1::/64.
var stubPools = []ipam.Pool{{Name: "bench", Prefixes: []netip.Prefix{netip.MustParsePrefix("2001:db8:1::/64")}, AutoAssign: true}}

// stubController returns an initialised controller over a benchCache (no
// Service yet, stubNamespace with one label) and a benchClient, with the
// pools stubPools and rec as its recorder (nil: none). Nothing runs: the
// caller drives the reconciles and the queues.
func stubController(tb testing.TB, rec *eventrec.Recorder) (*Controller, *benchCache, *benchClient) {
	tb.Helper()
	cch := &benchCache{
		svcs: map[client.ObjectKey]*corev1.Service{},
		ns:   &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: stubNamespace, Labels: map[string]string{"kubernetes.io/metadata.name": stubNamespace}}},
	}
	cl := &benchClient{}
	c, err := New(Options{Client: cl, Cache: cch, Namespace: "herald-system", Recorder: rec})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := c.alloc.SetPools(stubPools); err != nil {
		tb.Fatal(err)
	}
	c.initialized.Store(true)
	return c, cch, cl
}

// stubService returns bench-alloc's i-th Service (single-stack IPv6, one
// port, a run label) in stubNamespace, as the cache holds it when created
// and as the echo of its status write shows it: the address and pool that
// stubController's allocator gives the i-th new Service (of the first i+1,
// none deleted), the condition and the pool annotation.
func stubService(tb testing.TB, i int) (created, echo *corev1.Service) {
	tb.Helper()
	name := fmt.Sprintf("svc-%07d", i)
	created = projectService(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: stubNamespace, Name: name, Labels: map[string]string{"bench.herald.io/run": stubNamespace},
			UID: types.UID(fmt.Sprintf("0b5c7c8e-1f7e-4a7e-9d0e-%012d", i)), ResourceVersion: fmt.Sprint(1000 + 2*i), Generation: 1},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicySingleStack),
			IPFamilies: []corev1.IPFamily{corev1.IPv6Protocol}, ClusterIP: "fd00:10:96::1234", ClusterIPs: []string{"fd00:10:96::1234"},
			Ports:                 []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80}},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster,
		},
	})
	// The pool's i-th address: the allocator gives the lowest free one,
	// from the prefix's first.
	a := stubPools[0].Prefixes[0].Addr().As16()
	binary.BigEndian.PutUint64(a[8:], binary.BigEndian.Uint64(a[8:])+uint64(i))
	ip := netip.AddrFrom16(a)
	e := *created
	e.ResourceVersion = fmt.Sprint(1001 + 2*i)
	e.Annotations = map[string]string{annotations.AllocatedFromPool: stubPools[0].Name}
	e.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip.String(), IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}
	e.Status.Conditions = []metav1.Condition{{Type: ConditionType, Status: metav1.ConditionTrue, Reason: ReasonAllocated,
		Message: fmt.Sprintf("Assigned IP [%q]", ip), ObservedGeneration: 1, LastTransitionTime: metav1.Now()}}
	return created, &e
}

package speaker

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/announce"
	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

// ownersL2 is fakeL2 that also reports the owners of an IP, as
// layer2.Announcer does.
type ownersL2 struct{ *fakeL2 }

func (f ownersL2) Owners(ip netip.Addr) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for owner, ts := range f.owners {
		if slices.ContainsFunc(ts, func(t2 announce.L2Target) bool { return t2.IP == ip }) {
			out = append(out, owner)
		}
	}
	slices.Sort(out)
	return out
}

// TestL2ConflictEvent: the speaker decides through the API server that it
// announces web's IP; a conflict reported for that IP records an
// l2Conflict Warning on web (naming the other MAC and the interface), and
// none on a Service of another IP, nor for an IP the node does not announce.
func TestL2ConflictEvent(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	c := env.Client
	ns := env.Namespace(t)
	svcNS := env.Namespace(t)
	createReadyNode(t, c, "n1", "")
	must(t, c.Create(ctx, &v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns},
		Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"203.0.113.0/28"}}}))
	must(t, c.Create(ctx, &v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "l2", Namespace: ns}}))

	l2 := ownersL2{&fakeL2{}}
	rec := &fakeRecorder{}
	skip := true
	mgr, err := manager.New(env.Config, manager.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  CacheOptions(ns, "n1", nil),
		Client:                 client.Options{Cache: &client.CacheOptions{DisableFor: UncachedObjects()}},
		Controller:             ctrlconfig.Controller{SkipNameValidation: &skip},
	})
	must(t, err)
	s, err := Setup(mgr, Options{NodeName: "n1", Namespace: ns, Logger: slog.New(newCountingHandler()), Recorder: rec, L2: l2})
	must(t, err)
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	ips := map[string]string{"web": "203.0.113.5", "db": "203.0.113.6"}
	for name, ip := range ips {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: svcNS},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
		must(t, c.Create(ctx, svc))
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
		must(t, c.Status().Update(ctx, svc))
		node, ready := "n1", true
		must(t, c.Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Namespace: svcNS, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"198.51.100.50"}, NodeName: &node,
				Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		}))
	}
	for name, ip := range ips {
		poll.Until(t, 30*time.Second, name+" announced", func() error {
			if got := l2.announced(svcNS + "/" + name); !slices.Equal(got, []string{ip}) {
				return fmt.Errorf("announced %v", got)
			}
			return nil
		})
	}

	mac := net.HardwareAddr{0x02, 0, 0x5e, 0, 0, 0x77}
	s.L2Conflict(netip.MustParseAddr("203.0.113.9"), mac, "eth0") // not announced: no Service to warn
	s.L2Conflict(netip.MustParseAddr(ips["web"]), mac, "eth0")
	want := "Service/web Warning l2Conflict: another host (MAC 02:00:5e:00:00:77) answered for 203.0.113.5 on interface eth0 of node n1"
	poll.Until(t, 30*time.Second, "l2Conflict event on web", func() error {
		if !rec.has(want) {
			return fmt.Errorf("no %q in %q", want, events(rec))
		}
		return nil
	})
	if n := rec.count("l2Conflict"); n != 1 {
		t.Errorf("%d l2Conflict events, want 1 (on web only): %q", n, events(rec))
	}
}

func events(r *fakeRecorder) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
)

// UpTemp brings a lab up with cfg in a new temporary state directory
// (os.MkdirTemp("", pattern)), for a measurement command. The command must
// call finish on every exit path, with its error and whether to keep the
// logs anyway (a missed target): finish takes the lab down (Down: the
// processes, namespaces, FRR directories, keys, tokens and etcd data go)
// and removes the state directory, except when err is not nil or keepLogs
// is set; then the directory stays with the lab's logs and kept names it.
// finish's error is err joined with what failed in the clean-up. When Up
// fails, Up has taken down what it made, and the error names the directory
// kept with the logs.
func UpTemp(ctx context.Context, cfg Config, pattern string) (l *Lab, finish func(err error, keepLogs bool) (kept string, _ error), err error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return nil, nil, err
	}
	cfg.StateDir = dir
	l, err = Up(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (lab logs kept in %s)", err, dir)
	}
	return l, func(err error, keepLogs bool) (string, error) { return finishTemp(dir, l.Down, err, keepLogs) }, nil
}

// finishTemp is UpTemp's finish with the lab's Down as down.
func finishTemp(dir string, down func() error, err error, keepLogs bool) (kept string, _ error) {
	if derr := down(); derr != nil {
		err = errors.Join(err, fmt.Errorf("lab down: %w", derr))
	}
	if err != nil || keepLogs {
		return dir, err
	}
	if rerr := os.RemoveAll(dir); rerr != nil {
		return dir, rerr
	}
	return "", nil
}

// CreateL2BenchService creates pool and L2Advertisement "bench"
// (198.51.100.200/32 only), namespace "bench" and the LoadBalancer Service
// bench/web of that pool (port 80 to the lab backends) with a ready
// endpoint on every lab node, waits until it has its address and returns
// it: the address bench-failover and bench-scale fail over (L2Failover).
func (h *Herald) CreateL2BenchService(ctx context.Context) (netip.Addr, error) {
	c := h.Client()
	pool := &v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: HeraldNamespace},
		Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"198.51.100.200/32"}}}
	adv := &v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: HeraldNamespace},
		Spec: v1beta1.L2AdvertisementSpec{IPAddressPools: []string{"bench"}}}
	for _, o := range []client.Object{pool, adv} {
		if err := c.Create(ctx, o); err != nil {
			return netip.Addr{}, fmt.Errorf("bench service: %w", err)
		}
	}
	l := h.lab
	if err := l.EnsureNamespace(ctx, "bench"); err != nil {
		return netip.Addr{}, err
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "bench",
		Annotations: map[string]string{"metallb.io/address-pool": "bench"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(int32(BackendPort))}}}}
	if _, err := l.Client().CoreV1().Services("bench").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return netip.Addr{}, fmt.Errorf("bench service: %w", err)
	}
	var eps []Endpoint
	for _, n := range l.Nodes {
		eps = append(eps, Endpoint{Node: n.Name, Ready: true})
	}
	if err := l.SetEndpoints(ctx, "bench", "web", eps); err != nil {
		return netip.Addr{}, err
	}
	ips, err := h.WaitServiceIPs(ctx, "bench", "web", 1)
	if err != nil {
		return netip.Addr{}, err
	}
	return ips[0], nil
}

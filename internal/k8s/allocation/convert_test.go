package allocation

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/config"
	"github.com/herald-lb/herald/internal/ipam"
)

func TestRequestFor(t *testing.T) {
	base := func(mods ...func(*corev1.Service)) *corev1.Service {
		setIP := func(s *corev1.Service) {
			s.Spec.ClusterIPs = []string{"10.96.0.10"}
			s.Spec.ClusterIP = "10.96.0.10"
		}
		return newService("ns", "web", append([]func(*corev1.Service){setIP}, mods...)...)
	}
	dual := func(p corev1.IPFamilyPolicy, fams ...corev1.IPFamily) func(*corev1.Service) {
		return func(s *corev1.Service) {
			s.Spec.IPFamilyPolicy = &p
			s.Spec.IPFamilies = fams
			s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00::10"}[:len(fams)]
		}
	}
	for _, tc := range []struct {
		name    string
		svc     *corev1.Service
		want    ipam.Request
		wantErr error
	}{{
		name: "single stack, defaults",
		svc:  base(),
		want: ipam.Request{Key: "ns/web", Namespace: "ns", Families: []ipam.Family{ipam.IPv4},
			Ports: []ipam.Port{{Protocol: "TCP", Port: 80}}},
	}, {
		name: "IPv6 family from clusterIP when ipFamilies unset",
		svc:  base(func(s *corev1.Service) {}, func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"fd00::1"} }),
		want: ipam.Request{Key: "ns/web", Namespace: "ns", Families: []ipam.Family{ipam.IPv6},
			Ports: []ipam.Port{{Protocol: "TCP", Port: 80}}},
	}, {
		name: "require dual stack, IPv6 primary",
		svc:  base(dual(corev1.IPFamilyPolicyRequireDualStack, corev1.IPv6Protocol, corev1.IPv4Protocol)),
		want: ipam.Request{Key: "ns/web", Namespace: "ns", Families: []ipam.Family{ipam.IPv6, ipam.IPv4},
			Policy: ipam.RequireDualStack, Ports: []ipam.Port{{Protocol: "TCP", Port: 80}}},
	}, {
		name: "prefer dual stack with one family",
		svc:  base(dual(corev1.IPFamilyPolicyPreferDualStack, corev1.IPv4Protocol)),
		want: ipam.Request{Key: "ns/web", Namespace: "ns", Families: []ipam.Family{ipam.IPv4},
			Policy: ipam.PreferDualStack, Ports: []ipam.Port{{Protocol: "TCP", Port: 80}}},
	}, {
		name:    "require dual stack with one clusterIP",
		svc:     base(dual(corev1.IPFamilyPolicyRequireDualStack, corev1.IPv4Protocol)),
		wantErr: ErrNotEnoughClusterIPs,
	}, {
		name: "annotations, ETP Local backend key, UDP port",
		svc: base(withAnnotation("metallb.io/address-pool", "p"), withAnnotation("metallb.io/allow-shared-ip", "k"),
			withAnnotation("metallb.io/loadBalancerIPs", "198.51.100.1"), func(s *corev1.Service) {
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.Selector = map[string]string{"b": "2", "a": "1"}
				s.Spec.Ports = []corev1.ServicePort{{Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)}}
				s.Labels = map[string]string{"tier": "front"}
			}),
		want: ipam.Request{Key: "ns/web", Namespace: "ns", Families: []ipam.Family{ipam.IPv4},
			PoolName: "p", SharingKey: "k", RequestedIPs: []netip.Addr{netip.MustParseAddr("198.51.100.1")},
			BackendKey: "a=1,b=2", Labels: map[string]string{"tier": "front"},
			Ports: []ipam.Port{{Protocol: "UDP", Port: 53}}},
	}, {
		name: "ETP Cluster has no backend key",
		svc: base(func(s *corev1.Service) {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		}),
		want: ipam.Request{Key: "ns/web", Namespace: "ns", Families: []ipam.Family{ipam.IPv4},
			Ports: []ipam.Port{{Protocol: "TCP", Port: 80}}},
	}, {
		name:    "bad requested IP",
		svc:     base(withAnnotation("metallb.io/loadBalancerIPs", "nope")),
		wantErr: errAny,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := RequestFor(tc.svc, nil)
			switch {
			case errors.Is(tc.wantErr, errAny):
				if err == nil {
					t.Fatalf("no error, want one")
				}
				return
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if tc.want.Labels == nil {
				tc.want.Labels = tc.svc.Labels
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

var errAny = errors.New("any error")

func TestHandled(t *testing.T) {
	class := "herald.io/lb"
	for _, tc := range []struct {
		name    string
		mod     func(*corev1.Service)
		lbClass string
		want    bool
	}{
		{"plain LoadBalancer", func(*corev1.Service) {}, "", true},
		{"ClusterIP", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP }, "", false},
		{"headless", func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"None"}; s.Spec.ClusterIP = "None" }, "", false},
		{"no clusterIP yet", func(s *corev1.Service) { s.Spec.ClusterIPs = nil; s.Spec.ClusterIP = "" }, "", false},
		{"other class, no flag", func(s *corev1.Service) { s.Spec.LoadBalancerClass = &class }, "", false},
		{"class matches flag", func(s *corev1.Service) { s.Spec.LoadBalancerClass = &class }, class, true},
		{"no class, flag set", func(*corev1.Service) {}, class, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newService("ns", "web")
			s.Spec.ClusterIPs = []string{"10.96.0.1"}
			tc.mod(s)
			if got := Handled(s, tc.lbClass); got != tc.want {
				t.Errorf("Handled = %v, want %v", got, tc.want)
			}
		})
	}
}

// An empty serviceAllocation block makes a pinned pool (non-nil
// ServiceAllocation), never a general fallback.
func TestPoolsForEmptyServiceAllocation(t *testing.T) {
	snap, err := config.Build(config.Resources{Pools: []v1beta1.IPAddressPool{
		{ObjectMeta: metaName("pinned"), Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"198.51.100.0/28"}, ServiceAllocation: &v1beta1.ServiceAllocation{}}},
		{ObjectMeta: metaName("open"), Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"203.0.113.0/28"}, AutoAssign: ptr.To(false), AvoidBuggyIPs: true}},
	}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pools := PoolsFor(snap)
	if len(pools) != 2 || pools[0].Name != "open" || pools[1].Name != "pinned" {
		t.Fatalf("pools = %+v", pools)
	}
	if pools[1].ServiceAllocation == nil {
		t.Errorf("empty serviceAllocation became nil")
	}
	if pools[0].ServiceAllocation != nil || pools[0].AutoAssign || !pools[0].AvoidBuggyIPs ||
		!reflect.DeepEqual(pools[0].Prefixes, []netip.Prefix{netip.MustParsePrefix("203.0.113.0/28")}) {
		t.Errorf("open pool = %+v", pools[0])
	}
}

func metaName(n string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: n} }

// requestFingerprint is a fixed-size digest (the book keeps one per
// Service: issue #16, 2.5 MiB of fingerprint text at 10,000) that changes
// with every part of the request it covers.
func TestRequestFingerprint(t *testing.T) {
	base := func() ipam.Request {
		return ipam.Request{Key: "ns/a", Namespace: "ns", Families: []ipam.Family{ipam.IPv6}, Policy: ipam.SingleStack,
			Labels: map[string]string{"app": "a", "bench.herald.io/run": "bench-run-10000"}, NamespaceLabels: map[string]string{"kubernetes.io/metadata.name": "bench-run-10000"},
			Ports: []ipam.Port{{Protocol: "TCP", Port: 80}}}
	}
	fp := requestFingerprint(base())
	if len(fp) != 16 {
		t.Errorf("fingerprint of %d bytes, want 16", len(fp))
	}
	if again := requestFingerprint(base()); again != fp {
		t.Error("equal requests, different fingerprints")
	}
	for name, change := range map[string]func(*ipam.Request){
		"families":      func(r *ipam.Request) { r.Families = []ipam.Family{ipam.IPv4} },
		"policy":        func(r *ipam.Request) { r.Policy = ipam.PreferDualStack },
		"requested IPs": func(r *ipam.Request) { r.RequestedIPs = []netip.Addr{netip.MustParseAddr("2001:db8::1")} },
		"pool":          func(r *ipam.Request) { r.PoolName = "p" },
		"sharing key":   func(r *ipam.Request) { r.SharingKey = "k" },
		"ports":         func(r *ipam.Request) { r.Ports = []ipam.Port{{Protocol: "TCP", Port: 81}} },
		"backend key":   func(r *ipam.Request) { r.BackendKey = "app=a" },
		"labels":        func(r *ipam.Request) { r.Labels = map[string]string{"app": "b"} },
		"ns labels":     func(r *ipam.Request) { r.NamespaceLabels = map[string]string{"team": "x"} },
	} {
		r := base()
		change(&r)
		if requestFingerprint(r) == fp {
			t.Errorf("%s changed, same fingerprint", name)
		}
	}
}

package annotations

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func svc(ann map[string]string, lbIP string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Annotations: ann},
		Spec:       corev1.ServiceSpec{LoadBalancerIP: lbIP},
	}
}

func TestRequestedIPs(t *testing.T) {
	a := netip.MustParseAddr
	tests := []struct {
		name    string
		ann     map[string]string
		lbIP    string
		want    []netip.Addr
		wantErr string
	}{
		{name: "none"},
		{name: "annotation dual", ann: map[string]string{LoadBalancerIPs: "203.0.113.5, 2001:db8::5"}, want: []netip.Addr{a("203.0.113.5"), a("2001:db8::5")}},
		{name: "deprecated annotation", ann: map[string]string{LoadBalancerIPsDeprecated: "203.0.113.6"}, want: []netip.Addr{a("203.0.113.6")}},
		{name: "new wins over deprecated", ann: map[string]string{LoadBalancerIPs: "203.0.113.7", LoadBalancerIPsDeprecated: "203.0.113.6"}, want: []netip.Addr{a("203.0.113.7")}},
		{name: "spec field", lbIP: "203.0.113.8", want: []netip.Addr{a("203.0.113.8")}},
		{name: "both set", ann: map[string]string{LoadBalancerIPs: "203.0.113.7"}, lbIP: "203.0.113.8", wantErr: "both annotation metallb.io/loadBalancerIPs and spec.loadBalancerIP"},
		{name: "bad address", ann: map[string]string{LoadBalancerIPs: "203.0.113.300"}, wantErr: `annotation metallb.io/loadBalancerIPs: "203.0.113.300" is not an IP address`},
		{name: "bad spec address", lbIP: "nope", wantErr: `spec.loadBalancerIP: "nope" is not an IP address`},
		{name: "two v4", ann: map[string]string{LoadBalancerIPs: "203.0.113.1,203.0.113.2"}, wantErr: "at most one IPv4 and one IPv6"},
		{name: "mapped v4 unmapped", ann: map[string]string{LoadBalancerIPs: "::ffff:203.0.113.9"}, want: []netip.Addr{a("203.0.113.9")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RequestedIPs(svc(tt.ann, tt.lbIP))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPoolSharingDeprecated(t *testing.T) {
	s := svc(map[string]string{AddressPoolDeprecated: " gold ", AllowSharedIP: "k1", AllowSharedIPDeprecated: "k0", "metallb.universe.tf/other": "x"}, "")
	if got := PoolName(s); got != "gold" {
		t.Errorf("PoolName = %q", got)
	}
	if got := SharingKey(s); got != "k1" {
		t.Errorf("SharingKey = %q, want the metallb.io value", got)
	}
	want := []string{AddressPoolDeprecated, AllowSharedIPDeprecated, "metallb.universe.tf/other"}
	if got := Deprecated(s); !reflect.DeepEqual(got, want) {
		t.Errorf("Deprecated = %v, want %v", got, want)
	}
}

func TestBool(t *testing.T) {
	for _, tc := range []struct {
		in      map[string]string
		want    bool
		wantErr bool
	}{
		{in: nil},
		{in: map[string]string{WeightedECMP: ""}},
		{in: map[string]string{WeightedECMP: "false"}},
		{in: map[string]string{WeightedECMP: " True "}, want: true},
		{in: map[string]string{WeightedECMP: "true"}, want: true},
		{in: map[string]string{WeightedECMP: "yes"}, wantErr: true},
		{in: map[string]string{WeightedECMP: "1"}, wantErr: true},
		{in: map[string]string{"other": "true"}},
	} {
		got, err := Bool(tc.in, WeightedECMP)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("Bool(%v) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), WeightedECMP) {
			t.Errorf("error %q does not name the annotation", err)
		}
	}
}

func TestConflicts(t *testing.T) {
	for _, tc := range []struct {
		name string
		ann  map[string]string
		want []string
	}{
		{"none", nil, nil},
		{"new key only", map[string]string{AddressPool: "a"}, nil},
		{"old key only", map[string]string{AddressPoolDeprecated: "a"}, nil},
		{"both agree, space ignored", map[string]string{AddressPool: "a", AddressPoolDeprecated: " a "}, nil},
		{"pool disagrees", map[string]string{AddressPool: "a", AddressPoolDeprecated: "b"},
			[]string{`metallb.io/address-pool "a" is used, metallb.universe.tf/address-pool "b" is ignored`}},
		{"two disagree, sorted", map[string]string{
			LoadBalancerIPs: "198.51.100.1", LoadBalancerIPsDeprecated: "198.51.100.2",
			AllowSharedIP: "k", AllowSharedIPDeprecated: "",
		}, []string{
			`metallb.io/allow-shared-ip "k" is used, metallb.universe.tf/allow-shared-ip "" is ignored`,
			`metallb.io/loadBalancerIPs "198.51.100.1" is used, metallb.universe.tf/loadBalancerIPs "198.51.100.2" is ignored`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: tc.ann}}
			if got := Conflicts(s); !slices.Equal(got, tc.want) {
				t.Errorf("Conflicts(%v) = %q, want %q", tc.ann, got, tc.want)
			}
			// What Conflicts says is used is what the getters read.
			if tc.ann[AddressPool] != "" && PoolName(s) != tc.ann[AddressPool] {
				t.Errorf("PoolName = %q, want the metallb.io key's %q", PoolName(s), tc.ann[AddressPool])
			}
		})
	}
}

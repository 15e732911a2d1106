package testenv

import (
	"context"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/api/v1beta1"
)

// StartWith passes APIServerFlags to kube-apiserver (here: the Service
// ClusterIP range) and installs Herald's CRDs.
func TestStartWithAPIServerFlags(t *testing.T) {
	prefix := netip.MustParsePrefix("203.0.113.0/24")
	env := StartWith(t, Options{APIServerFlags: map[string]string{"service-cluster-ip-range": prefix.String()}})
	ctx := context.Background()
	ns := env.Namespace(t)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	if err := env.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if ip, err := netip.ParseAddr(svc.Spec.ClusterIP); err != nil || !prefix.Contains(ip) {
		t.Errorf("ClusterIP %q, want one in %s", svc.Spec.ClusterIP, prefix)
	}
	var pools v1beta1.IPAddressPoolList
	if err := env.Client.List(ctx, &pools); err != nil {
		t.Errorf("list IPAddressPools (CRDs installed?): %v", err)
	}
}

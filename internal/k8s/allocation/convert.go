package allocation

import (
	"crypto/sha256"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/herald-lb/herald/internal/config"
	"github.com/herald-lb/herald/internal/ipam"
	"github.com/herald-lb/herald/internal/svcreq"
)

// ErrNotEnoughClusterIPs is svcreq.ErrNotEnoughClusterIPs.
var ErrNotEnoughClusterIPs = svcreq.ErrNotEnoughClusterIPs

// Key is svcreq.Key: "namespace/name".
func Key(s *corev1.Service) string { return svcreq.Key(s) }

// Handled is svcreq.Handled.
func Handled(s *corev1.Service, lbClass string) bool { return svcreq.Handled(s, lbClass) }

// OwnsClass is svcreq.OwnsClass.
func OwnsClass(s *corev1.Service, lbClass string) bool { return svcreq.OwnsClass(s, lbClass) }

// IngressIPs is svcreq.IngressIPs.
func IngressIPs(s *corev1.Service) []netip.Addr { return svcreq.IngressIPs(s) }

// RequestFor is svcreq.RequestFor.
func RequestFor(s *corev1.Service, nsLabels map[string]string) (ipam.Request, error) {
	return svcreq.RequestFor(s, nsLabels)
}

// PoolsFor is svcreq.PoolsFor.
func PoolsFor(snap *config.Snapshot) []ipam.Pool { return svcreq.PoolsFor(snap) }

// requestFingerprint is the part of a Request that, when it changes, can
// make an address usable for another Service (sharing key, ports, backend
// key) or asks for a new address (requested IPs, pool, families). It is a
// digest of 16 bytes (SHA-256, truncated): the book keeps one per Service,
// and the text it is computed from (labels included) is 100 bytes or more.
func requestFingerprint(r ipam.Request) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%v|%v|%v|%s|%s|%v|%s|%s|%s", r.Families, r.Policy, r.RequestedIPs, r.PoolName,
		r.SharingKey, r.Ports, r.BackendKey, labels.Set(r.Labels).String(), labels.Set(r.NamespaceLabels).String()))
	return string(sum[:16])
}

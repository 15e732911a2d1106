package allocation

import (
	"crypto/sha256"
	"encoding/binary"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"

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
// and what it is computed from (labels included) is 100 bytes or more.
//
// It hashes a length-prefixed binary encoding of those fields (appended to
// a buffer on the stack, the labels in key order), not their text: this
// runs on every reconcile, and formatting the request took most of its
// time and allocations. Fingerprints are compared within one process only.
func requestFingerprint(r ipam.Request) string {
	var buf [512]byte
	b := buf[:0]
	b = binary.AppendUvarint(b, uint64(len(r.Families)))
	for _, f := range r.Families {
		b = binary.AppendUvarint(b, uint64(f))
	}
	b = binary.AppendUvarint(b, uint64(r.Policy))
	b = binary.AppendUvarint(b, uint64(len(r.RequestedIPs)))
	for _, ip := range r.RequestedIPs {
		b = appendString(b, ip.String())
	}
	b = appendString(b, r.PoolName)
	b = appendString(b, r.SharingKey)
	b = binary.AppendUvarint(b, uint64(len(r.Ports)))
	for _, p := range r.Ports {
		b = appendString(b, p.Protocol)
		b = binary.AppendUvarint(b, uint64(uint32(p.Port)))
	}
	b = appendString(b, r.BackendKey)
	b = appendLabels(b, r.Labels)
	b = appendLabels(b, r.NamespaceLabels)
	sum := sha256.Sum256(b)
	return string(sum[:16])
}

// appendString appends s with its length before it.
func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendLabels appends the number of labels, then each key and value in
// key order (nil and empty maps encode alike).
func appendLabels(b []byte, m map[string]string) []byte {
	b = binary.AppendUvarint(b, uint64(len(m)))
	var arr [16]string
	keys := arr[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b = appendString(b, k)
		b = appendString(b, m[k])
	}
	return b
}

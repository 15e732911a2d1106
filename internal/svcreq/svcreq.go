// Package svcreq converts Kubernetes objects into the allocator's view
// (internal/ipam): a Service into an ipam.Request, a configuration
// snapshot's pools into []ipam.Pool. It is pure (no client): the
// controller's allocation loop (internal/k8s/allocation) and kubectl herald
// (internal/explain), which replays the allocation to explain it, call the
// same functions.
package svcreq

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/herald-lb/herald/internal/annotations"
	"github.com/herald-lb/herald/internal/config"
	"github.com/herald-lb/herald/internal/ipam"
)

// ErrNotEnoughClusterIPs is returned by RequestFor for a RequireDualStack
// Service that has fewer than two ClusterIPs (MetalLB's "not enough
// clusterips").
var ErrNotEnoughClusterIPs = errors.New("not enough clusterips")

// Key returns the allocator key of a Service: "namespace/name".
func Key(s *corev1.Service) string { return s.Namespace + "/" + s.Name }

// Handled reports whether the controller allocates for s: a LoadBalancer
// Service with at least one ClusterIP (headless Services are not allocated)
// whose spec.loadBalancerClass equals lbClass ("" = only Services without a
// class, as MetalLB's --lb-class).
func Handled(s *corev1.Service, lbClass string) bool {
	if s.Spec.Type != corev1.ServiceTypeLoadBalancer || !OwnsClass(s, lbClass) {
		return false
	}
	return len(clusterIPs(s)) > 0
}

// OwnsClass reports whether s's loadBalancerClass is the one this
// controller serves: equal to lbClass, or unset when lbClass is "".
// Services of another class belong to another implementation and are never
// touched, not even cleared.
func OwnsClass(s *corev1.Service, lbClass string) bool {
	class := ""
	if s.Spec.LoadBalancerClass != nil {
		class = *s.Spec.LoadBalancerClass
	}
	return class == lbClass
}

// clusterIPs returns spec.clusterIPs (or spec.clusterIP), without "None"
// and empty entries.
func clusterIPs(s *corev1.Service) []string {
	ips := s.Spec.ClusterIPs
	if len(ips) == 0 && s.Spec.ClusterIP != "" {
		ips = []string{s.Spec.ClusterIP}
	}
	var out []string
	for _, ip := range ips {
		if ip != "" && ip != corev1.ClusterIPNone {
			out = append(out, ip)
		}
	}
	return out
}

// IngressIPs returns the addresses in s.status.loadBalancer.ingress (entries
// without an IP, or with one that does not parse, are skipped).
func IngressIPs(s *corev1.Service) []netip.Addr {
	var out []netip.Addr
	for _, ing := range s.Status.LoadBalancer.Ingress {
		if ip, err := netip.ParseAddr(ing.IP); err == nil && ip.Zone() == "" {
			out = append(out, ip.Unmap())
		}
	}
	return out
}

// RequestFor converts a Service into the allocator's view. nsLabels are the
// labels of the Service's Namespace (for serviceAllocation
// namespaceSelectors).
//
// Families come from spec.ipFamilies (else the ClusterIP families, else
// IPv4), the policy from spec.ipFamilyPolicy (unset = SingleStack).
// BackendKey is labels.Set(spec.selector).String() when
// externalTrafficPolicy is Local, else "". It returns an error naming the
// field for a bad metallb.io/loadBalancerIPs annotation or
// spec.loadBalancerIP, and ErrNotEnoughClusterIPs for a RequireDualStack
// Service with one ClusterIP.
func RequestFor(s *corev1.Service, nsLabels map[string]string) (ipam.Request, error) {
	req := ipam.Request{
		Key:             Key(s),
		Namespace:       s.Namespace,
		NamespaceLabels: nsLabels,
		Labels:          s.Labels,
		PoolName:        annotations.PoolName(s),
		SharingKey:      annotations.SharingKey(s),
	}
	for _, f := range s.Spec.IPFamilies {
		fam := ipam.IPv4
		if f == corev1.IPv6Protocol {
			fam = ipam.IPv6
		}
		if !slices.Contains(req.Families, fam) {
			req.Families = append(req.Families, fam)
		}
	}
	cips := clusterIPs(s)
	if len(req.Families) == 0 {
		for _, c := range cips {
			fam := ipam.IPv4
			if ip, err := netip.ParseAddr(c); err == nil && ip.Unmap().Is6() {
				fam = ipam.IPv6
			}
			if !slices.Contains(req.Families, fam) {
				req.Families = append(req.Families, fam)
			}
		}
	}
	if len(req.Families) == 0 {
		req.Families = []ipam.Family{ipam.IPv4}
	}
	if p := s.Spec.IPFamilyPolicy; p != nil {
		switch *p {
		case corev1.IPFamilyPolicyPreferDualStack:
			req.Policy = ipam.PreferDualStack
		case corev1.IPFamilyPolicyRequireDualStack:
			req.Policy = ipam.RequireDualStack
			if len(cips) < 2 || len(req.Families) < 2 {
				return req, fmt.Errorf("spec.ipFamilyPolicy RequireDualStack: %w (have %d)", ErrNotEnoughClusterIPs, len(cips))
			}
		}
	}
	if req.Policy == ipam.SingleStack {
		req.Families = req.Families[:1]
	}
	for _, p := range s.Spec.Ports {
		proto := string(p.Protocol)
		if proto == "" {
			proto = string(corev1.ProtocolTCP)
		}
		req.Ports = append(req.Ports, ipam.Port{Protocol: proto, Port: p.Port})
	}
	if s.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		req.BackendKey = labels.Set(s.Spec.Selector).String()
	}
	ips, err := annotations.RequestedIPs(s)
	if err != nil {
		return req, err
	}
	req.RequestedIPs = ips
	return req, nil
}

// PoolsFor converts the pools of a configuration snapshot into the
// allocator's pools, in the snapshot's (name) order. A pool whose
// spec.serviceAllocation is present, even empty, gets a non-nil
// ServiceAllocation: it is then a pinned pool, never a general fallback
// (as MetalLB).
func PoolsFor(snap *config.Snapshot) []ipam.Pool {
	if snap == nil {
		return nil
	}
	var out []ipam.Pool
	for _, p := range snap.Pools() {
		ip := ipam.Pool{
			Name:          p.Name,
			Prefixes:      slices.Clone(p.Prefixes),
			AutoAssign:    p.AutoAssign,
			AvoidBuggyIPs: p.AvoidBuggyIPs,
		}
		if a := p.Allocation; a != nil {
			ip.ServiceAllocation = &ipam.ServiceAllocation{
				Priority:           a.Priority,
				Namespaces:         slices.Clone(a.Namespaces),
				NamespaceSelectors: slices.Clone(a.NamespaceSelectors),
				ServiceSelectors:   slices.Clone(a.ServiceSelectors),
			}
		}
		out = append(out, ip)
	}
	return out
}

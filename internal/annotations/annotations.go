// Package annotations reads the Service-facing half of MetalLB's API (the
// metallb.io/* annotations, their deprecated metallb.universe.tf/* twins and
// spec.loadBalancerIP) out of a Service, and names the annotation the
// controller writes back. It is pure: a corev1.Service in, values or an error
// naming the annotation out.
package annotations

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Annotation keys. Each metallb.io key has a deprecated metallb.universe.tf
// twin that is still honoured (the metallb.io one wins when both are set).
const (
	AddressPool           = "metallb.io/address-pool"
	AddressPoolDeprecated = "metallb.universe.tf/address-pool"

	LoadBalancerIPs           = "metallb.io/loadBalancerIPs"
	LoadBalancerIPsDeprecated = "metallb.universe.tf/loadBalancerIPs"

	AllowSharedIP           = "metallb.io/allow-shared-ip"
	AllowSharedIPDeprecated = "metallb.universe.tf/allow-shared-ip"

	// AllocatedFromPool is written by the controller: the pool the
	// Service's IPs come from. Removed when the Service holds no IP.
	AllocatedFromPool = "metallb.io/ip-allocated-from-pool"

	deprecatedPrefix = "metallb.universe.tf/"
)

// get returns the value of key, else of its deprecated twin.
func get(s *corev1.Service, key, deprecated string) string {
	if v, ok := s.Annotations[key]; ok {
		return strings.TrimSpace(v)
	}
	return strings.TrimSpace(s.Annotations[deprecated])
}

// PoolName returns the requested pool (metallb.io/address-pool), or "".
func PoolName(s *corev1.Service) string {
	return get(s, AddressPool, AddressPoolDeprecated)
}

// SharingKey returns the IP-sharing key (metallb.io/allow-shared-ip), or "".
func SharingKey(s *corev1.Service) string {
	return get(s, AllowSharedIP, AllowSharedIPDeprecated)
}

// RequestedIPs returns the IPs the Service asks for: the comma-separated
// metallb.io/loadBalancerIPs annotation, else spec.loadBalancerIP. It returns
// an error naming the field when an address does not parse, when two
// addresses have the same family (at most one IPv4 and one IPv6), or when both
// the annotation and spec.loadBalancerIP are set.
func RequestedIPs(s *corev1.Service) ([]netip.Addr, error) {
	ann := get(s, LoadBalancerIPs, LoadBalancerIPsDeprecated)
	spec := strings.TrimSpace(s.Spec.LoadBalancerIP)
	field := "annotation " + LoadBalancerIPs
	raw := ann
	switch {
	case ann != "" && spec != "":
		return nil, fmt.Errorf("both annotation %s and spec.loadBalancerIP are set: use only the annotation", LoadBalancerIPs)
	case ann == "" && spec == "":
		return nil, nil
	case ann == "":
		field, raw = "spec.loadBalancerIP", spec
	}
	var out []netip.Addr
	var v4, v6 bool
	for _, part := range strings.Split(raw, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		ip, err := netip.ParseAddr(part)
		if err != nil || ip.Zone() != "" {
			return nil, fmt.Errorf("%s: %q is not an IP address", field, part)
		}
		ip = ip.Unmap()
		if (ip.Is4() && v4) || (ip.Is6() && v6) {
			return nil, fmt.Errorf("%s: %q: at most one IPv4 and one IPv6 address", field, raw)
		}
		v4, v6 = v4 || ip.Is4(), v6 || ip.Is6()
		out = append(out, ip)
	}
	return out, nil
}

// Deprecated returns the deprecated metallb.universe.tf/* annotation keys the
// Service carries, sorted, for a deprecatedAnnotation warning event.
func Deprecated(s *corev1.Service) []string {
	var out []string
	for k := range s.Annotations {
		if strings.HasPrefix(k, deprecatedPrefix) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

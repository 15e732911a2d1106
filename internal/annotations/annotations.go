// Package annotations reads the Service-facing half of MetalLB's API (the
// metallb.io/* annotations, their deprecated metallb.universe.tf/* twins and
// spec.loadBalancerIP) out of a Service, names the annotation the
// controller writes back, and reads Herald's own herald.io/* annotations on
// MetalLB's objects (features MetalLB's CRDs have no field for). It is pure:
// an object's annotations in, values or an error naming the annotation out.
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

	// WeightedECMP, on a BGPAdvertisement, is Herald's own opt-in (MetalLB's
	// CRDs have no field for it): "true" makes each node advertise the
	// prefixes of externalTrafficPolicy Local Services with the link
	// bandwidth extended community (RFC 10005) in proportion to its ready
	// local endpoints, so that a router doing weighted ECMP spreads the
	// traffic by endpoints instead of by nodes. See docs/bgp.md.
	WeightedECMP = "herald.io/weighted-ecmp"
)

// Bool reads a herald.io boolean annotation: absent or "" is false, "true"
// and "false" (any case, surrounding space ignored) are themselves, and
// anything else is an error naming the annotation.
func Bool(annotations map[string]string, key string) (bool, error) {
	v := strings.TrimSpace(annotations[key])
	switch strings.ToLower(v) {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	}
	return false, fmt.Errorf("annotation %s: %q is not \"true\" or \"false\"", key, v)
}

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

// pairs are the annotations Herald reads under both prefixes.
var pairs = [][2]string{
	{AddressPool, AddressPoolDeprecated},
	{AllowSharedIP, AllowSharedIPDeprecated},
	{LoadBalancerIPs, LoadBalancerIPsDeprecated},
}

// Conflicts describes, sorted, each annotation the Service sets under both
// keys with different values (surrounding space ignored): the metallb.io/
// key is used and the metallb.universe.tf/ one ignored, as in MetalLB. For
// the deprecatedAnnotation warning event, one string per pair:
//
//	metallb.io/address-pool "a" is used, metallb.universe.tf/address-pool "b" is ignored
func Conflicts(s *corev1.Service) []string {
	var out []string
	for _, p := range pairs {
		cur, ok1 := s.Annotations[p[0]]
		old, ok2 := s.Annotations[p[1]]
		if ok1 && ok2 && strings.TrimSpace(cur) != strings.TrimSpace(old) {
			out = append(out, fmt.Sprintf("%s %q is used, %s %q is ignored", p[0], strings.TrimSpace(cur), p[1], strings.TrimSpace(old)))
		}
	}
	sort.Strings(out)
	return out
}

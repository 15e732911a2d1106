package announce

import (
	"crypto/sha256"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/herald-lb/herald/internal/annotations"
)

// ServiceFromK8s converts a Service to the decision view. IPs are the
// status.loadBalancer.ingress[].ip values (hostname-only entries are
// skipped; unparsable ones go to InvalidIPs). The sharing key is the
// metallb.io annotation, else the deprecated metallb.universe.tf one.
func ServiceFromK8s(s *corev1.Service) Service {
	out := Service{
		Key:                   s.Namespace + "/" + s.Name,
		LoadBalancer:          s.Spec.Type == corev1.ServiceTypeLoadBalancer,
		Labels:                labels.Set(s.Labels),
		ExternalTrafficPolicy: TrafficPolicy(s.Spec.ExternalTrafficPolicy),
	}
	if out.ExternalTrafficPolicy == "" {
		out.ExternalTrafficPolicy = TrafficPolicyCluster
	}
	if s.Spec.LoadBalancerClass != nil {
		out.LoadBalancerClass = *s.Spec.LoadBalancerClass
	}
	out.SharingKey = annotations.SharingKey(s)
	for _, ing := range s.Status.LoadBalancer.Ingress {
		if ing.IP == "" {
			continue
		}
		ip, err := netip.ParseAddr(ing.IP)
		if err != nil || ip.Zone() != "" {
			out.InvalidIPs = append(out.InvalidIPs, ing.IP)
			continue
		}
		out.IPs = append(out.IPs, ip.Unmap())
	}
	return out
}

// EndpointsFromSlices flattens a Service's EndpointSlices. Ready follows the
// EndpointSlice API (nil conditions.ready means ready); Serving is
// conditions.serving (nil means false). A nil nodeName gives "". Family
// comes from the slice's addressType, Target from the endpoint's targetRef
// (TargetOf). The result has no spare capacity (a speaker keeps it); nil when
// there is no endpoint.
func EndpointsFromSlices(slices []discoveryv1.EndpointSlice) []Endpoint {
	n := 0
	for i := range slices {
		n += len(slices[i].Endpoints)
	}
	if n == 0 {
		return nil
	}
	out := make([]Endpoint, 0, n)
	for i := range slices {
		var family uint8
		switch slices[i].AddressType {
		case discoveryv1.AddressTypeIPv4:
			family = 4
		case discoveryv1.AddressTypeIPv6:
			family = 6
		}
		for _, ep := range slices[i].Endpoints {
			e := Endpoint{
				Ready:   ep.Conditions.Ready == nil || *ep.Conditions.Ready,
				Serving: ep.Conditions.Serving != nil && *ep.Conditions.Serving,
				Family:  family,
				Target:  TargetOf(ep.TargetRef),
			}
			if ep.NodeName != nil {
				e.NodeName = *ep.NodeName
			}
			out = append(out, e)
		}
	}
	return out
}

// TargetOf is the Target of an endpoint's targetRef: the zero Target for
// nil; else, when the reference has a UID, the UID's 16 bytes if it is a
// UUID in the canonical lowercase form the API server assigns (distinct
// UIDs give distinct Targets), else the first 16 bytes of the SHA-256 of
// "uid:<uid>"; without a UID, those of "<kind>/<namespace>/<name>". Two
// targetRefs that name the same target (same UID, or both without one and
// the same kind, namespace and name) give the same Target; two that do not
// give different ones but for a 128-bit hash collision (about 2^-128 for a
// given pair; SHA-256 is used for being stable and well spread, not for
// secrecy), which would only count two of a Service's targets as one in
// its weighted-ECMP weight.
func TargetOf(r *corev1.ObjectReference) Target {
	if r == nil {
		return Target{}
	}
	if r.UID != "" {
		if t, ok := parseUUID(string(r.UID)); ok && t != (Target{}) {
			return t
		}
		return hashTarget("uid:" + string(r.UID))
	}
	return hashTarget(r.Kind + "/" + r.Namespace + "/" + r.Name)
}

// hashTarget is the first 16 bytes of the SHA-256 of s, never the zero
// Target.
func hashTarget(s string) Target {
	sum := sha256.Sum256([]byte(s))
	t := Target(sum[:16])
	if t == (Target{}) {
		t[0] = 1
	}
	return t
}

// parseUUID parses s when it is a UUID in canonical lowercase form
// (8-4-4-4-12 hex digits), the only form for which it reports true, so
// that two different strings never give the same bytes.
func parseUUID(s string) (Target, bool) {
	var t Target
	if len(s) != 36 {
		return t, false
	}
	j := 0
	for i := 0; i < len(s); {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if s[i] != '-' {
				return t, false
			}
			i++
			continue
		}
		hi, ok1 := lowerHex(s[i])
		lo, ok2 := lowerHex(s[i+1])
		if !ok1 || !ok2 {
			return t, false
		}
		t[j] = hi<<4 | lo
		j++
		i += 2
	}
	return t, true
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// NodeFromK8s converts a Node: name, labels, whether the NetworkUnavailable
// and Ready conditions are "True", and whether it carries
// OutOfServiceTaint.
func NodeFromK8s(n *corev1.Node) Node {
	out := Node{Name: n.Name, Labels: labels.Set(n.Labels)}
	for _, c := range n.Status.Conditions {
		switch c.Type {
		case corev1.NodeNetworkUnavailable:
			out.NetworkUnavailable = c.Status == corev1.ConditionTrue
		case corev1.NodeReady:
			out.Ready = c.Status == corev1.ConditionTrue
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == OutOfServiceTaint {
			out.OutOfService = true
		}
	}
	return out
}

// NodeIPv4 returns the node's first IPv4 InternalIP, else its first IPv4
// ExternalIP (IPv4-mapped addresses unmapped), else the zero Addr: the
// nodeIPv4 argument of Sessions and RouterID the speaker passes.
func NodeIPv4(n *corev1.Node) netip.Addr {
	for _, t := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for _, a := range n.Status.Addresses {
			if a.Type != t {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Unmap().Is4() {
				return ip.Unmap()
			}
		}
	}
	return netip.Addr{}
}

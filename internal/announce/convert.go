package announce

import (
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
// (its UID when set).
func EndpointsFromSlices(slices []discoveryv1.EndpointSlice) []Endpoint {
	var out []Endpoint
	for i := range slices {
		family := 0
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
			}
			if ep.NodeName != nil {
				e.NodeName = *ep.NodeName
			}
			if r := ep.TargetRef; r != nil {
				e.Target = r.Kind + "/" + r.Namespace + "/" + r.Name
				if r.UID != "" {
					e.Target = "uid:" + string(r.UID)
				}
			}
			out = append(out, e)
		}
	}
	return out
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

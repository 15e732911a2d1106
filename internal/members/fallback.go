package members

import corev1 "k8s.io/api/core/v1"

// OutOfServiceTaint is the taint key an operator sets on a node that is shut
// down or unreachable (non-graceful node shutdown, KEP-2268); such a node is
// dead whatever its conditions say.
const OutOfServiceTaint = "node.kubernetes.io/out-of-service"

// NodeStatus is the part of a Node that decides its liveness when
// memberlist is off. Build it with [NodeStatusFromNode].
type NodeStatus struct {
	// Name is the node name.
	Name string
	// Ready is true iff the Ready condition is "True" (False and Unknown,
	// the latter set when the kubelet stops reporting, are not ready).
	Ready bool
	// NetworkUnavailable is true iff the NetworkUnavailable condition is "True".
	NetworkUnavailable bool
	// OutOfService is true iff the node carries the OutOfServiceTaint
	// (any value, any effect).
	OutOfService bool
}

// NodeStatusFromNode extracts a NodeStatus from a Node.
func NodeStatusFromNode(n *corev1.Node) NodeStatus {
	s := NodeStatus{Name: n.Name}
	for _, c := range n.Status.Conditions {
		switch c.Type {
		case corev1.NodeReady:
			s.Ready = c.Status == corev1.ConditionTrue
		case corev1.NodeNetworkUnavailable:
			s.NetworkUnavailable = c.Status == corev1.ConditionTrue
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == OutOfServiceTaint {
			s.OutOfService = true
		}
	}
	return s
}

// LiveFromNodeConditions is the liveness used when memberlist is disabled:
// node name -> alive, where alive means Ready, network available and not
// tainted out-of-service. Every given node is in the result. It reacts as
// fast as the node lifecycle controller marks nodes (Ready becomes Unknown
// after --node-monitor-grace-period, 40-50 s by default), so it is far
// slower than memberlist.
func LiveFromNodeConditions(nodes []NodeStatus) map[string]bool {
	out := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		out[n.Name] = n.Ready && !n.NetworkUnavailable && !n.OutOfService
	}
	return out
}

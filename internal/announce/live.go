package announce

// LiveFromNodeConditions is the liveness used when memberlist is disabled
// (Input.Live): node name -> alive, where alive means Ready, network
// available and not tainted out-of-service (OutOfServiceTaint). Every given
// node is in the result. It reacts as fast as the node lifecycle controller
// marks nodes (Ready becomes Unknown after --node-monitor-grace-period,
// 40-50 s by default), so it is far slower than memberlist.
func LiveFromNodeConditions(nodes []Node) map[string]bool {
	out := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		out[n.Name] = n.Ready && !n.NetworkUnavailable && !n.OutOfService
	}
	return out
}

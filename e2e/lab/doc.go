// Package lab builds Herald's test lab on one Linux machine: a real
// kube-apiserver with etcd, a switch, nodes, a BGP router running FRR and a
// client, each in its own network namespace, all on documentation addresses
// (198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32).
//
// The same package serves `make lab` (a persistent lab with the fixed prefix
// "herald-lab", driven by e2e/cmd/herald-lab) and the e2e test suite (a fresh
// lab per run with a unique prefix).
//
// Topology (prefix p):
//
//	p-sw   bridge br0; one veth per other namespace ("v-ctl", "v-n1", ...)
//	p-ctl  etcd on its own loopback, kube-apiserver on 198.51.100.254:6443
//	p-rtr  FRR (zebra + bgpd, "-N p-rtr"), 198.51.100.1 and 2001:db8:100::1,
//	       ASN 64500, dynamic neighbors from 198.51.100.0/24 and 2001:db8:100::/64
//	p-nI   node I: 198.51.100.(10+I) and 2001:db8:100::(10+I), a lab backend
//	       on port 80, local routes for the Service ranges
//	p-cl   client: 198.51.100.100 and 2001:db8:100::100, routes to the BGP
//	       Service prefixes via the router
//
// The same topology as a diagram: docs/diagrams/lab-topology.svg (source
// lab-topology.dot, rendered by make diagrams).
//
// The root namespace gets no lab address and no lab route. Programs in the
// root namespace reach the lab in two ways: [Lab.DialContext] creates sockets
// inside a lab namespace (the test suite's client-go config uses it), and the
// persistent lab runs a loopback proxy (127.0.0.1 in the root namespace to the
// API server in p-ctl) so that a plain `kubectl --kubeconfig <StateDir>/kubeconfig`
// works for humans.
//
// Everything the lab creates is recorded in StateDir/state.json before it is
// created, so [Cleanup] can remove the leftovers of a crashed run from the
// state directory alone.
//
// Parts marked "lab scaffolding" play the pieces of a cluster that do not run
// here (kubelet, kube-controller-manager, kube-proxy): Node objects and their
// status, speaker Pod objects with a Running status, EndpointSlices, and a
// tiny HTTP backend per node. They are never part of Herald itself.
package lab

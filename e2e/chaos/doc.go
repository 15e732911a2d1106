// Package chaos is Herald's chaos scenario library: the transitions
// operators cause every week (speaker restarts and rollouts, controller
// crashes and rollouts during a burst of Services, a node's link cut and
// restored, nodes under full CPU load, the API server stopped, the
// memberlist Secret deleted and its key rotated, a peer sending a full
// table), each played against Herald running in the lab (e2e/lab) and
// measured from the outside: on the wire (ARP frames captured on a node's
// switch port, the client's ARP probes), in the client's kernel (its
// neighbour table), in the API server (watches of Services and
// ServiceL2Status objects, events) and in /proc (the speaker's memory).
//
// Each scenario returns a result whose [Row]s say what was lost, with 0 as
// the target. e2e/cmd/bench-chaos (`make bench-chaos`) runs the full form of
// every scenario and prints (and with --record writes) the table into
// docs/reliability.md; e2e/chaos_test.go runs a short form of each (few
// iterations) in one lab and asserts the targets, so that a regression
// fails CI.
//
// The scenarios share one lab: each uses its own Kubernetes namespace
// (chaos-<scenario>), its own IPAddressPool and addresses, and deletes what
// it created when it ends.
package chaos

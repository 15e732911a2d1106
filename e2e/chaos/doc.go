// Package chaos is Herald's chaos scenario library: the transitions
// operators cause every week (speaker restarts, controller crashes during a
// burst of Services, a node's link cut and restored, nodes under full CPU
// load), each played against Herald running in the lab (e2e/lab) and
// measured from the outside: on the wire (ARP frames captured on a node's
// switch port, the client's ARP probes), in the client's kernel (its
// neighbour table) and in the API server (watches of Services and
// ServiceL2Status objects).
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

// Package herald is the Kubernetes side of kubectl herald (the
// kubectl-herald binary): it reads, read-only and with the user's
// kubeconfig, the objects the pure explanations of internal/explain need
// (Read), runs them, and prints the result as tables (text/tabwriter) or as
// JSON or YAML (Main).
//
// Exit status (Main): 0 when nothing is wrong, 1 when the report lists
// problems (a pending Service, an unannounced address, a disagreement between
// what is computed and what the speakers or the controller report, an
// invalid configuration, a BGP session that is not established), 2 for a
// usage error or when the cluster cannot be read.
package herald

// Package members tracks which speakers are alive, so that layer 2 election
// can fail an address over to another node quickly.
//
// It wraps github.com/hashicorp/memberlist (SWIM with Lifeguard): every
// speaker runs one [List] bound to its node's IP (hostNetwork pod IP) on
// --ml-bindport (7946 TCP+UDP by default), named after its Kubernetes node.
// Peers are discovered through the API by the caller (the speaker pods' IPs,
// selected by --ml-labels) and handed over with [List.SetPeers]; gossip is
// encrypted with AES-256-GCM under the key [DeriveKey] computes from the
// memberlist Secret. A new secret ([List.SetSecret], or Config.SecretFile
// updated by the kubelet) is rotated to without splitting the cluster: see
// keyring.go. [List.Live] reports the node names that are alive and
// [List.Changes] signals when that set changes.
//
// Start-up: a List binds nothing until [List.Activate] (the speaker calls it
// once it has a configuration snapshot), and [List.Joined] stays false
// until a state exchange with another speaker completed or the speaker
// learned it is alone (bounded by Timings.AloneAfter); an election on Live
// before that would make a starting speaker win every address.
// Partitions: missing peers are joined every Timings.RejoinInterval (1 s),
// and [List.Rejoins] counts members that came back after being declared
// failed, so the caller can re-announce.
//
// The default timings ([DefaultTimings]) are tuned for sub-second failure
// detection on a LAN; see that function for the reasoning and the expected
// detection time.
//
// When memberlist is disabled (no --ml-bindaddr or no --ml-labels, as in
// MetalLB), the speaker derives liveness from Node conditions and taints
// instead (announce.LiveFromNodeConditions).
//
// This package imports no Kubernetes packages; it does open sockets.
package members

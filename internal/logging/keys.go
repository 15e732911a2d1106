package logging

// Identity keys: which program, part and node a log line comes from.
//
// The rule: binaries name themselves, libraries do not. A binary's main
// sets KeyComponent (through [New]) and, in the speaker, KeyNode, once, on
// the logger everything else derives from; when it hands a logger to a
// library it adds KeySubsystem naming that part (log.With(KeySubsystem,
// "bgp")). A library (every package under internal/) logs with the logger
// it was given and adds no identity key of its own, so a key appears once
// per line and the same part is named the same way in every binary. The
// one exception is KeyLibrary, which an adapter adds to the lines it
// forwards from an embedded third-party library's own logger. `make lint`
// checks the rule (.golangci.yml: revive's string-format on log.With and
// slog.String literals, forbidigo on these constants outside the binaries).
//
// controller-runtime's own lines (routed through the same logger by [New])
// carry its keys "controller" (its reconciler's name) and "source" (an
// event source); Herald's code uses neither key.
const (
	// KeyComponent is the binary: "controller" or "speaker".
	KeyComponent = "component"
	// KeySubsystem is the part of the binary a library serves, named by
	// the binary: "serviceip", "poolstatus", "webhook", "mlsecret"
	// (controller); "memberlist", "layer2", "bgp" (speaker); "events"
	// (both: the Kubernetes event recorder).
	KeySubsystem = "subsystem"
	// KeyNode is the Kubernetes Node a speaker runs on.
	KeyNode = "node"
	// KeyLibrary marks a line logged by an embedded third-party library
	// rather than by Herald: "gobgp", "hashicorp/memberlist". (Not
	// "source", which log/slog uses for the caller's file and line.)
	KeyLibrary = "library"
)

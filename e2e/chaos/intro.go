package chaos

// Intro is the text above the table in docs/reliability.md's "Chaos
// results" section: what each scenario does and what its numbers mean.
const Intro = "`make bench-chaos` (e2e/cmd/bench-chaos, scenarios in e2e/chaos) plays the transitions operators cause\n" +
	"every week against Herald in the lab (3 nodes, a real kube-apiserver, a client on the same segment) and counts\n" +
	"what was lost; the target of every count is 0. The e2e suite (`TestChaos`) runs a short form of each scenario\n" +
	"and fails when a count is not 0. Owners are what the client sees: the node answering its ARP request (RFC 826),\n" +
	"checked against the ServiceL2Status objects.\n\n" +
	"- **speaker restarts**: 12 layer 2 IPv4 Services (endpoints on every node) spread over the nodes; one node's\n" +
	"  speaker is restarted again and again, alternating SIGTERM+start and SIGKILL+start. Per restart and address:\n" +
	"  *false claims* are ARP replies or gratuitous ARPs the restarted node sent (captured on its switch port) for an\n" +
	"  address it owned neither before nor after the restart: each one can point a client or router at the wrong\n" +
	"  node. *Wrong neighbour entries* are the client's kernel entries (learnt over HTTP before the restart) that name\n" +
	"  a node other than the owner 4 s after the start: traffic that goes to the wrong node until the entry expires.\n"

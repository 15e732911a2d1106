package chaos

// Intro is the text above the table in docs/reliability.md's "Chaos
// results" section: what each scenario does and what its numbers mean.
const Intro = "`make bench-chaos` (e2e/cmd/bench-chaos, scenarios in e2e/chaos) plays the transitions operators cause\n" +
	"every week against Herald in the lab (3 nodes, a real kube-apiserver, FRR as the router, a client on the\n" +
	"same segment) and counts what was lost: **the target of every count is 0**. The e2e suite (`TestChaos`) runs a\n" +
	"short form of each scenario (few iterations, shorter outages) and fails when a count is not 0; times there\n" +
	"are only checked against generous bounds, the product targets below are measured here. An address's *owner*\n" +
	"is what the client sees: the one node answering its ARP request (RFC 826), checked against the\n" +
	"ServiceL2Status objects. \"X of N\" counts X events out of N chances.\n\n" +
	"- **speaker restarts**: 12 layer 2 IPv4 Services (endpoints on every node) spread over the nodes; one node's\n" +
	"  speaker is restarted again and again, alternating SIGTERM+start and SIGKILL+start. Per restart and address:\n" +
	"  *false claims* are ARP replies or gratuitous ARPs the restarted node sent (captured on its switch port) for an\n" +
	"  address it owned neither before nor after the restart: each one can point clients and routers at the wrong\n" +
	"  node. *Neighbour entries at a non-owner* are the client's kernel entries (learnt over HTTP before the restart)\n" +
	"  that name another node than the owner 4 s after the start: traffic that goes to a node not announcing the\n" +
	"  address (with `externalTrafficPolicy: Local` it may have no endpoint) until the entry expires.\n" +
	"- **rolling update of the speakers**: every speaker in turn is stopped (SIGTERM), started again 2 s later (the\n" +
	"  old Pod gone, the new one not yet running), the next one once it is ready, the ServiceL2Status objects are\n" +
	"  stable again and the router has every BGP prefix from every node again; meanwhile the client requests each of\n" +
	"  6 layer 2 addresses and 4 BGP addresses (a BGPPeer from every node to FRR, graceful restart on; the client\n" +
	"  reaches them through the router) over HTTP every 100 ms (new connection each, 1 s timeout). *Requests lost*\n" +
	"  failed or timed out; the *longest gap* is the longest time between two answered requests of one address\n" +
	"  (target ≤ 1 s); *answered by another node* counts requests to layer 2 addresses, once the statuses settled,\n" +
	"  that reached a node other than the announcing one (in the lab every node serves every address, so a wrong\n" +
	"  neighbour entry shows here rather than as a loss). BGP rows: *routes to a node whose speaker is gone* are\n" +
	"  reads of FRR's table (about every 200 ms while a speaker is stopped, per prefix, the first right after the\n" +
	"  process ended) that still hold a path from that node, stale or not (target 0: the speaker sends a Cease\n" +
	"  NOTIFICATION, RFC 4271 §6.7 and RFC 4486, before it exits, so FRR withdraws at once and graceful restart,\n" +
	"  RFC 4724, keeps nothing; a SIGKILL instead counts every read); requests to BGP addresses lost, reported (the\n" +
	"  router always has the other nodes' paths, but a connection in flight when its path is withdrawn is hashed to\n" +
	"  another node, which resets it: ECMP without resilient hashing), and their longest gap (target ≤ 1 s).\n" +
	"- **controller kills during a burst**: 1,000 IPv6 LoadBalancer Services are created in 20 chunks; the controller\n" +
	"  is SIGKILLed while each chunk is being allocated (once the watch below has seen a quarter of it get an\n" +
	"  address) and started again. A watch on the Services sees every state the API server stored: *duplicates* are addresses held by two Services at one moment; *changed* are Services\n" +
	"  whose address, once assigned, was ever different or removed.\n" +
	"- **node link cut, then restored**: the switch port of the node owning most of 6 layer 2 addresses goes down\n" +
	"  for 60 s (the others take its addresses over), then comes back; three times. The client sends one ARP request\n" +
	"  per address in a loop for 90 s after each restore and collects every reply: *most nodes answering one address* (from 5 s after the restore on,\n" +
	"  target 1), probes nobody answered (target 0), and the worst *time to a single answerer* for every address\n" +
	"  (target ≤ 2 s; the whole window when it never got there). Without a fix the heal waits for memberlist's\n" +
	"  once-a-minute rejoin, so this time depends on when the cut falls in that minute.\n" +
	"- **full CPU load on every node**: busy loops in every node namespace (as many per node as the machine has\n" +
	"  CPUs, each ended by `timeout` after 60 s) while nothing fails. *False failovers*: memberlist failure\n" +
	"  detections (`herald_memberlist_member_events_total{event=\"failed\"}` on every speaker), ARP probes (about once\n" +
	"  a second) not answered by exactly the owner from before, and ServiceL2Status objects created, deleted or\n" +
	"  moved.\n" +
	"- **API server stopped, then back**: kube-apiserver is stopped for 60 s (etcd keeps its data) with 4 layer 2\n" +
	"  and 4 BGP Services announced (a BGPPeer from every node to FRR). During the outage: layer 2 probes not\n" +
	"  answered by the owner, BGP sessions that left Established or restarted, and probes of the router's table that\n" +
	"  missed a path (all target 0). *Catch-up*: from the API server being ready again until a Service created then\n" +
	"  has an address that its node answers on the wire (target ≤ 5 s; a controller or speaker that exited during\n" +
	"  the outage is started again, as a kubelet would, and the notes say so).\n\n" +
	"- **controller rollout overlapping a burst**: a surge rollout of the controller Deployment, as `maxSurge: 1`\n" +
	"  does: a second controller replica (same Pod template, ports of its own, since the lab's Pods share one address)\n" +
	"  starts beside the running one, a chunk of IPv6 Services is created while both run, then the old replica is\n" +
	"  stopped (SIGTERM) once a quarter of the next chunk has an address; each round rolls to the second replica and back. Leader\n" +
	"  election decides which one allocates. A watch counts *duplicates* (an address held by two Services at once)\n" +
	"  and *flaps* (a Service whose address, once assigned, changed or went away).\n" +
	"- **memberlist Secret deleted; key rotated**: with 4 layer 2 addresses announced, the memberlist Secret is\n" +
	"  deleted; the controller creates it again with a new key, which reaches the speakers' mounted files one node at\n" +
	"  a time (10 s apart), as the kubelet updates mounted Secrets; each speaker installs the new key, all finish the\n" +
	"  rotation (their logs name the key's ID). In each rotation, once the Secret is re-created and before any\n" +
	"  node's files are updated, one speaker is restarted (SIGTERM, start): like a new Pod it mounts the new key and,\n" +
	"  as `previoussecretkey`, the replaced one, while the others still hold the old key alone; the others get the\n" +
	"  new files only once it has joined them and `--ml-alone-after` (10 s) + 5 s have passed. The client probes every\n" +
	"  address (one ARP request each, all replies collected) throughout: *most nodes answering one address* (target\n" +
	"  1; reported apart, without a target, for the hand-back: from the restarted speaker's start until 2 s after it\n" +
	"  joined, when it takes its addresses back and the interim owner may answer for up to one gratuitous burst, as\n" +
	"  in any hand-over, see \"Two nodes answering for one address\"); the *longest overlap*, how long two nodes\n" +
	"  answered one address (the client's switch port is captured throughout and the client also asks for every\n" +
	"  address every 50 ms; a node answers an address from its first reply or gratuitous ARP until the first of 10\n" +
	"  requests in a row it left unanswered, so the figure is late by at most one request interval, never short;\n" +
	"  target ≤ 0.8 s, one gratuitous burst: 5 packets 200 ms apart, `layer2.DefaultBurstLength`; the short form\n" +
	"  in `TestChaos` fails above it; the longest per rotation and address is in the notes); probes nobody answered and probes answered by\n" +
	"  another node than the owner from before (target 0, outside the restart window: from the stop until every\n" +
	"  address is answered by its owner alone again, the restarted node's addresses fail over and back as in any\n" +
	"  restart); restarted speakers that elected as if alone (their log) or had not joined the others within 1 min\n" +
	"  (target 0).\n" +
	"- **a peer sends a full table**: a second router (gobgp, in the router namespace on 198.51.100.2:1790) sends\n" +
	"  200,000 IPv6 /64s to one node's speaker through a BGPPeer for that node only. The speaker's RSS is read from\n" +
	"  /proc (VmRSS every 100 ms, VmHWM at the end): *peak RSS* against the speaker container's memory limit in the\n" +
	"  manifests (target: under it; the lab enforces no limit, so it is a comparison); the session must be torn down\n" +
	"  at the received-prefix limit (`--bgp-max-received-prefixes`, 10,000) with a `prefixLimitExceeded` event on the\n" +
	"  BGPPeer (the speaker opens it again after 2 min, outside the window).\n"

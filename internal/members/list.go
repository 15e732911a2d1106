package members

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"golang.org/x/sync/errgroup"
)

// maxParallelJoins bounds concurrent join attempts; each may block for
// TCPTimeout on an unreachable peer.
const maxParallelJoins = 8

// Join fan-out. One successful join merges the whole member list
// (push/pull), so trying every missing peer every RejoinInterval buys
// nothing once this speaker is a member, and costs O(n²) full-state
// exchanges per second in an n-node cluster: at start-up each speaker
// joined all n−1 others, and a member that every other declared failed drew
// n−1 joins per second (bench-scale saw 50- and 100-node labs never converge
// on 2 cores). So a member tries each missing peer with probability
// joinFanoutJoined/members (the cluster as a whole about joinFanoutJoined
// joins per missing peer and round, as memberlist gossips to 3 nodes) and
// at most joinFanoutJoined peers per round; a speaker not joined yet tries
// up to joinFanoutNotJoined (one parallel batch), so that peers not
// listening yet delay its start-up less.
const (
	joinFanoutJoined    = 3
	joinFanoutNotJoined = maxParallelJoins
)

// deadNodeReclaimTime: see memberlistConfig.
const deadNodeReclaimTime = time.Second

// List is this speaker's membership in the speakers' memberlist. Create it
// with [New], start it with [List.Run]; all other methods are safe for
// concurrent use before, during and after Run.
type List struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	started      atomic.Bool
	activate     chan struct{} // closed by Activate
	activateOnce sync.Once
	ready        chan struct{} // closed once Run has bound its sockets
	changes      chan struct{} // capacity 1, coalesced
	peersCh      chan struct{} // capacity 1, "SetPeers was called"

	// configHook, when set (tests only), may change the memberlist
	// configuration before Run creates it (a transport that cuts links).
	configHook func(*memberlist.Config) error
	// notifyHook, when set (tests only), sees every user message first, in
	// memberlist's packet handler (a test blocks it to queue messages).
	notifyHook func(msg []byte)
	// leavingWaitHook, when set (tests only), is called when announceLeaving
	// starts waiting for acknowledgements.
	leavingWaitHook func()
	// joinsTried counts completed join attempts (successful or not) of
	// joinMissing; the tests wait on it.
	joinsTried atomic.Uint64
	// rand picks which missing peers a join round tries (pickJoins); used
	// only by joinLoop's goroutine.
	rand *rand.Rand

	mu   sync.Mutex
	ml   *memberlist.Memberlist // set by Run
	live map[string]bool        // node name -> alive (alive or suspect)
	// leaving: members that announced a graceful leave, and when.
	leaving map[string]time.Time
	// leavingAcks receives the names of members that acknowledged this
	// node's leaving announcement; set by announceLeaving.
	leavingAcks chan string
	peers       []netip.AddrPort // last SetPeers
	peersSet    bool             // SetPeers was called at least once
	// joined: see Joined; never reset.
	joined bool
	// failed: members declared failed (not left) and not live since.
	failed map[string]bool
	// rejoins: see Rejoins.
	rejoins uint64
	// nodes: this package's copy of every member memberlist reports alive
	// or suspect (this node included, also after it left), by name, taken
	// in the EventDelegate callbacks (see copyNode). memberlist rewrites the
	// Node structs that Members and LocalNode return (Addr, Port, Meta,
	// protocol versions) under its node lock on every alive message, e.g.
	// each metadata update of a key rotation, so reading them after those
	// calls return is a data race; joins, leaving announcements and Addr
	// read this copy instead.
	nodes map[string]memberlist.Node

	keys keys // gossip keyring and its rotation (keyring.go)
}

// New validates cfg and returns a List that is not yet running; it opens no
// sockets (Run does). Errors wrap [ErrInvalidConfig], or report a metrics
// registration failure.
func New(cfg Config, logger *slog.Logger) (*List, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	l := &List{
		cfg:      cfg,
		log:      logger,
		activate: make(chan struct{}),
		ready:    make(chan struct{}),
		changes:  make(chan struct{}, 1),
		peersCh:  make(chan struct{}, 1),
		live:     map[string]bool{cfg.NodeName: true},
		leaving:  map[string]time.Time{},
		failed:   map[string]bool{},
		nodes:    map[string]memberlist.Node{},
		rand:     rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
	}
	l.keys.derivation = cfg.KeyDerivation
	l.keys.sendsReleases = cfg.SendsReleases
	l.keys.init(cfg.Secret, cfg.PreviousSecret)
	if len(l.keys.candidates) > 1 {
		l.log.Info("memberlist key rotation: new key installed for decryption; starting with the previous key (previoussecretkey) primary, as the other speakers may still use it",
			"key", keyID(l.keys.desired), "primary", keyID(l.keys.candidates[0]))
	}
	if cfg.Registerer != nil {
		m, err := newMetrics(cfg.Registerer, l)
		if err != nil {
			return nil, fmt.Errorf("register memberlist metrics: %w", err)
		}
		l.metrics = m
	}
	return l, nil
}

// Run waits for [List.Activate], then binds BindAddr:BindPort (TCP and
// UDP), joins the peers given to SetPeers (immediately, on every SetPeers
// and every RejoinInterval) and blocks until ctx is cancelled. It then leaves
// before it stops, so that another node takes over at once: it sends every
// member a leaving announcement (see leaving.go), calls memberlist's Leave
// (waiting up to LeaveTimeout for the leave to be gossiped), shuts
// memberlist down and returns nil, within about LeaveTimeout of the
// cancellation. It does not wait for joins still in flight: a join to an
// unreachable peer can block for up to TCPTimeout (Shutdown does not cut it
// short), which would hold up the speaker's shutdown past the Pod's grace
// period; such a join ends on its own within TCPTimeout and its result is
// dropped. memberlist's own goroutines end with Shutdown. If ctx ends before
// Activate, Run returns nil without having bound anything. A bind failure is
// returned at once; a second call returns ErrAlreadyRunning.
func (l *List) Run(ctx context.Context) error {
	if !l.started.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	select {
	case <-l.activate:
	case <-ctx.Done():
		return nil
	}
	mlc := l.memberlistConfig()
	if l.configHook != nil {
		if err := l.configHook(mlc); err != nil {
			return err
		}
	}
	ml, err := memberlist.Create(mlc)
	if err != nil {
		return fmt.Errorf("start memberlist on %s: %w",
			netip.AddrPortFrom(l.cfg.BindAddr, uint16(l.cfg.BindPort)), err)
	}
	l.mu.Lock()
	l.ml = ml
	l.mu.Unlock()
	close(l.ready)
	if len(l.cfg.Secret) == 0 {
		l.log.Warn("memberlist gossip is not encrypted: no secret configured")
	}
	l.log.Info("memberlist started", "addr", l.Addr())

	// Neither loop is waited for on shutdown (see above): both end with ctx,
	// and a join or a metadata broadcast in flight can block for TCPTimeout.
	go l.joinLoop(ctx, ml)
	go l.keyLoop(ctx, ml)

	<-ctx.Done()

	start := time.Now()
	l.announceLeaving(ml)
	if err := ml.Leave(l.cfg.Timings.LeaveTimeout); err != nil {
		l.log.Warn("memberlist leave incomplete; peers will detect the failure instead", "error", err)
	} else {
		l.log.Info("memberlist left", "duration", time.Since(start))
	}
	if err := ml.Shutdown(); err != nil {
		l.log.Warn("memberlist shutdown", "error", err)
	}
	return nil
}

// Activate lets Run bind and join: call it once this speaker can announce,
// i.e. when it has its first configuration snapshot. Until then the speaker
// is no member at all: it binds no port, so the other speakers cannot join
// it and do not elect it, and it elects nobody (Joined is false).
//
// Why not membership with a "not ready" mark in the node metadata: a member
// that is not electable would still have to be filtered out by every
// speaker, including speakers of an older Herald during a rolling upgrade,
// which treat every member as electable; not being a member is understood by
// every version. The cost is that a speaker without a configuration is also
// invisible in herald_memberlist_members; its ConfigurationState and
// metallb_k8s_client_config_loaded_bool say why. Safe to call more than
// once and before Run.
func (l *List) Activate() {
	l.activateOnce.Do(func() { close(l.activate) })
}

// Ready is closed once Run has bound its sockets; Addr is valid from then on.
func (l *List) Ready() <-chan struct{} { return l.ready }

// Addr returns the address memberlist advertises (BindAddr and the bound
// port), or the zero AddrPort before Run has bound.
func (l *List) Addr() netip.AddrPort {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ml == nil {
		return netip.AddrPort{}
	}
	return l.selfAddrLocked()
}

// selfAddrLocked is this node's advertised address from the copy in
// l.nodes (memberlist.Create reports this node's join before it returns),
// or the zero AddrPort before that. l.mu is held.
func (l *List) selfAddrLocked() netip.AddrPort {
	n, ok := l.nodes[l.cfg.NodeName]
	if !ok {
		return netip.AddrPort{}
	}
	ap, _ := nodeAddr(&n)
	return ap
}

// SetPeers replaces the set of speaker addresses (pod IP and memberlist
// port) to keep joined. It never blocks: Run joins every address that is not
// already a live member, in the background. The caller calls it whenever the
// speaker pods change; this node's own address may be included.
func (l *List) SetPeers(addrs []netip.AddrPort) {
	l.mu.Lock()
	l.peers = slices.Clone(addrs)
	l.peersSet = true
	l.mu.Unlock()
	select {
	case l.peersCh <- struct{}{}:
	default:
	}
}

// Live returns node name -> alive for every member this node has heard of.
// Suspected members count as alive until they are declared failed; members
// that failed or left are false. This node is always present and true.
// The map is a copy.
func (l *List) Live() map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := maps.Clone(l.live)
	out[l.cfg.NodeName] = true
	return out
}

// Changes returns a channel that receives a value after the set of live
// members changed (join, graceful leave, failure) and when Joined becomes
// true. Notifications are coalesced (capacity 1) and never block
// memberlist; read Live and Joined after receiving.
func (l *List) Changes() <-chan struct{} { return l.changes }

// Joined reports whether this speaker knows the cluster's members, so that
// an election on Live can be trusted. Until then Live holds only the members
// seen so far (at first only this node), and a speaker electing on it would
// win every address. It becomes true, once and for good, when
//
//   - a push/pull state exchange with another speaker completed (our join of
//     it, or its join of us): memberlist merges the peer's full member list
//     (NotifyJoin for every member it knows) before the exchange ends, so
//     Live then holds every member the peer knew; or
//   - this speaker learned that it is alone: the latest SetPeers named no
//     address other than its own, or no join succeeded for
//     Timings.AloneAfter since Run first had another address to join (every
//     join failed: peers not up yet, unreachable, or using another key).
//
// Changes is signalled when it becomes true. A later partition does not make
// it false again: that is a failure of members, handled by failure
// detection and rejoin (RejoinInterval).
func (l *List) Joined() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.joined
}

// Rejoins counts the members that had been declared failed (not those that
// left gracefully) and became live again: a healed partition, or a speaker
// that was killed and restarted. A caller that announces addresses compares
// it with the value it last handled and, when it grew, re-announces what it
// owns, so that clients that followed the other side of a partition come
// back (see the speaker's layer 2 heal re-announce).
func (l *List) Rejoins() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rejoins
}

// markJoined sets Joined (once) and signals Changes; how says why, for the
// log.
func (l *List) markJoined(how string, warn bool, args ...any) {
	l.mu.Lock()
	was := l.joined
	l.joined = true
	l.mu.Unlock()
	if was {
		return
	}
	if warn {
		l.log.Warn("memberlist: "+how, args...)
	} else {
		l.log.Info("memberlist: "+how, args...)
	}
	l.keys.poke() // the key rotation plans from here on (stepKeys)
	l.signal()
}

func (l *List) signal() {
	select {
	case l.changes <- struct{}{}:
	default:
	}
}

func (l *List) memberlistConfig() *memberlist.Config {
	c := memberlist.DefaultLANConfig()
	t := l.cfg.Timings
	c.Name = l.cfg.NodeName
	c.BindAddr = l.cfg.BindAddr.String()
	c.BindPort = l.cfg.BindPort
	c.AdvertiseAddr = l.cfg.BindAddr.String()
	c.AdvertisePort = l.cfg.BindPort
	c.ProbeInterval = t.ProbeInterval
	c.ProbeTimeout = t.ProbeTimeout
	c.SuspicionMult = t.SuspicionMult
	c.SuspicionMaxTimeoutMult = t.SuspicionMaxTimeoutMult
	c.IndirectChecks = t.IndirectChecks
	c.AwarenessMaxMultiplier = t.AwarenessMaxMultiplier
	c.GossipInterval = t.GossipInterval
	c.GossipNodes = t.GossipNodes
	c.RetransmitMult = t.RetransmitMult
	c.PushPullInterval = t.PushPullInterval
	c.TCPTimeout = t.TCPTimeout
	// Member names are Kubernetes node names, unique in the cluster, so a
	// failed member that comes back from another address (node IP changed
	// while the speaker was down) is the same node: let it reclaim its name
	// soon instead of being rejected as a name conflict until the dead entry
	// is reaped (GossipToTheDeadTime, 30 s).
	c.DeadNodeReclaimTime = deadNodeReclaimTime
	c.Events = (*events)(l)
	c.Delegate = (*delegate)(l)
	c.Logger = newStdLogger(l.log)
	c.LogOutput = nil
	l.configureKeys(c) // keyring, and key metadata around Events and Delegate
	return c
}

// joinLoop joins missing peers when SetPeers is called and every
// RejoinInterval, until ctx is done. It also decides Joined's "alone" cases.
func (l *List) joinLoop(ctx context.Context, ml *memberlist.Memberlist) {
	tick := time.NewTicker(l.cfg.Timings.RejoinInterval)
	defer tick.Stop()
	var alone *time.Timer
	defer func() {
		if alone != nil {
			alone.Stop()
		}
	}()
	self := l.Addr()
	for {
		l.mu.Lock()
		peers, peersSet := l.peers, l.peersSet
		l.mu.Unlock()
		others := slices.ContainsFunc(peers, func(p netip.AddrPort) bool {
			return netip.AddrPortFrom(p.Addr().Unmap(), p.Port()) != self
		})
		switch {
		case peersSet && !others:
			l.markJoined("alone: no other speaker to join", false)
		case others && alone == nil:
			after := l.cfg.Timings.AloneAfter
			alone = time.AfterFunc(after, func() {
				l.markJoined("no join succeeded, electing as if alone (split brain until a join succeeds)", true, "after", after.String())
			})
		}
		if attempted := l.joinMissing(ctx, ml); attempted && !l.Joined() {
			if id := l.tryNextPrimary(); id != "" {
				l.log.Info("memberlist: not joined yet; trying the other installed key as primary", "primary", id)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-l.peersCh:
		case <-tick.C:
		}
	}
}

// chooser is the randomness pickJoins uses (*rand.Rand; tests pass their own).
type chooser interface {
	Float64() float64
	Shuffle(n int, swap func(i, j int))
}

// pickJoins keeps each of missing with probability p (0 ≤ p ≤ 1) and
// returns at most k (k ≥ 1) of those kept, a random subset when there are
// more: every speaker picks on its own, so together they still reach every
// missing peer within a few rounds. missing is reordered in place.
func pickJoins(missing []netip.AddrPort, k int, p float64, r chooser) []netip.AddrPort {
	kept := missing[:0]
	for _, a := range missing {
		if p >= 1 || r.Float64() < p {
			kept = append(kept, a)
		}
	}
	if len(kept) <= k {
		return kept
	}
	r.Shuffle(len(kept), func(i, j int) { kept[i], kept[j] = kept[j], kept[i] })
	return kept[:k]
}

// joinProbability is the chance a member of a cluster of members (alive and
// suspect, itself included) tries one missing peer in a round: 1 until
// this speaker has joined.
func joinProbability(joined bool, members int) float64 {
	if !joined || members <= joinFanoutJoined {
		return 1
	}
	return float64(joinFanoutJoined) / float64(members)
}

// joinMissing joins some of the peers that are not members yet (see
// joinFanoutJoined), in parallel, and reports whether it tried any.
func (l *List) joinMissing(ctx context.Context, ml *memberlist.Memberlist) bool {
	known := map[netip.AddrPort]bool{}
	l.mu.Lock()
	peers, members := l.peers, len(l.nodes)
	for _, n := range l.nodes { // alive and suspect, includes self
		if ap, ok := nodeAddr(&n); ok {
			known[ap] = true
		}
	}
	l.mu.Unlock()
	if len(peers) == 0 {
		return false
	}
	var missing []netip.AddrPort
	for _, p := range peers {
		p = netip.AddrPortFrom(p.Addr().Unmap(), p.Port())
		if known[p] {
			continue
		}
		known[p] = true // de-duplicate
		missing = append(missing, p)
	}
	joined := l.Joined()
	fanout := joinFanoutJoined
	if !joined {
		fanout = joinFanoutNotJoined
	}
	missing = pickJoins(missing, fanout, joinProbability(joined, members), l.rand)
	attempted := len(missing) > 0
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(maxParallelJoins)
	for _, p := range missing {
		g.Go(func() error {
			if ctx.Err() != nil {
				return nil
			}
			_, err := ml.Join([]string{p.String()})
			l.joinsTried.Add(1)
			if err != nil {
				l.log.Debug("memberlist join failed; retrying later", "peer", p, "error", err)
				return nil
			}
			l.log.Debug("memberlist joined", "peer", p)
			// Join returns after the push/pull merged the peer's member
			// list (NotifyJoin has run for each): Live is complete.
			l.markJoined("joined the cluster", false, "peer", p)
			return nil
		})
	}
	_ = g.Wait()
	return attempted
}

func nodeAddr(n *memberlist.Node) (netip.AddrPort, bool) {
	if n == nil {
		return netip.AddrPort{}, false
	}
	a, ok := netip.AddrFromSlice(n.Addr)
	if !ok {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(a.Unmap(), n.Port), true
}

// copyNode returns a copy of n that shares no memory with memberlist's:
// its identity, address and protocol versions (what SendBestEffort reads),
// without Meta (the keyring keeps its own decoded copy: keyring.go). Call it
// only where memberlist holds its node lock (the EventDelegate callbacks).
func copyNode(n *memberlist.Node) memberlist.Node {
	c := *n
	c.Addr = slices.Clone(n.Addr)
	c.Meta = nil
	return c
}

// events is the memberlist.EventDelegate. memberlist calls it with its node
// lock held, so it must not call back into memberlist; it is the one place
// where reading n is safe, and it copies what is used later (l.nodes).
type events List

func (e *events) NotifyJoin(n *memberlist.Node) {
	l := (*List)(e)
	l.mu.Lock()
	l.nodes[n.Name] = copyNode(n)
	delete(l.leaving, n.Name) // back after leaving (restarted speaker)
	l.countRejoin(n.Name)
	l.mu.Unlock()
	l.setLive(n.Name, true, "join", n)
}

func (e *events) NotifyUpdate(n *memberlist.Node) {
	l := (*List)(e)
	l.mu.Lock()
	l.nodes[n.Name] = copyNode(n)
	at, leaving := l.leaving[n.Name]
	l.mu.Unlock()
	if !leaving || time.Since(at) > leavingMemory {
		l.mu.Lock()
		l.countRejoin(n.Name)
		l.mu.Unlock()
		l.setLive(n.Name, true, "", n)
	}
}

// countRejoin counts name's return if it had been declared failed. l.mu is
// held.
func (l *List) countRejoin(name string) {
	if l.failed[name] {
		delete(l.failed, name)
		l.rejoins++
	}
}

// NotifyLeave reports a member that left or failed. memberlist v0.7.0 does
// not say which (Node.State is never filled in): a member that announced its
// leave (see leaving.go) was already marked and counted as "leave".
func (e *events) NotifyLeave(n *memberlist.Node) {
	l := (*List)(e)
	l.mu.Lock()
	if n.Name != l.cfg.NodeName { // keep our own address (Addr) after Leave
		delete(l.nodes, n.Name)
	}
	_, leaving := l.leaving[n.Name]
	delete(l.leaving, n.Name)
	ev := "failed"
	if leaving {
		ev = ""
	} else if n.Name != l.cfg.NodeName {
		l.failed[n.Name] = true
	}
	l.mu.Unlock()
	l.setLive(n.Name, false, ev, n)
}

// setLive records name's liveness, counts event ("" = none) and signals
// Changes if liveness changed. n may be nil. The event is counted under the
// same lock as the liveness change, so a reader of Live never sees a change
// whose event is not counted yet (TestEventCountedBeforeLiveChanges).
func (l *List) setLive(name string, alive bool, event string, n *memberlist.Node) {
	if name == l.cfg.NodeName {
		return
	}
	l.mu.Lock()
	was, known := l.live[name]
	l.live[name] = alive
	if event != "" && l.metrics != nil {
		l.metrics.events.WithLabelValues(event).Inc()
	}
	l.mu.Unlock()
	if event != "" {
		addr, _ := nodeAddr(n)
		l.log.Debug("memberlist member "+event, "member", name, "addr", addr)
	}
	if known && was == alive {
		return
	}
	l.signal()
}

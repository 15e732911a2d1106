package speaker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1alpha1"
	"github.com/herald-lb/herald/internal/bfd"
	"github.com/herald-lb/herald/internal/bgp"
	"github.com/herald-lb/herald/internal/k8s/apiretry"
)

// DefaultSessionStateInterval is the shortest time between two writes of
// one BGPSessionState: a session that flaps faster costs the API server
// one write per object and interval, carrying the latest state.
const DefaultSessionStateInterval = time.Second

// keyListSessions is the session writer's queue key that lists this node's
// existing BGPSessionState objects (BGPPeer names are never empty).
const keyListSessions = ""

// sessionStates keeps this node's BGPSessionState objects (one per
// configured BGP session, herald.io/v1alpha1) equal to what the speaker
// knows of its sessions: the applied peers (setPeers), the BGP state
// changes (bgpState), the BFD state changes (bfdState) and the periodic
// counters (refresh). Callers only record; one worker writes in the
// background from a workqueue keyed by BGPPeer name, so
//
//   - changes to one object that arrive while it is queued or being
//     written are coalesced: only the latest state is written;
//   - one object is written at most once per interval (a flapping session
//     is re-queued for the rest of the interval, not written on every
//     change);
//   - a failed write is retried with apiretry's write rate limiter.
//
// The objects are owned by the Node, so they survive a speaker restart
// (the new speaker lists and adopts them, no delete and re-create) and
// are garbage-collected with the Node. An object of a peer that is no
// longer configured on this node is deleted, also one left by an earlier
// speaker (found by the listing that precedes the first write).
type sessionStates struct {
	client    client.Client // writes, with the speaker's field manager
	apiReader client.Reader // uncached reads of the objects
	cache     client.Reader // the Node (owner)
	log       *slog.Logger
	node      string
	namespace string
	interval  time.Duration
	queue     workqueue.TypedRateLimitingInterface[string]

	mu       sync.Mutex
	entries  map[string]*sessionEntry // BGPPeer name -> state
	peersSet bool                     // setPeers was called: unconfigured objects may be deleted
	listed   bool                     // the node's objects were listed into entries
}

// sessionEntry is what the writer knows of one BGPPeer's session on this
// node and of its object.
type sessionEntry struct {
	configured bool // the peer is applied on this node: its object should exist
	cfg        bgp.PeerConfig
	bfd        bool // the peer names a BFDProfile

	state     bgp.SessionState // latest BGP state reported
	since     time.Time        // when state last changed (zero: never seen)
	bfdState  string
	lastError string
	errorTime time.Time
	adv, recv uint64

	obj       *v1alpha1.BGPSessionState // as last read or written; nil: none exists
	lastWrite time.Time                 // of the last status write
}

func newSessionStates(c client.Client, apiReader, cache client.Reader, log *slog.Logger, node, namespace string, interval time.Duration) *sessionStates {
	if interval <= 0 {
		interval = DefaultSessionStateInterval
	}
	return &sessionStates{
		client: c, apiReader: apiReader, cache: cache, log: log, node: node, namespace: namespace, interval: interval,
		queue:   workqueue.NewTypedRateLimitingQueue(apiretry.NewWriteRateLimiter[string]()),
		entries: map[string]*sessionEntry{},
	}
}

func (w *sessionStates) entry(name string) *sessionEntry {
	e := w.entries[name]
	if e == nil {
		e = &sessionEntry{state: bgp.StateUnknown}
		w.entries[name] = e
	}
	return e
}

// setPeers records the peers to apply on this node and which of them name
// a BFDProfile; it is called before bgp.Speaker.SetPeers, whose state
// changes of a new session (another address or VRF: its state starts
// Unknown here) would otherwise be overwritten. Every other peer's object
// is deleted.
func (w *sessionStates) setPeers(peers []bgp.PeerConfig, withBFD map[string]bool) {
	w.mu.Lock()
	var keys []string
	if !w.peersSet {
		w.peersSet = true
		keys = append(keys, keyListSessions)
	}
	seen := map[string]bool{}
	for _, p := range peers {
		seen[p.Name] = true
		e := w.entry(p.Name)
		if !e.configured || e.cfg != p || e.bfd != withBFD[p.Name] {
			if e.configured && (e.cfg.Key() != p.Key() || e.cfg.VRF != p.VRF) {
				// Another session: its state and errors are its own.
				e.state, e.since = bgp.StateUnknown, time.Time{}
				e.lastError, e.errorTime = "", time.Time{}
			}
			e.configured, e.cfg = true, p
			if e.bfd != withBFD[p.Name] || e.bfdState == "" {
				e.bfd = withBFD[p.Name]
				e.bfdState = v1alpha1.BFDStatusNotConfigured
				if e.bfd {
					e.bfdState = bfd.StateDown.String() // RFC 5880 §6.8.1: a session starts Down
				}
			}
			keys = append(keys, p.Name)
		}
	}
	for name, e := range w.entries {
		if !seen[name] && e.configured {
			e.configured = false
			keys = append(keys, name)
		}
	}
	w.mu.Unlock()
	for _, k := range keys {
		w.queue.Add(k)
	}
}

// bgpState records a BGP session state change (bgp.Speaker's callback).
// at is when it was seen.
func (w *sessionStates) bgpState(st bgp.PeerState, at time.Time) {
	w.mu.Lock()
	e := w.entry(st.Name)
	if e.state != st.State || e.since.IsZero() {
		e.state, e.since = st.State, at
	}
	if st.LastError != "" {
		e.lastError, e.errorTime = st.LastError, st.LastErrorTime
	}
	queue := e.configured
	w.mu.Unlock()
	if queue {
		w.queue.Add(st.Name)
	}
}

// bfdState records a BFD state change of peer's session.
func (w *sessionStates) bfdState(peer string, state bfd.State) {
	w.mu.Lock()
	e := w.entries[peer]
	queue := e != nil && e.configured && e.bfd && e.bfdState != state.String()
	if queue {
		e.bfdState = state.String()
	}
	w.mu.Unlock()
	if queue {
		w.queue.Add(peer)
	}
}

// refresh records the counters and last errors of bgp.Speaker.PeerStates
// (called periodically). The FSM state comes from the state changes only.
func (w *sessionStates) refresh(states []bgp.PeerState) {
	var keys []string
	w.mu.Lock()
	for _, st := range states {
		e := w.entries[st.Name]
		if e == nil || !e.configured {
			continue
		}
		changed := e.adv != st.Advertised || e.recv != st.Received
		e.adv, e.recv = st.Advertised, st.Received
		if st.LastError != "" && (st.LastError != e.lastError || !st.LastErrorTime.Equal(e.errorTime)) {
			e.lastError, e.errorTime, changed = st.LastError, st.LastErrorTime, true
		}
		if changed {
			keys = append(keys, st.Name)
		}
	}
	w.mu.Unlock()
	for _, k := range keys {
		w.queue.Add(k)
	}
}

// sessionStatus is the status of one configured session's object.
// Times are whole seconds (the API's resolution), so a status read back
// compares equal to the one written.
func sessionStatus(node string, e *sessionEntry) v1alpha1.BGPSessionStateStatus {
	st := v1alpha1.BGPSessionStateStatus{
		Node: node, BGPPeer: e.cfg.Name, VRF: e.cfg.VRF,
		Peer:      e.cfg.Address.String(),
		BGPStatus: e.state.String(), BFDStatus: e.bfdState,
		LastError:          e.lastError,
		PrefixesAdvertised: int64(min(e.adv, 1<<62)), PrefixesReceived: int64(min(e.recv, 1<<62)),
	}
	if e.cfg.Interface != "" {
		st.Peer = e.cfg.Interface
	}
	if !e.since.IsZero() {
		t := metav1.NewTime(e.since.Truncate(time.Second))
		st.LastTransitionTime = &t
	}
	if e.lastError != "" && !e.errorTime.IsZero() {
		t := metav1.NewTime(e.errorTime.Truncate(time.Second))
		st.LastErrorTime = &t
	}
	return st
}

// sessionStateName is the object name of node's session to peer: both
// names and a hash of the pair (two pairs can join to the same
// "<node>-<peer>"), shortened to the 253 characters of a name.
func sessionStateName(node, peer string) string {
	h := sha256.Sum256([]byte(node + "\x00" + peer))
	suffix := hex.EncodeToString(h[:])[:10]
	base := node + "-" + peer
	if limit := validation.DNS1123SubdomainMaxLength - len(suffix) - 1; len(base) > limit {
		base = strings.TrimRight(base[:limit], "-.")
	}
	return base + "-" + suffix
}

// run writes until ctx ends.
func (w *sessionStates) run(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		w.queue.ShutDown()
	}()
	for {
		key, quit := w.queue.Get()
		if quit {
			return nil
		}
		err := w.write(ctx, key)
		switch {
		case err == nil:
			w.queue.Forget(key)
		case ctx.Err() == nil:
			w.log.Error("writing BGPSessionState failed, retrying", "peer", key, "error", err)
			w.queue.AddRateLimited(key)
		}
		w.queue.Done(key)
	}
}

// list reads this node's existing objects into the entries: each is
// adopted by its peer's entry, or deleted when that peer is not
// configured.
func (w *sessionStates) list(ctx context.Context) error {
	var l v1alpha1.BGPSessionStateList
	if err := w.apiReader.List(ctx, &l, client.InNamespace(w.namespace), client.MatchingLabels{v1alpha1.LabelNode: w.node}); err != nil {
		return fmt.Errorf("list BGPSessionState of node %s: %w", w.node, err)
	}
	for i := range l.Items {
		o := &l.Items[i]
		if peer := o.Status.BGPPeer; peer == "" || o.Name != sessionStateName(w.node, peer) {
			// Not written by a speaker of this version: delete it.
			if err := w.client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete BGPSessionState %s: %w", o.Name, err)
			}
		}
	}
	var orphans []string
	w.mu.Lock()
	for i := range l.Items {
		o := &l.Items[i]
		peer := o.Status.BGPPeer
		if peer == "" || o.Name != sessionStateName(w.node, peer) {
			continue
		}
		e := w.entry(peer)
		if e.obj == nil {
			e.obj = o
		}
		if !e.configured {
			orphans = append(orphans, peer)
		}
	}
	w.listed = true
	w.mu.Unlock()
	for _, k := range orphans {
		w.queue.Add(k)
	}
	return nil
}

// write converges the object of one peer.
func (w *sessionStates) write(ctx context.Context, key string) error {
	w.mu.Lock()
	listed, peersSet := w.listed, w.peersSet
	w.mu.Unlock()
	if !peersSet {
		return nil // setPeers queues everything once it is called
	}
	if !listed {
		if err := w.list(ctx); err != nil {
			return err
		}
	}
	if key == keyListSessions {
		return nil
	}
	w.mu.Lock()
	e := w.entries[key]
	if e == nil {
		w.mu.Unlock()
		return nil
	}
	var want *v1alpha1.BGPSessionStateStatus
	if e.configured {
		st := sessionStatus(w.node, e)
		want = &st
	}
	var obj *v1alpha1.BGPSessionState
	if e.obj != nil {
		obj = e.obj.DeepCopy()
	}
	wait := w.interval - time.Since(e.lastWrite)
	w.mu.Unlock()

	if want == nil {
		if obj != nil {
			if err := w.client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete BGPSessionState %s: %w", obj.Name, err)
			}
			w.log.Debug("BGPSessionState deleted", "peer", key, "name", obj.Name)
		}
		w.mu.Lock()
		if e := w.entries[key]; e != nil && !e.configured {
			delete(w.entries, key)
		}
		w.mu.Unlock()
		return nil
	}
	if obj != nil && equality.Semantic.DeepEqual(obj.Status, *want) {
		return nil
	}
	if wait > 0 {
		w.queue.AddAfter(key, wait) // coalesced with later changes
		return nil
	}
	var err error
	if obj == nil {
		if obj, err = w.create(ctx, key); err != nil {
			return err
		}
	}
	obj.Status = *want
	if err := w.client.Status().Update(ctx, obj); err != nil {
		w.forget(ctx, key, err)
		return fmt.Errorf("write BGPSessionState %s: %w", obj.Name, err)
	}
	w.mu.Lock()
	if e := w.entries[key]; e != nil {
		e.obj, e.lastWrite = obj, time.Now()
	}
	w.mu.Unlock()
	return nil
}

// create creates the object of peer (its status follows in a second
// write: the status subresource ignores it on create), or reads the one
// that exists.
func (w *sessionStates) create(ctx context.Context, peer string) (*v1alpha1.BGPSessionState, error) {
	obj := &v1alpha1.BGPSessionState{ObjectMeta: metav1.ObjectMeta{
		Name: sessionStateName(w.node, peer), Namespace: w.namespace,
		Labels: map[string]string{v1alpha1.LabelNode: w.node},
	}}
	if len(validation.IsValidLabelValue(peer)) == 0 {
		obj.Labels[v1alpha1.LabelBGPPeer] = peer
	}
	var node corev1.Node
	if err := w.cache.Get(ctx, types.NamespacedName{Name: w.node}, &node); err == nil {
		obj.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}
	} else {
		w.log.Debug("Node not readable, BGPSessionState written without owner", "node", w.node, "error", err)
	}
	err := w.client.Create(ctx, obj)
	if apierrors.IsAlreadyExists(err) {
		err = w.apiReader.Get(ctx, client.ObjectKeyFromObject(obj), obj)
	}
	if err != nil {
		return nil, fmt.Errorf("create BGPSessionState %s: %w", obj.Name, err)
	}
	return obj, nil
}

// forget re-reads the object of peer after a failed write (a conflict:
// someone else wrote it; not found: someone deleted it), so the retry
// starts from what the API server holds.
func (w *sessionStates) forget(ctx context.Context, peer string, err error) {
	if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		return
	}
	fresh := &v1alpha1.BGPSessionState{}
	gerr := w.apiReader.Get(ctx, types.NamespacedName{Namespace: w.namespace, Name: sessionStateName(w.node, peer)}, fresh)
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.entries[peer]
	if e == nil {
		return
	}
	switch {
	case gerr == nil:
		e.obj = fresh
	case apierrors.IsNotFound(gerr):
		e.obj = nil
	default:
		w.log.Debug("re-reading BGPSessionState failed", "peer", peer, "error", errors.Join(err, gerr))
	}
}

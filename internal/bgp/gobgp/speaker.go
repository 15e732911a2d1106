// Package gobgp implements bgp.Speaker with one embedded gobgp v3 server
// (github.com/osrg/gobgp/v3). It is the only Herald package that imports
// gobgp.
//
// The server never listens (ListenPort -1): every session is outbound,
// like MetalLB's native speaker. Peers map one-to-one to gobgp neighbors
// with a per-neighbor local ASN, so sessions with different myASN share one
// gobgp instance; the instance is restarted only when the router ID changes
// (gobgp has one router ID per server). Paths are announced from the global
// RIB; per-peer restriction uses marker large communities and one global
// export policy (policy.go). Nothing is imported from peers.
//
// Standards: RFC 4271, RFC 4760 (IPv6 unicast via MP_REACH_NLRI), RFC 1997,
// RFC 8092, RFC 4724 (graceful restart), RFC 2385 (TCP-MD5, Linux).
package gobgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/config/oc"
	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
	gobgppkt "github.com/osrg/gobgp/v3/pkg/packet/bgp"
	"github.com/osrg/gobgp/v3/pkg/server"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/herald-lb/herald/internal/bgp"
	"github.com/herald-lb/herald/internal/logging"
)

// Options configures a Speaker.
type Options struct {
	// Logger receives Herald's and gobgp's logs. Required.
	Logger *slog.Logger
	// Registerer, if non-nil, gets the MetalLB BGP metrics (metrics.go).
	Registerer prometheus.Registerer
	// OnPeerState, if non-nil, is called on every session state change from
	// a gobgp goroutine. It must not block (send non-blockingly to a channel).
	OnPeerState func(bgp.PeerState)
	// MaxReceivedPrefixes is the received-prefix limit of every session and
	// address family (see bgp.DefaultMaxReceivedPrefixes); 0 means no limit.
	// A session that exceeds it is closed with a Cease NOTIFICATION (RFC 4486
	// subcode 1), reported once in PeerState.PrefixLimitFamily and logged,
	// and opened again after PrefixLimitRestart.
	MaxReceivedPrefixes uint32
	// PrefixLimitRestart is how long a session closed at the prefix limit
	// stays down before it is opened again (gobgp itself would keep it down
	// for good); 0 means DefaultPrefixLimitRestart.
	PrefixLimitRestart time.Duration
}

// DefaultPrefixLimitRestart is Options.PrefixLimitRestart's default: a
// router that keeps sending too much is tried again every 2 minutes (as
// "maximum-prefix ... restart 2" in FRR and IOS).
const DefaultPrefixLimitRestart = 2 * time.Minute

// peerRuntime is what WatchEvent learned about one neighbor.
type peerRuntime struct {
	label       string // bgp.PeerConfig.MetricLabel, for PeerState.Peer
	vrf         string // bgp.PeerConfig.VRF, to explain a missing device
	state       bgp.SessionState
	established uint32
	// limitFamily is the family whose prefix limit gobgp reported exceeded
	// (gobgp log), until the session is Established again.
	limitFamily string
	// limitHeld: the session was closed at the prefix limit and
	// holdDownAfterPrefixLimit is (or has been) run for it, until the
	// session is Established again.
	limitHeld bool
	// lastError and lastErrorTime: the latest reason the session went
	// down or was refused (gobgp log: a NOTIFICATION sent or received,
	// "Peer Down" with its reason); kept after it is Established again.
	lastError     string
	lastErrorTime time.Time
}

// Speaker is the gobgp implementation of bgp.Speaker.
type Speaker struct {
	log  *slog.Logger
	opts Options
	srv  *server.BgpServer

	mu       sync.Mutex // serialises SetPeers, SetPaths, Close
	closed   bool
	started  bool
	routerID netip.Addr
	// asn is gobgp's global ASN since start: the AS of the link bandwidth
	// community (the sessions each present their own local ASN).
	asn   uint32
	peers map[string]bgp.PeerConfig // applied, by name
	// linkLocal is the neighbor address ("fe80::1%eth1") gobgp knows each
	// applied interface (unnumbered) peer by, by name.
	linkLocal    map[string]string
	desiredPaths []bgp.Path                // merged
	paths        map[netip.Prefix]bgp.Path // announced to gobgp
	watchCancel  context.CancelFunc

	stateMu sync.Mutex
	byKey   map[string]string // neighbor key -> peer name (applied peers)
	runtime map[string]*peerRuntime
	// connecting: some applied session is Idle, Connect or Active, the
	// states in which gobgp dials (updated under stateMu by updateDown);
	// gobgp then builds its debug messages, for the connection errors
	// (slogAdapter.wantDebug). Not while OPENs are exchanged or a session
	// is Established: a router's table then arrives, and gobgp builds a
	// debug message per UPDATE.
	connecting atomic.Bool
}

var _ bgp.Speaker = (*Speaker)(nil)

// New creates the speaker and its gobgp server. gobgp's Serve loop starts
// here; BGP itself starts on the first SetPeers that yields a router ID.
// Note: gobgp v3's Serve never returns, so one idle goroutine per Speaker
// outlives Close (a gobgp limitation).
func New(opts Options) (*Speaker, error) {
	if opts.Logger == nil {
		return nil, errors.New("gobgp.New: Logger is required")
	}
	adapter := newSlogAdapter(opts.Logger.With(logging.KeyLibrary, "gobgp"))
	s := &Speaker{
		log:       opts.Logger,
		opts:      opts,
		srv:       server.NewBgpServer(server.LoggerOption(adapter)),
		peers:     map[string]bgp.PeerConfig{},
		linkLocal: map[string]string{},
		paths:     map[netip.Prefix]bgp.Path{},
		byKey:     map[string]string{},
		runtime:   map[string]*peerRuntime{},
	}
	adapter.onWarn = s.gobgpWarning
	adapter.onInfo = s.gobgpInfo
	adapter.onDebug = s.gobgpDebug
	adapter.wantDebug = s.connecting.Load
	go s.srv.Serve()
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(newCollector(s)); err != nil {
			return nil, fmt.Errorf("gobgp.New: register metrics: %w", err)
		}
	}
	return s, nil
}

// routerIDFor picks the one router ID for the peers: the common
// PeerConfig.RouterID (the zero Addr when no peer sets one).
func (s *Speaker) routerIDFor(peers []bgp.PeerConfig) (netip.Addr, error) {
	var id netip.Addr
	var from string
	for _, p := range peers {
		if !p.RouterID.IsValid() {
			continue
		}
		if id.IsValid() && id != p.RouterID {
			return netip.Addr{}, fmt.Errorf("peer %q routerID %s, peer %q routerID %s: %w", from, id, p.Name, p.RouterID, bgp.ErrRouterIDConflict)
		}
		id, from = p.RouterID, p.Name
	}
	return id, nil
}

// start runs StartBgp (never listening), the policy assignments and the
// peer watch. asn is only gobgp's default: every neighbor sets its own
// local ASN.
func (s *Speaker) start(ctx context.Context, routerID netip.Addr, asn uint32) error {
	err := s.srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: asn, RouterId: routerID.String(), ListenPort: -1,
	}})
	if err != nil {
		return fmt.Errorf("start BGP (router ID %s): %w", routerID, err)
	}
	if err := s.srv.SetPolicies(ctx, exportPolicy(nil)); err != nil {
		return fmt.Errorf("set policies: %w", err)
	}
	for _, a := range assignments() {
		if err := s.srv.SetPolicyAssignment(ctx, &api.SetPolicyAssignmentRequest{Assignment: a}); err != nil {
			return fmt.Errorf("set %s policy assignment: %w", a.Direction, err)
		}
	}
	wctx, cancel := context.WithCancel(context.Background())
	if err := s.srv.WatchEvent(wctx, &api.WatchEventRequest{Peer: &api.WatchEventRequest_Peer{}}, s.onEvent); err != nil {
		cancel()
		return fmt.Errorf("watch peer events: %w", err)
	}
	s.watchCancel = cancel
	s.started, s.routerID, s.asn = true, routerID, asn
	s.log.Info("BGP started", "routerID", routerID, "asn", asn)
	return nil
}

// stop closes every session with a Cease NOTIFICATION and forgets all state.
func (s *Speaker) stop(ctx context.Context) error {
	if !s.started {
		return nil
	}
	s.watchCancel()
	err := s.srv.StopBgp(ctx, &api.StopBgpRequest{})
	s.started = false
	s.peers = map[string]bgp.PeerConfig{}
	s.linkLocal = map[string]string{}
	s.paths = map[netip.Prefix]bgp.Path{}
	s.stateMu.Lock()
	s.byKey = map[string]string{}
	s.runtime = map[string]*peerRuntime{}
	s.updateDown()
	s.stateMu.Unlock()
	return err
}

// SetPeers implements bgp.Speaker. Peers are validated as a whole (nothing
// is applied on a validation error). A router ID change restarts gobgp and
// re-announces everything; otherwise removed peers are deleted, changed
// peers recreated and new peers added, leaving unchanged sessions alone. Errors of individual
// peers are joined; the others are still applied.
func (s *Speaker) SetPeers(ctx context.Context, peers []bgp.PeerConfig) error {
	if err := bgp.ValidatePeers(peers); err != nil {
		return fmt.Errorf("set peers: %w", err)
	}
	if err := checkMarkerCollisions(peers); err != nil {
		return fmt.Errorf("set peers: %w", err)
	}
	if err := checkOneNeighborPerAddress(peers); err != nil {
		return fmt.Errorf("set peers: %w", err)
	}
	routerID, err := s.routerIDFor(peers)
	if err != nil {
		return fmt.Errorf("set peers: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return bgp.ErrClosed
	}
	if len(peers) > 0 && !routerID.IsValid() {
		return fmt.Errorf("set peers: routerID: not set on any peer: %w", bgp.ErrInvalidPeer)
	}
	if s.started && len(peers) > 0 && routerID != s.routerID {
		s.log.Info("router ID changed, restarting BGP", "old", s.routerID, "new", routerID)
		if err := s.stop(ctx); err != nil {
			return fmt.Errorf("set peers: restart: %w", err)
		}
	}
	if !s.started {
		if len(peers) == 0 {
			return nil
		}
		if err := s.start(ctx, routerID, globalASN(peers)); err != nil {
			return fmt.Errorf("set peers: %w", err)
		}
	}
	applied := make([]bgp.PeerConfig, 0, len(s.peers))
	for _, p := range s.peers {
		applied = append(applied, p)
	}
	d := bgp.DiffPeers(peers, applied)
	var errs []error
	// 1. Remove deleted and recreated peers.
	var toAdd []bgp.PeerConfig
	for _, p := range d.Delete {
		errs = append(errs, s.deletePeer(ctx, p))
	}
	for _, u := range d.Update {
		// Every change recreates the peer (a new OPEN carries the new
		// timers, capabilities, ASN and password). gobgp's UpdatePeer is not
		// used: it ignores most fields, and its one in-place change (the
		// multihop TTL) races with the connect loop in gobgp v3.37.
		if err := s.deletePeer(ctx, u.Old); err != nil {
			errs = append(errs, err)
			continue
		}
		toAdd = append(toAdd, u.New)
	}
	toAdd = append(toAdd, d.Add...)
	// 2. The export policy for the desired peers, before any new session can send.
	if !d.Empty() {
		if err := s.srv.SetPolicies(ctx, exportPolicy(peers)); err != nil {
			errs = append(errs, fmt.Errorf("set export policy: %w", err))
		}
	}
	// 3. Add new and recreated peers.
	for _, p := range toAdd {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		s.stateMu.Lock()
		s.byKey[p.Key()] = p.Name
		s.runtime[p.Name] = &peerRuntime{label: p.MetricLabel(), vrf: p.VRF, state: bgp.StateIdle}
		s.updateDown()
		s.stateMu.Unlock()
		ap := toAPIPeer(p, s.opts.MaxReceivedPrefixes)
		if p.Interface != "" {
			// gobgp v3.37's AddPeer reads the neighbor address before it
			// resolves NeighborInterface ("NeighborAddress is not
			// configured"): resolve it here, as gobgp would, from the
			// interface's IPv6 neighbor table (exactly one link-local
			// neighbor: a point-to-point link).
			addr, err := oc.GetIPv6LinkLocalNeighborAddress(p.Interface)
			if err != nil {
				s.forgetPeer(p)
				errs = append(errs, fmt.Errorf("add peer %q (interface %s): the router's IPv6 link-local address is not known on the interface (yet): %w", p.Name, p.Interface, err))
				continue
			}
			ap.Conf.NeighborAddress = addr
		}
		if err := s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: ap}); err != nil {
			s.forgetPeer(p)
			errs = append(errs, fmt.Errorf("add peer %q (%s): %w", p.Name, p.Key(), err))
			continue
		}
		if p.Interface != "" {
			s.linkLocal[p.Name] = ap.Conf.NeighborAddress
		}
		s.peers[p.Name] = p
		s.log.Info("BGP peer added", "peer", p.Name, "address", p.Key(), "port", p.PortOrDefault(), "myASN", p.EffectiveASN(), "peerASN", p.PeerASN)
	}
	// 4. After a (re)start, announce the desired paths.
	if len(s.paths) == 0 && len(s.desiredPaths) > 0 {
		errs = append(errs, s.applyPaths(ctx))
	}
	return errors.Join(errs...)
}

// ResetPeer implements bgp.Speaker with gobgp's hard reset: a Cease
// NOTIFICATION, Administrative Reset (RFC 4486 §4), with reason as the
// RFC 8203 communication where the link still carries it, closes the
// session at once; gobgp's FSM then reconnects on its own (ConnectRetry).
func (s *Speaker) ResetPeer(ctx context.Context, name, reason string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return bgp.ErrClosed
	}
	p, applied := s.peers[name]
	if !applied || !s.started {
		return fmt.Errorf("reset peer %q: not applied", name)
	}
	addr := p.Address.String()
	if p.Interface != "" {
		addr = s.linkLocal[name]
	}
	if err := s.srv.ResetPeer(ctx, &api.ResetPeerRequest{Address: addr, Communication: reason}); err != nil {
		return fmt.Errorf("reset peer %q (%s): %w", name, addr, err)
	}
	s.log.Warn("BGP session reset", "peer", name, "address", p.Key(), "reason", reason)
	return nil
}

func globalASN(peers []bgp.PeerConfig) uint32 {
	p := slices.MinFunc(peers, func(a, b bgp.PeerConfig) int { return strings.Compare(a.Name, b.Name) })
	return p.EffectiveASN()
}

func (s *Speaker) deletePeer(ctx context.Context, p bgp.PeerConfig) error {
	// An interface peer is deleted by the link-local address it was added
	// with: gobgp would resolve the interface again, and fail once the
	// router's neighbor entry is gone.
	req := &api.DeletePeerRequest{Address: p.Address.String()}
	if p.Interface != "" {
		req = &api.DeletePeerRequest{Address: s.linkLocal[p.Name]}
	}
	if err := s.srv.DeletePeer(ctx, req); err != nil {
		return fmt.Errorf("delete peer %q (%s): %w", p.Name, p.Key(), err)
	}
	delete(s.peers, p.Name)
	delete(s.linkLocal, p.Name)
	s.forgetPeer(p)
	s.log.Info("BGP peer removed", "peer", p.Name, "address", p.Key())
	return nil
}

func (s *Speaker) forgetPeer(p bgp.PeerConfig) {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	if s.byKey[p.Key()] == p.Name {
		delete(s.byKey, p.Key())
	}
	delete(s.runtime, p.Name)
	s.updateDown()
}

// SetPaths implements bgp.Speaker. paths are merged with bgp.MergePaths
// (callers may pass unmerged reasons); a local-pref conflict is logged.
// Before BGP has started the paths are kept and announced on start.
// Add and update use AddPath (an update replaces the previous path for the
// prefix) and records the returned UUID; withdrawal uses DeletePath with
// the announced path (see withdraw), never an empty request.
//
// Paths are checked one by one (bgp.ValidatePaths): a refused path never
// blocks the others, which are applied (withdrawals too). A refused prefix
// that has no valid path keeps the path last set for it, if any (the last
// good state stays in force). The refusals come back as a
// *bgp.InvalidPathsError, joined with the errors of applying, if any
// (those wrap bgp.ErrNotApplied).
func (s *Speaker) SetPaths(ctx context.Context, paths []bgp.Path) error {
	valid, refused := bgp.ValidatePaths(paths)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return bgp.ErrClosed
	}
	if refused != nil {
		valid = bgp.KeepLastGood(valid, refused, s.desiredPaths)
		s.log.Warn("BGP paths refused, the others are applied", "refused", len(refused.Refused), "error", refused)
	}
	merged, conflicts := bgp.MergePaths(valid)
	for _, c := range conflicts {
		s.log.Warn("conflicting local-pref for prefix, using the highest", "prefix", c)
	}
	s.desiredPaths = merged
	var err error
	if s.started {
		if err = s.applyPaths(ctx); err != nil {
			err = fmt.Errorf("%w: %w", bgp.ErrNotApplied, err)
		}
	}
	switch {
	case refused == nil:
		return err
	case err == nil:
		return refused
	}
	return errors.Join(refused, err)
}

// applyPaths makes gobgp's local paths equal s.desiredPaths. s.mu is held.
func (s *Speaker) applyPaths(ctx context.Context) error {
	applied := make([]bgp.Path, 0, len(s.paths))
	for _, p := range s.paths {
		applied = append(applied, p)
	}
	d := bgp.DiffPaths(s.desiredPaths, applied)
	var errs []error
	for _, p := range d.Delete {
		errs = append(errs, s.withdraw(ctx, p.Prefix))
	}
	for _, p := range slices.Concat(d.Update, d.Add) {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		ap, err := toAPIPath(p, s.asn)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := s.srv.AddPath(ctx, &api.AddPathRequest{TableType: api.TableType_GLOBAL, Path: ap}); err != nil {
			errs = append(errs, fmt.Errorf("announce %s: %w", p.Prefix, err))
			continue
		}
		s.paths[p.Prefix] = p
	}
	if n := len(d.Add) + len(d.Update) + len(d.Delete); n > 0 {
		s.log.Debug("BGP paths applied", "added", len(d.Add), "updated", len(d.Update), "withdrawn", len(d.Delete))
	}
	return errors.Join(errs...)
}

// withdraw removes one announced prefix. It sends DeletePath with the
// exact path that was announced (family + NLRI + attributes), never an
// empty request (which would withdraw every local path). It does not use
// the UUID AddPath returns: in gobgp v3.37 a UUID DeletePath scans the whole
// global RIB per call, which made withdrawing 10,000 prefixes take minutes;
// the path form is a direct lookup.
func (s *Speaker) withdraw(ctx context.Context, prefix netip.Prefix) error {
	ap, ok := s.paths[prefix]
	if !ok {
		return fmt.Errorf("withdraw %s: not announced", prefix)
	}
	p, err := toAPIPath(ap, s.asn)
	if err != nil {
		return fmt.Errorf("withdraw %s: %w", prefix, err)
	}
	if p == nil || p.Nlri == nil {
		return fmt.Errorf("withdraw %s: empty path refused (would withdraw everything)", prefix)
	}
	if err := s.srv.DeletePath(ctx, &api.DeletePathRequest{TableType: api.TableType_GLOBAL, Family: p.Family, Path: p}); err != nil {
		return fmt.Errorf("withdraw %s: %w", prefix, err)
	}
	delete(s.paths, prefix)
	return nil
}

// onEvent is gobgp's WatchEvent callback (gobgp goroutine). It only updates
// small maps under stateMu and calls OnPeerState.
func (s *Speaker) onEvent(r *api.WatchEventResponse) {
	pe := r.GetPeer()
	if pe == nil || pe.Type != api.WatchEventResponse_PeerEvent_STATE || pe.Peer == nil {
		return
	}
	conf, st := pe.Peer.GetConf(), pe.Peer.GetState()
	key := conf.GetNeighborAddress()
	if conf.GetNeighborInterface() != "" {
		key = "%" + conf.GetNeighborInterface()
	}
	if a, err := netip.ParseAddr(key); err == nil {
		key = a.String()
	}
	state := sessionState(st.GetSessionState())
	s.stateMu.Lock()
	name, ok := s.byKey[key]
	rt := s.runtime[name]
	if !ok || rt == nil {
		s.stateMu.Unlock()
		return
	}
	if state == bgp.StateEstablished && rt.state != bgp.StateEstablished {
		rt.established++
		rt.limitFamily, rt.limitHeld = "", false
	}
	prev := rt.state
	rt.state = state
	s.updateDown()
	snap := bgp.PeerState{Name: name, Peer: rt.label, State: state, EstablishedCount: rt.established,
		LastError: rt.lastError, LastErrorTime: rt.lastErrorTime}
	if state != bgp.StateEstablished && rt.limitFamily != "" {
		snap.PrefixLimitFamily, snap.PrefixLimit = rt.limitFamily, s.opts.MaxReceivedPrefixes
		// Normally started by the Cease NOTIFICATION itself
		// (gobgpWarning); here if gobgp could not send it.
		s.holdDownLocked(name, rt)
	}
	s.stateMu.Unlock()
	if prev != state {
		s.log.Info("BGP session state", "peer", name, "address", key, "state", state.String(), "previous", prev.String())
	}
	if s.opts.OnPeerState != nil {
		s.opts.OnPeerState(snap)
	}
}

// holdDownLocked starts holdDownAfterPrefixLimit for the session of peer
// name (runtime rt), once per teardown. stateMu must be held.
func (s *Speaker) holdDownLocked(name string, rt *peerRuntime) {
	if rt.limitHeld {
		return
	}
	rt.limitHeld = true
	go s.holdDownAfterPrefixLimit(name, rt)
}

// holdDownAfterPrefixLimit replaces the gobgp neighbor of peer name, whose
// session gobgp closed at the prefix limit, by the same neighbor
// administratively down, and enables it again after PrefixLimitRestart
// (restartAfterPrefixLimit). Nothing happens if the peer no longer has the
// runtime rt (removed, recreated or closed since).
//
// Why not leave the closed neighbor to gobgp (v3.37): its receive loop
// queues every UPDATE the router sent before the teardown, without bound,
// in the same queue as the session's state change, and the server goroutine
// works through all of them first, each stored in the Adj-RIB-In and
// followed by a count of that whole table (peer.doPrefixLimit). For a
// router sending 200k paths over loopback the queue held ~37k UPDATEs: the
// session stayed Established for gobgp (and Herald) for more than 6 minutes
// while the table it refused grew to its full size. Deleting the neighbor
// discards the queue at once (gobgp drains a deleted neighbor's queue
// without processing it) and drops its Adj-RIB-In.
func (s *Speaker) holdDownAfterPrefixLimit(name string, rt *peerRuntime) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stateMu.Lock()
	same := s.runtime[name] == rt
	family := rt.limitFamily
	s.stateMu.Unlock()
	p, applied := s.peers[name]
	if s.closed || !s.started || !same || !applied {
		return
	}
	addr := p.Address.String()
	if p.Interface != "" {
		addr = s.linkLocal[name]
	}
	ctx := context.Background()
	restart := s.opts.PrefixLimitRestart
	if restart <= 0 {
		restart = DefaultPrefixLimitRestart
	}
	s.log.Warn("BGP session closed: the peer sent more prefixes than the received-prefix limit (Herald uses no received routes: filter what the router sends to the speakers, or raise --bgp-max-received-prefixes)",
		"peer", name, "address", p.Key(), "family", family, "limit", s.opts.MaxReceivedPrefixes, "retryIn", restart.String())
	if err := s.srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: addr}); err != nil {
		// The neighbor stays as gobgp left it: down ("prefix count")
		// until the restart enables it.
		s.log.Warn("BGP neighbor closed at the prefix limit not replaced, its queued updates are still processed", "peer", name, "address", addr, "error", err)
	} else {
		ap := toAPIPeer(p, s.opts.MaxReceivedPrefixes)
		ap.Conf.NeighborAddress = addr
		ap.Conf.AdminDown = true
		if err := s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: ap}); err != nil {
			// Forgotten: the next SetPeers adds it again.
			delete(s.peers, name)
			delete(s.linkLocal, name)
			s.forgetPeer(p)
			s.log.Error("BGP peer not added again after the prefix limit (added by the next configuration change)", "peer", name, "address", addr, "error", err)
			return
		}
	}
	time.AfterFunc(restart, func() { s.restartAfterPrefixLimit(name, rt, addr) })
}

// restartAfterPrefixLimit enables the neighbor at addr again after a
// prefix-limit teardown, if peer name still has the runtime rt (not
// removed, recreated or closed since).
func (s *Speaker) restartAfterPrefixLimit(name string, rt *peerRuntime, addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stateMu.Lock()
	same := s.runtime[name] == rt
	s.stateMu.Unlock()
	if s.closed || !s.started || !same {
		return
	}
	if err := s.srv.EnablePeer(context.Background(), &api.EnablePeerRequest{Address: addr}); err != nil {
		s.log.Warn("BGP session not reopened after the prefix limit", "peer", name, "address", addr, "error", err)
		return
	}
	s.log.Info("BGP session reopened after the prefix limit", "peer", name, "address", addr)
}

// gobgpWarning sees gobgp's warnings (gobgp goroutine). gobgp v3 reports an
// exceeded prefix limit only in its log: "prefix limit reached" with the
// neighbor address (Key) and Family, and without Pct (with Pct it is the
// early warning at prefixLimitWarnPct); the session state change follows.
//
// The Cease NOTIFICATION gobgp sends at the limit ("sent notification",
// code 6 subcode 1, logged once it is written, before the connection is
// closed) starts holdDownAfterPrefixLimit. This runs on gobgp goroutines
// (the server's, a session's sender): it never calls gobgp.
func (s *Speaker) gobgpWarning(msg string, f gobgplog.Fields) {
	if msg == "sent notification" || msg == "received notification" {
		s.recordNotification(msg, f)
		if code, _ := f["Code"].(uint8); msg == "sent notification" && code == gobgppkt.BGP_ERROR_CEASE {
			if sub, _ := f["Subcode"].(uint8); sub == gobgppkt.BGP_ERROR_SUB_MAXIMUM_NUMBER_OF_PREFIXES_REACHED {
				s.stateMu.Lock()
				if name, rt := s.peerByLogKey(f); rt != nil {
					s.holdDownLocked(name, rt)
				}
				s.stateMu.Unlock()
			}
		}
		return
	}
	if msg != "prefix limit reached" {
		return
	}
	if _, early := f["Pct"]; early {
		return
	}
	family := fmt.Sprint(f["Family"])
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	if rt := s.runtimeByLogKey(f); rt != nil {
		rt.limitFamily = family
	}
}

// runtimeByLogKey returns the runtime of the peer named by a gobgp log
// line's Key (the neighbor address), or nil. stateMu must be held. gobgp
// logs an unnumbered neighbor under its discovered link-local address, so
// those are not found.
func (s *Speaker) runtimeByLogKey(f gobgplog.Fields) *peerRuntime {
	_, rt := s.peerByLogKey(f)
	return rt
}

// peerByLogKey is runtimeByLogKey with the peer's name.
func (s *Speaker) peerByLogKey(f gobgplog.Fields) (string, *peerRuntime) {
	key, _ := f["Key"].(string)
	if a, err := netip.ParseAddr(key); err == nil {
		key = a.String()
	}
	if name, ok := s.byKey[key]; ok {
		return name, s.runtime[name]
	}
	return "", nil
}

// updateDown recomputes connecting. stateMu must be held.
func (s *Speaker) updateDown() {
	down := false
	for _, rt := range s.runtime {
		switch rt.state {
		case bgp.StateUnknown, bgp.StateIdle, bgp.StateConnect, bgp.StateActive:
			down = true
		}
	}
	s.connecting.Store(down)
}

// gobgpDebug sees gobgp's debug messages (gobgp goroutine): "failed to
// connect" is a session's TCP connection error (refused, timed out, no
// route), which gobgp reports nowhere else. ENODEV on a peer with a VRF is
// SO_BINDTODEVICE failing on the VRF's name: the text names the VRF.
func (s *Speaker) gobgpDebug(msg string, f gobgplog.Fields) {
	if msg != "failed to connect" {
		return
	}
	text := fmt.Sprintf("connect: %v", f["Error"])
	if err, ok := f["Error"].(error); ok && errors.Is(err, syscall.ENODEV) {
		s.stateMu.Lock()
		if rt := s.runtimeByLogKey(f); rt != nil && rt.vrf != "" {
			text += fmt.Sprintf(" (spec.vrf %q: no such VRF device on this node, or a kernel without VRF support)", rt.vrf)
		}
		s.stateMu.Unlock()
	}
	s.setLastError(f, text)
}

// gobgpInfo sees gobgp's info messages (gobgp goroutine): "Peer Down"
// gives the reason an Established session ended. A NOTIFICATION is
// recorded in more detail from its own warning (recordNotification);
// "dying" (Herald deleted the neighbor itself) is not recorded.
func (s *Speaker) gobgpInfo(msg string, f gobgplog.Fields) {
	if msg != "Peer Down" {
		return
	}
	reason := fmt.Sprint(f["Reason"])
	if strings.HasPrefix(reason, "notification-") {
		return
	}
	if reason == "dying" {
		// gobgp's neighbor was deleted or its server stopped: only Herald
		// does that (a changed BGPPeer recreates the neighbor, a router ID
		// change restarts gobgp, the prefix-limit hold-down replaces it).
		// gobgp logs it after DeletePeer returned, when the new neighbor
		// with the same address may be registered: it is not the
		// router's error, and not the new session's.
		return
	}
	s.setLastError(f, "session down: "+reason)
}

// setLastError records text as the last error of the peer of f's Key.
func (s *Speaker) setLastError(f gobgplog.Fields, text string) {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	if rt := s.runtimeByLogKey(f); rt != nil && rt.lastError != text {
		// The same error again (a connection refused on every retry)
		// keeps the time it first happened.
		rt.lastError, rt.lastErrorTime = text, time.Now()
	}
}

// recordNotification records a NOTIFICATION (RFC 4271 §4.5) that gobgp
// logged as "sent notification" or "received notification": its error
// code and subcode, by name and number, and the shutdown communication
// of a Cease (RFC 8203) when there is one.
//
// gobgp v3.37 logs a NOTIFICATION in two shapes: with Code and Subcode
// (written by the session's sender, and every one received), or, for the
// errors its FSM finds in a received message (the router's OPEN: AS
// mismatch, bad BGP identifier, unacceptable hold time; a malformed
// UPDATE; the hold timer), with only Data, the *bgp.MessageError that
// caused it (fsm.go, sendNotificationFromErrorMsg). The second shape
// carries gobgp's explanation, appended after the codes: "notification
// sent: code 2(open) subcode 2(bad peer as): as number mismatch expected
// 64999, received 64500".
func (s *Speaker) recordNotification(msg string, f gobgplog.Fields) {
	dir := "received"
	if msg == "sent notification" {
		dir = "sent"
	}
	code, okc := f["Code"].(uint8)
	sub, oks := f["Subcode"].(uint8)
	if okc && oks {
		s.setLastError(f, notificationText(dir, code, sub, fmt.Sprint(f["Communicated-Reason"])))
		return
	}
	var me *gobgppkt.MessageError
	if err, ok := f["Data"].(error); !ok || !errors.As(err, &me) {
		return
	}
	text := notificationText(dir, me.TypeCode, me.SubTypeCode, "")
	if me.Message != "" {
		text += ": " + me.Message
	}
	s.setLastError(f, text)
}

// notificationText formats a NOTIFICATION for PeerState.LastError, e.g.
// `notification received: code 6(cease) subcode 2(administrative shutdown): "maintenance"`
// (gobgp's names of the RFC 4271 §4.5 and RFC 4486 codes).
// communication "" or "<nil>" (none) is left out.
func notificationText(dir string, code, subcode uint8, communication string) string {
	text := fmt.Sprintf("notification %s: %s", dir, gobgppkt.NewNotificationErrorCode(code, subcode).String())
	if communication != "" && communication != "<nil>" {
		text += fmt.Sprintf(": %q", communication)
	}
	return text
}

// PeerStates implements bgp.Speaker: one entry per applied peer, sorted by
// name, from gobgp's ListPeer (with advertised counts) and the event counts.
func (s *Speaker) PeerStates() []bgp.PeerState {
	s.mu.Lock()
	peers := make(map[string]bgp.PeerConfig, len(s.peers))
	for n, p := range s.peers {
		peers[n] = p
	}
	started := s.started
	s.mu.Unlock()
	out := make([]bgp.PeerState, 0, len(peers))
	live := map[string]*api.Peer{}
	if started {
		_ = s.srv.ListPeer(context.Background(), &api.ListPeerRequest{EnableAdvertised: true}, func(p *api.Peer) {
			k := p.GetConf().GetNeighborAddress()
			if i := p.GetConf().GetNeighborInterface(); i != "" {
				k = "%" + i
			}
			if a, err := netip.ParseAddr(k); err == nil {
				k = a.String()
			}
			live[k] = p
		})
	}
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	for name, cfg := range peers {
		ps := bgp.PeerState{Name: name, Peer: cfg.MetricLabel(), State: bgp.StateUnknown}
		if rt := s.runtime[name]; rt != nil {
			ps.EstablishedCount = rt.established
			ps.LastError, ps.LastErrorTime = rt.lastError, rt.lastErrorTime
		}
		if p := live[cfg.Key()]; p != nil {
			ps.State = sessionState(p.GetState().GetSessionState())
			ps.UpdatesSent = p.GetState().GetMessages().GetSent().GetUpdate()
			if up := p.GetTimers().GetState().GetUptime(); up != nil && ps.State == bgp.StateEstablished {
				ps.Since = up.AsTime()
			}
			for _, as := range p.GetAfiSafis() {
				ps.Advertised += as.GetState().GetAdvertised()
				ps.Received += as.GetState().GetReceived()
			}
		}
		out = append(out, ps)
	}
	slices.SortFunc(out, func(a, b bgp.PeerState) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// pathsPerPeer counts the desired paths each applied peer should receive.
func (s *Speaker) pathsPerPeer() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := make(map[string]int, len(s.peers))
	for _, p := range s.desiredPaths {
		for name, cfg := range s.peers {
			if cfg.Receives(p) {
				n[name]++
			}
		}
	}
	return n
}

// Close implements bgp.Speaker: it stops BGP (Cease NOTIFICATION to every
// established peer, so routers withdraw the routes immediately; graceful
// restart only applies when the process dies without Close).
func (s *Speaker) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.stop(ctx)
}

// checkOneNeighborPerAddress refuses two peers with the same neighbor
// address (or interface) in different VRFs with bgp.ErrUnsupported: gobgp
// keys its neighbors by address alone (BgpServer.neighborMap), so the
// second AddPeer would fail. bgp.ValidatePeers allows it (other backends,
// such as FRR, have a neighbor table per VRF).
func checkOneNeighborPerAddress(peers []bgp.PeerConfig) error {
	seen := make(map[string]bgp.PeerConfig, len(peers))
	var errs []error
	for _, p := range peers {
		if o, ok := seen[p.Key()]; ok && o.VRF != p.VRF {
			errs = append(errs, fmt.Errorf("peers %q (VRF %q) and %q (VRF %q): neighbor %s in two VRFs: gobgp keys neighbors by address alone: %w", o.Name, o.VRF, p.Name, p.VRF, p.Key(), bgp.ErrUnsupported))
			continue
		}
		seen[p.Key()] = p
	}
	return errors.Join(errs...)
}

package speaker

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/herald-lb/herald/internal/announce"
	"github.com/herald-lb/herald/internal/bgp"
	"github.com/herald-lb/herald/internal/config"
	"github.com/herald-lb/herald/internal/k8s/configload"
)

// reconcileConfig reloads this node's configuration snapshot, reports it,
// re-applies the BGP peers when they changed, and re-decides every Service
// when the snapshot changed semantically, or always when all is set.
func (s *Controller) reconcileConfig(ctx context.Context, all bool) error {
	// Read before the cluster view, so a rejoin counted later is handled by
	// the next pass (its Changes notification queues one).
	var rejoins uint64
	if s.opts.Members != nil {
		rejoins = s.opts.Members.Rejoins()
	}
	res, err := configload.Read(ctx, s.client, s.opts.Namespace)
	if err != nil {
		s.log.Error("reading the configuration failed", "error", err)
		return errors.Join(err, s.report(ctx, err, true))
	}
	snap, outcome, berr := s.tracker.Update(res)
	if s.cfgMetric != nil {
		s.cfgMetric.Observe(snap, outcome)
	}
	switch outcome {
	case configload.Rejected:
		msg := "configuration rejected, the last valid one stays in force"
		if snap == nil {
			msg = "configuration rejected, no configuration in force yet: announcing nothing, not ready, not a memberlist member"
		}
		s.log.Error(msg, "error", configload.Summary(berr), "transient", config.IsTransient(berr))
	case configload.Changed:
		s.log.Info("configuration loaded", "config", snap.String())
	}
	// Objects left out for a transient reference (a missing password
	// Secret): the rest of the configuration is in force without them.
	var dropped []*config.TransientError
	if outcome != configload.Rejected && berr != nil {
		_, dropped = config.Split(berr)
		s.log.Warn("configuration in force without some objects, waiting for what they reference",
			"error", configload.Summary(berr))
	}
	repErr := s.report(ctx, berr, false)
	if snap != nil {
		// Live for election only from now on: see Members.Activate.
		if s.opts.Members != nil {
			s.opts.Members.Activate()
		}
		// Ready from now on (see Ready), once memberlist is activated.
		s.configured.Store(true)
	}
	view, err := s.clusterView(ctx)
	if err != nil {
		return errors.Join(err, repErr)
	}
	peerErr := s.syncPeers(ctx, snap, view, dropped)
	var allErr error
	if snap != nil && (all || outcome == configload.Changed) {
		allErr = s.reconcileAll(ctx, snap, view)
		if allErr == nil && view.joined {
			s.handover.settled = true // start-up guesses of previous holders end
		}
		s.reannounceAfterRejoin(rejoins, view)
	}
	return errors.Join(repErr, peerErr, allErr)
}

// reannounceAfterRejoin re-sends one gratuitous burst for every layer 2
// address this node owns when a member that had been declared failed came
// back (rejoins grew since the last call): during a partition the clients
// on the other side followed that side's gratuitous ARP/NA for the
// addresses both sides claimed, and an owner whose announcement did not
// change would otherwise never tell them to come back. Called after
// reconcileAll, so the owned set is the one decided with the healed
// membership.
func (s *Controller) reannounceAfterRejoin(rejoins uint64, view *clusterView) {
	if s.opts.Members == nil || rejoins <= s.rejoinsHandled || !view.joined {
		return
	}
	s.rejoinsHandled = rejoins
	r, ok := s.opts.L2.(reannouncer)
	if !ok {
		return
	}
	s.log.Info("a failed speaker is back (partition healed): re-announcing owned layer 2 addresses", "rejoins", rejoins)
	r.Reannounce()
}

func (s *Controller) report(ctx context.Context, err error, infra bool) error {
	s.reporter.Owner = s.ownerRef(ctx)
	if rerr := s.reporter.Report(ctx, err, infra); rerr != nil {
		s.log.Error("writing ConfigurationState failed", "error", rerr)
		return rerr
	}
	return nil
}

// reconcileAll re-decides every Service in the cache and every Service this
// node has status objects or applied state for.
func (s *Controller) reconcileAll(ctx context.Context, snap *config.Snapshot, view *clusterView) error {
	if s.balanced != nil {
		// Every Service is decided below: what was pending is covered.
		s.balanced.takePending()
	}
	// The cached records, read only: no copy of every Service per pass.
	svcs := s.allServices()
	if s.balanced != nil {
		if _, err := s.recomputeBalanced(ctx, snap, view, svcs); err != nil {
			return err
		}
	}
	// This node's status objects are listed once, at start-up (to adopt or
	// delete what an earlier speaker left); after that the status writer's
	// records are current: its watch reports whatever someone else does to
	// them (statuswatch.go).
	var existing map[string]*existingStatus
	if !s.statusListed {
		// From here on the status writer's watch handles objects of
		// Services it has no entry for; those listed below are decided
		// in this pass.
		s.status.start()
		var err error
		if existing, err = s.listOwnStatus(ctx); err != nil {
			return err
		}
		s.statusListed = true
	}
	keys := map[string]bool{}
	for _, r := range svcs {
		keys[r.svc.Key] = true
	}
	for k := range existing {
		keys[k] = true
	}
	for k := range s.services {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	var errs []error
	for _, k := range sorted {
		var ex *existingStatus
		if existing != nil {
			if ex = existing[k]; ex == nil {
				ex = &existingStatus{}
			}
		}
		if _, err := s.reconcileService(ctx, snap, view, k, ex); err != nil {
			errs = append(errs, err)
		}
	}
	s.log.Debug("re-decided every Service", "services", len(sorted), "errors", len(errs))
	return errors.Join(errs...)
}

// syncPeers translates this node's peers (announce.Sessions) and applies
// them when they differ from the applied ones. dropped are the
// configuration's left-out objects: a BGPPeer among them is reported (log,
// peerNotApplied event, once per message).
func (s *Controller) syncPeers(ctx context.Context, snap *config.Snapshot, view *clusterView, dropped []*config.TransientError) error {
	if s.opts.BGP == nil || snap == nil || view.self == nil {
		return nil
	}
	nodeLabels := labels.Set(view.self.Labels)
	nodeIP := nodeIPv4(view.self)
	routerID := announce.RouterID(snap, s.opts.NodeName, nodeLabels, nodeIP)
	desired := announce.Sessions(snap, s.opts.NodeName, nodeLabels, nodeIP)
	seen := map[string]bool{}
	for _, e := range dropped {
		if e.Kind != config.KindBGPPeer {
			continue
		}
		seen[e.Name] = true
		if s.peerErrors[e.Name] != e.Error() {
			s.peerErrors[e.Name] = e.Error()
			s.log.Error("BGP peer not applied", "peer", e.Name, "error", e)
			s.peerEvent(ctx, e.Name, corev1.EventTypeWarning, reasonPeerNotApplied, "not applied on node %s: %v (waiting for it)", s.opts.NodeName, e)
		}
	}
	for _, p := range desired {
		seen[p.Name] = true
		delete(s.peerErrors, p.Name)
	}
	for name := range s.peerErrors {
		if !seen[name] {
			delete(s.peerErrors, name)
		}
	}
	bfdSessions := announce.BFDSessions(snap, nodeLabels)
	withBFD := map[string]bool{}
	for _, b := range bfdSessions {
		withBFD[b.Peer] = true
	}
	if s.peersApplied && bgp.DiffPeers(desired, s.appliedPeers).Empty() {
		s.sessions.setPeers(desired, withBFD)
		return s.syncBFD(bfdSessions)
	}
	// The session writer learns the peers before BGP applies them: the
	// BGP speaker reports the state of a new or recreated session while
	// SetPeers runs (gobgp: Idle, then Active on the trigger goroutine),
	// and setPeers, which starts a session whose address changed as
	// Unknown, must not overwrite it afterwards (a session retrying in
	// Active reports no further change). If SetPeers fails, the objects
	// already show the desired peers (a peer BGP could not add stays
	// Unknown) and SetPeers is retried.
	s.sessions.setPeers(desired, withBFD)
	if err := s.opts.BGP.SetPeers(ctx, desired); err != nil {
		s.peersApplied = false
		s.log.Error("applying BGP peers failed", "error", err)
		return fmt.Errorf("apply BGP peers: %w", err)
	}
	bfdErr := s.syncBFD(bfdSessions)
	names := make([]string, 0, len(desired))
	for _, p := range desired {
		names = append(names, p.Name)
	}
	s.log.Info("BGP peers applied", "peers", names, "routerID", routerID)
	s.appliedPeers, s.peersApplied = desired, true
	return bfdErr
}

// nodeIPv4 is announce.NodeIPv4: the router ID fallback.
func nodeIPv4(n *corev1.Node) netip.Addr { return announce.NodeIPv4(n) }

// ownerRef returns the speaker Pod as an owner reference, or nil when
// PodName is unset or the Pod cannot be read (retried on the next call).
func (s *Controller) ownerRef(ctx context.Context) *metav1.OwnerReference {
	s.ownerMu.Lock()
	defer s.ownerMu.Unlock()
	if s.owner != nil || s.opts.PodName == "" {
		return s.owner
	}
	owner, err := configload.PodOwner(ctx, s.apiReader, s.opts.Namespace, s.opts.PodName)
	if err != nil {
		s.log.Debug("speaker Pod not readable, objects are written without owner", "pod", s.opts.PodName, "error", err)
		return nil
	}
	s.owner = owner
	return s.owner
}

package speaker

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/announce"
	"github.com/herald-lb/herald/internal/config"
)

// Protocol names used in events, logs and metallb_speaker_announced.
const (
	protoL2  = "layer2"
	protoBGP = "bgp"
)

// Event reasons on Services (MetalLB's).
const (
	reasonNodeAssigned   = "nodeAssigned"
	reasonAnnounceFailed = "announceFailed"
)

// Reasons for not announcing in layer 2 that the glue adds to the
// decision's (logs, herald_speaker_not_announced).
const (
	// reasonMemberlistNotJoined: memberlist's start-up gate is closed.
	reasonMemberlistNotJoined = "memberlistNotJoined"
	// reasonInterfacesNotListed: the layer 2 announcer has not listed the
	// node's interfaces yet (L2Announcer.EligibleInterfaces is nil).
	reasonInterfacesNotListed = "interfacesNotListed"
)

// serviceState is what the speaker applied for one Service: only what the
// next decision of the Service compares against (about 200 B for a Service
// with one IP).
type serviceState struct {
	ips       []netip.Addr
	l2        []announce.L2Target
	l2Applied bool
	// announced: the (protocol, IP)s announced (metallb_speaker_announced),
	// sorted; the protocols with one have had their nodeAssigned event.
	announced []announcedIP
	// notAnnounced: why each (protocol, IP) is not announced, as last
	// reported (metric, logs, announceFailed events), sorted.
	notAnnounced []notAnnouncedRecord
	// waiting: the layer 2 addresses this node won and waits to answer
	// (hand-over), with when the wait started.
	waiting map[netip.Addr]time.Time
}

// notAnnounced is the reason a (protocol, IP) of a Service is not announced
// on this node, as one decision reports it (serviceState keeps a
// notAnnouncedRecord of it).
type notAnnounced struct {
	reason, detail, winner string
}

// clusterView is the part of the input shared by every Service decided in
// one pass.
type clusterView struct {
	nodes []announce.Node
	live  map[string]bool
	// joined: memberlist's start-up gate is open (always true without
	// memberlist). Until then layer 2 takes over nothing: Live holds only
	// the members seen so far, and an election on it would make this node
	// win the addresses of speakers it has not heard of yet.
	joined bool
	self   *corev1.Node // nil when this node is not in the cache
	// ifaces: the layer 2 announcer's eligible interfaces, nil when layer 2
	// is off or the announcer has not listed them yet (layer 2 then takes
	// over nothing).
	ifaces *announce.NodeInterfaces
}

func (s *Controller) clusterView(ctx context.Context) (*clusterView, error) {
	var list corev1.NodeList
	// Read only (v.self included): no copy of every Node per decision.
	if err := s.client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list Nodes: %w", err)
	}
	v := &clusterView{joined: true}
	if s.opts.L2 != nil {
		v.ifaces = s.opts.L2.EligibleInterfaces()
	}
	for i := range list.Items {
		n := &list.Items[i]
		v.nodes = append(v.nodes, announce.NodeFromK8s(n))
		if n.Name == s.opts.NodeName {
			v.self = n
		}
	}
	if s.opts.Members != nil {
		// Joined before Live: a Live read after the gate opened is complete.
		v.joined = s.opts.Members.Joined()
		v.live = s.opts.Members.Live()
		if s.handover != nil {
			s.handover.noteSenders(s.opts.NodeName, s.opts.Members.ReleaseSenders(), v.live)
		}
	} else {
		v.live = announce.LiveFromNodeConditions(v.nodes)
	}
	return v, nil
}

// existingStatus are status objects listed by reconcileAll for one Service.
type existingStatus struct {
	l2  []v1beta1.ServiceL2Status
	bgp []v1beta1.ServiceBGPStatus
}

// reconcileService decides one Service ("namespace/name") and applies the
// decision. existing, when non-nil, are this node's status objects of the
// Service as just listed. BGP paths go to the path applier and status
// objects to the status writer, both in their own goroutines, so this
// returns as soon as layer 2 is applied.
func (s *Controller) reconcileService(ctx context.Context, snap *config.Snapshot, view *clusterView, key string, existing *existingStatus) (reconcile.Result, error) {
	nsName, ok := splitKey(key)
	if !ok {
		return reconcile.Result{}, nil
	}
	log := s.log.With("service", key)
	st := s.services[key]
	if st == nil {
		st = &serviceState{}
		s.services[key] = st
	}

	var d announce.Decision
	var input *announce.Input  // nil for a deleted Service
	svc, err := s.service(key) // read only
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("get Service %s: %w", key, err)
	}
	found := svc != nil
	if !found {
		d = announce.Decision{Service: key, Reason: announce.ReasonServiceDeleted}
	} else {
		in := announce.Input{
			Config:  snap,
			Node:    s.opts.NodeName,
			Nodes:   view.nodes,
			Live:    view.live,
			Service: svc.svc,
			Options: s.opts.Announce,
			// Decide checks that the layer 2 winner has one of the
			// advertisements' interfaces (noMatchingInterface).
			Interfaces: view.ifaces,
			// The balanced election's winners (nil: the plain election).
			L2Winners: s.l2Winners(),
		}
		if in.Endpoints, err = s.endpoints(ctx, svc.namespace, svc.name); err != nil {
			return reconcile.Result{}, err
		}
		if in.Sharing, err = s.sharing(ctx, &in.Service); err != nil {
			return reconcile.Result{}, err
		}
		if len(st.ips) > 0 && !slices.Equal(st.ips, in.Service.IPs) {
			log.Debug("service IPs changed, withdrawing the old ones", "reason", announce.ReasonLoadBalancerIPChanged.String(),
				"old", st.ips, "new", in.Service.IPs)
		}
		st.ips = in.Service.IPs
		d = announce.Decide(in)
		input = &in
	}
	s.logDecision(log, &d)

	// Layer 2. Nothing before memberlist's start-up gate opens (BGP has no
	// election and is not gated).
	var targets []announce.L2Target
	var gate notAnnounced
	var held map[announcement]notAnnounced
	if s.opts.L2 != nil {
		targets = d.L2Targets()
		switch {
		case len(targets) == 0:
		case !view.joined:
			gate = notAnnounced{reason: reasonMemberlistNotJoined,
				detail: "waiting to join the other speakers before taking over layer 2 addresses"}
		case view.ifaces == nil:
			gate = notAnnounced{reason: reasonInterfacesNotListed,
				detail: "the layer 2 announcer has not listed this node's interfaces yet"}
		}
		if gate.reason != "" {
			log.Debug("not announcing", "protocol", protoL2, "reason", gate.reason, "detail", gate.detail)
			targets = nil
		}
		// Addresses a live previous holder still answers wait for its
		// release (handover.go).
		targets, held = s.handOver(log, st, input, &d, targets, view.joined)
		if !st.l2Applied || !equalTargets(st.l2, targets) {
			if err := s.opts.L2.SetOwner(key, targets); err != nil {
				st.l2Applied = false
				if found {
					s.event(svc, corev1.EventTypeWarning, reasonAnnounceFailed, "failed to announce from node %s with protocol %s: %v", s.opts.NodeName, protoL2, err)
				}
				log.Error("layer 2 announcement failed", "error", err)
				return reconcile.Result{}, fmt.Errorf("announce %s in layer 2: %w", key, err)
			}
			st.l2, st.l2Applied = targets, true
		}
	}
	// BGP: handed to the path applier, which announces them at once.
	var bgpPeers []string
	if s.paths != nil {
		s.paths.set(key, d.BGPPaths())
		for _, ipd := range d.IPs {
			if ipd.BGP.Announce {
				for _, p := range ipd.BGP.Peers {
					if _, notApplied := s.peerErrors[p]; !notApplied {
						bgpPeers = append(bgpPeers, p)
					}
				}
			}
		}
		slices.Sort(bgpPeers)
		bgpPeers = slices.Compact(bgpPeers)
	}

	// Metric and events.
	var now []announcedIP
	for _, t := range targets {
		now = append(now, announcedIP{protocolL2, t.IP})
	}
	if s.opts.BGP != nil {
		for _, ipd := range d.IPs {
			if ipd.BGP.Announce {
				now = append(now, announcedIP{protocolBGP, ipd.IP})
			}
		}
	}
	sortAnnounced(now)
	now = slices.Compact(now)
	prev := st.announced
	if !slices.Equal(prev, now) {
		s.announced.set(key, prev, now)
		st.announced = now
	}
	for _, p := range []protocol{protocolL2, protocolBGP} {
		// Again when the addresses change while this node keeps announcing
		// (a new loadBalancerIP): the newest nodeAssigned event names what
		// the node announces, as MetalLB's withdraw and re-announce does.
		if hasProtocol(now, p) && (!hasProtocol(prev, p) || !slices.Equal(ipsOf(prev, p), ipsOf(now, p))) && found {
			s.event(svc, corev1.EventTypeNormal, reasonNodeAssigned, "%s", announce.NodeAssignedMessage(s.opts.NodeName, p.String(), ipsOf(now, p)))
			log.Info("announcing", "protocol", p.String(), "ips", ipsOf(now, p))
		}
		if !hasProtocol(now, p) && hasProtocol(prev, p) {
			log.Info("withdrawn", "protocol", p.String())
		}
	}
	na := s.notAnnouncedOf(&d, gate)
	for a, n := range held {
		na[a] = n
	}
	s.reportNotAnnounced(log, st, na, func(format string, args ...any) {
		if found {
			s.event(svc, corev1.EventTypeWarning, reasonAnnounceFailed, format, args...)
		}
	})

	// Status objects.
	var res reconcile.Result
	var l2Want *v1beta1.ServiceL2StatusStatus
	if len(targets) > 0 {
		l2Want = &v1beta1.ServiceL2StatusStatus{ServiceStatusCommon: s.common(nsName)}
		// The interfaces the targets are answered on: the announcer applies
		// SetOwner on its own goroutine, so its Interfaces may not list them
		// yet (the status then named no interface until a requeue); the
		// decision already checked them against the interfaces with an open
		// responder.
		var ifaces []string
		for _, t := range targets {
			ifaces = append(ifaces, view.ifaces.Answering(t)...)
		}
		slices.Sort(ifaces)
		for _, name := range slices.Compact(ifaces) {
			l2Want.Interfaces = append(l2Want.Interfaces, v1beta1.InterfaceInfo{Name: name})
		}
		if len(ifaces) == 0 {
			res.RequeueAfter = requeueSoon // not reached: Decide refuses such targets
		}
	}
	var bgpWant *v1beta1.ServiceBGPStatusStatus
	if hasProtocol(now, protocolBGP) {
		bgpWant = &v1beta1.ServiceBGPStatusStatus{ServiceStatusCommon: s.common(nsName), Peers: bgpPeers}
	}
	s.status.want(key, l2Want, bgpWant, existing, s.statusListed)
	if !found {
		s.forgetHandover(st)
		delete(s.services, key)
	}
	return res, nil
}

func (s *Controller) common(svc types.NamespacedName) v1beta1.ServiceStatusCommon {
	return v1beta1.ServiceStatusCommon{Node: s.opts.NodeName, ServiceName: svc.Name, ServiceNamespace: svc.Namespace}
}

// announceFailed emits announceFailed on the Service key, if it exists.
func (s *Controller) announceFailed(_ context.Context, key, protocol string, err error) {
	if svc, _ := s.service(key); svc != nil {
		s.event(svc, corev1.EventTypeWarning, reasonAnnounceFailed, "failed to announce from node %s with protocol %s: %v", s.opts.NodeName, protocol, err)
	}
}

// endpoints returns the endpoints of the Service ns/name's EndpointSlices,
// from the cache's sliceRecords. The result is read only: with one slice
// it is that record's own slice.
func (s *Controller) endpoints(_ context.Context, ns, name string) ([]announce.Endpoint, error) {
	s.endpointReads.Add(1)
	objs, err := s.slices.ByIndex(indexSliceService, ns+"/"+name)
	if err != nil {
		return nil, fmt.Errorf("list EndpointSlices of %s/%s: %w", ns, name, err)
	}
	if len(objs) == 1 {
		if r, ok := objs[0].(*sliceRecord); ok {
			return r.endpoints, nil
		}
	}
	var out []announce.Endpoint
	for _, o := range objs {
		if r, ok := o.(*sliceRecord); ok {
			out = append(out, r.endpoints...)
		}
	}
	return out, nil
}

// notAnnouncedOf returns why each (protocol, IP) of d is not announced on
// this node, for the enabled protocols; gate, when set, is why the layer 2
// targets of d were dropped. Service-level reasons use IP "". Services that
// are not Herald's (notLoadBalancer, otherLoadBalancerClass) and deleted
// ones have none.
func (s *Controller) notAnnouncedOf(d *announce.Decision, gate notAnnounced) map[announcement]notAnnounced {
	out := map[announcement]notAnnounced{}
	l2, bgp := s.opts.L2 != nil, s.opts.BGP != nil
	switch d.Reason {
	case announce.ReasonNone:
	case announce.ReasonNotLoadBalancer, announce.ReasonOtherLoadBalancerClass, announce.ReasonServiceDeleted:
		return out
	default:
		for p, on := range map[string]bool{protoL2: l2, protoBGP: bgp} {
			if on {
				out[announcement{p, ""}] = notAnnounced{reason: d.Reason.String()}
			}
		}
		return out
	}
	for _, ipd := range d.IPs {
		ip := ipd.IP.String()
		switch {
		case !l2:
		case !ipd.L2.Announce:
			out[announcement{protoL2, ip}] = notAnnounced{reason: ipd.L2.Reason.String(), detail: ipd.L2.Detail, winner: ipd.L2.Winner}
		case gate.reason != "":
			out[announcement{protoL2, ip}] = gate
		}
		if bgp && !ipd.BGP.Announce {
			out[announcement{protoBGP, ip}] = notAnnounced{reason: ipd.BGP.Reason.String(), detail: ipd.BGP.Detail}
		}
	}
	return out
}

// reportNotAnnounced makes herald_speaker_not_announced and the logs follow
// the change from st.notAnnounced to now. A reason that appears or changes
// is logged once: at debug level for notOwner (another node announces: the
// normal state of every other node) and the glue's start-up gates, at info
// level otherwise. noMatchingInterface (the elected node cannot answer, so
// nobody does) is a warning and an announceFailed event (failed), again
// whenever its detail changes.
func (s *Controller) reportNotAnnounced(log *slog.Logger, st *serviceState, now map[announcement]notAnnounced, failed func(format string, args ...any)) {
	var recs []notAnnouncedRecord
	if len(now) > 0 {
		recs = make([]notAnnouncedRecord, 0, len(now))
		for a, n := range now {
			recs = append(recs, newNotAnnouncedRecord(a, n))
		}
		slices.SortFunc(recs, compareNotAnnounced)
	}
	for _, old := range st.notAnnounced {
		if _, ok := findNotAnnounced(recs, old); !ok {
			s.notAnn.add(old.protocol.String(), old.reason.String(), -1)
		}
	}
	for a, n := range now {
		r := newNotAnnouncedRecord(a, n)
		old, had := findNotAnnounced(st.notAnnounced, r)
		if had && old == r {
			continue
		}
		if !had || old.reason != r.reason {
			if had {
				s.notAnn.add(a.protocol, old.reason.String(), -1)
			}
			s.notAnn.add(a.protocol, n.reason, 1)
		}
		if had && old.reason == r.reason && old.detail == r.detail {
			continue // only the winner changed
		}
		attrs := []any{"protocol", a.protocol, "reason", n.reason, "detail", n.detail}
		if a.ip != "" {
			attrs = append(attrs, "ip", a.ip)
		}
		if n.winner != "" {
			attrs = append(attrs, "winner", n.winner)
		}
		switch n.reason {
		case announce.ReasonNoMatchingInterface.String():
			log.Warn("announce failed", attrs...)
			failed("%s", announce.AnnounceFailedMessage(a.ip, s.opts.NodeName, a.protocol, n.detail))
		case announce.ReasonNotOwner.String(), reasonMemberlistNotJoined, reasonInterfacesNotListed, reasonHandoverPending:
			log.Debug("not announcing", attrs...)
		default:
			log.Info("not announcing", attrs...)
		}
	}
	st.notAnnounced = recs
}

// logDecision logs why IPs are not announced, at debug level.
func (s *Controller) logDecision(log *slog.Logger, d *announce.Decision) {
	if d.Reason != announce.ReasonNone {
		log.Debug("not announcing", "reason", d.Reason.String())
		return
	}
	for _, ipd := range d.IPs {
		if s.opts.L2 != nil && !ipd.L2.Announce {
			log.Debug("not announcing", "protocol", protoL2, "ip", ipd.IP, "reason", ipd.L2.Reason.String(),
				"detail", ipd.L2.Detail, "winner", ipd.L2.Winner)
		}
		if s.opts.BGP != nil && !ipd.BGP.Announce {
			log.Debug("not announcing", "protocol", protoBGP, "ip", ipd.IP, "reason", ipd.BGP.Reason.String(), "detail", ipd.BGP.Detail)
		}
	}
}

// event emits an event on the Service of the cached record svc.
func (s *Controller) event(svc *serviceRecord, eventtype, reason, format string, args ...any) {
	if s.opts.Recorder != nil {
		s.opts.Recorder.Eventf(svc.eventObject(), eventtype, reason, format, args...)
	}
}

func splitKey(key string) (types.NamespacedName, bool) {
	ns, name, ok := strings.Cut(key, "/")
	return types.NamespacedName{Namespace: ns, Name: name}, ok && ns != "" && name != ""
}

func equalTargets(a, b []announce.L2Target) bool {
	return slices.EqualFunc(a, b, func(x, y announce.L2Target) bool {
		return x.IP == y.IP && slices.Equal(x.Interfaces, y.Interfaces)
	})
}

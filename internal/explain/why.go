package explain

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/annotations"
	"github.com/herald-lb/herald/internal/announce"
	"github.com/herald-lb/herald/internal/config"
	"github.com/herald-lb/herald/internal/ipam"
	"github.com/herald-lb/herald/internal/svcreq"
)

// ErrServiceNotFound: the Service explained is not in Cluster.Services.
var ErrServiceNotFound = errors.New("service not found")

// WhyReport explains one Service: its allocation, then per address who
// announces it and why, then what the speakers report.
type WhyReport struct {
	Service string `json:"service"`
	// Type, LoadBalancerClass and ExternalTrafficPolicy are the Service's.
	Type                  string `json:"type"`
	LoadBalancerClass     string `json:"loadBalancerClass,omitempty"`
	ExternalTrafficPolicy string `json:"externalTrafficPolicy"`
	// Endpoints lists the nodes running a serving endpoint ("" for an
	// endpoint without nodeName), sorted.
	EndpointNodes []string `json:"endpointNodes"`

	Allocation AllocationReport `json:"allocation"`
	// NotAnnounced is the speakers' reason for the whole Service
	// (notLoadBalancer, otherLoadBalancerClass, noIPAllocated, invalidIP),
	// "" when its addresses were decided one by one (IPs).
	NotAnnounced string     `json:"notAnnounced,omitempty"`
	IPs          []IPReport `json:"ips,omitempty"`

	Reported ReportedState `json:"reported"`
	// Notes say where computed facts come from (LiveNote, ...).
	Notes []string `json:"notes,omitempty"`
	// Problems: pending, unannounced, disagreements. Non-empty makes the
	// command exit 1.
	Problems []string `json:"problems,omitempty"`
}

// AllocationReport is the controller's side, recomputed.
type AllocationReport struct {
	// Handled is false when the controller does not allocate for the
	// Service (Why says why).
	Handled bool `json:"handled"`
	// IPs are status.loadBalancer.ingress; Pool the pool they are in
	// (the replayed allocator's), AnnotatedPool the
	// metallb.io/ip-allocated-from-pool annotation.
	IPs           []string `json:"ips,omitempty"`
	Pool          string   `json:"pool,omitempty"`
	AnnotatedPool string   `json:"annotatedPool,omitempty"`
	// Why says how the addresses were chosen, or why the Service is
	// pending or not handled.
	Why string `json:"why"`
	// Pending: the Service holds no address; Error is the allocator's
	// error for it now (the message the controller writes).
	Pending bool   `json:"pending"`
	Error   string `json:"error,omitempty"`
	// RequestedIPs, RequestedPool, SharingKey: what the Service asks for.
	RequestedIPs  []string `json:"requestedIPs,omitempty"`
	RequestedPool string   `json:"requestedPool,omitempty"`
	SharingKey    string   `json:"sharingKey,omitempty"`
	// CandidateOrder is the pool order the allocation tries for the
	// Service: the automatic one (ipam.Allocator.Candidates); for a
	// Service naming a pool (metallb.io/address-pool) that pool alone; for
	// one requesting addresses the pools holding them (none: pending).
	CandidateOrder []string `json:"candidateOrder,omitempty"`
	// Pools is every pool's verdict for the Service; for a Service naming a
	// pool, the others are not selected ("not tried: ...").
	Pools []PoolVerdict `json:"pools,omitempty"`
}

// PoolVerdict says whether one pool may serve the Service.
type PoolVerdict struct {
	Name       string `json:"name"`
	AutoAssign bool   `json:"autoAssign"`
	// Selected: serviceAllocation selects the Service (WhyNot otherwise).
	Selected bool   `json:"selected"`
	WhyNot   string `json:"whyNot,omitempty"`
	// FreeIPv4, FreeIPv6: free addresses after the replay; -1 when the pool
	// has no address of the family.
	FreeIPv4 int64 `json:"freeIPv4"`
	FreeIPv6 int64 `json:"freeIPv6"`
	// Contains lists the requested addresses in the pool.
	Contains []string `json:"contains,omitempty"`
}

// IPReport is one address of the Service.
type IPReport struct {
	IP   string `json:"ip"`
	Pool string `json:"pool,omitempty"`
	// L2 and BGP are nil when no advertisement of that mode selects the
	// pool.
	L2  *ModeReport `json:"l2,omitempty"`
	BGP *ModeReport `json:"bgp,omitempty"`
}

// ModeReport is one mode (layer 2 or BGP) of one address.
type ModeReport struct {
	// Nodes holds one verdict per node, by name.
	Nodes []NodeVerdict `json:"nodes"`
	// Layer 2: the elected node, why it won, and the full ranking.
	Winner    string      `json:"winner,omitempty"`
	WinnerWhy string      `json:"winnerWhy,omitempty"`
	Ranking   []RankEntry `json:"ranking,omitempty"`
	// Election is the layer 2 election replayed (per-address, balanced or
	// metallb: the --l2-election of the winner's speaker, or of most
	// speakers without a winner).
	Election L2Election `json:"election,omitempty"`
	// BallotIP is the address whose election decides this one when it is
	// another (metallb: the Service's first address); the ranking and
	// hashes are that address's.
	BallotIP string `json:"ballotIP,omitempty"`
	// Balanced election: Capacity is the bound per node
	// (announce.BalancedCapacity); PlainWinner the per-address election's
	// winner (the ranking's first) when it is not Winner.
	Capacity    int    `json:"capacity,omitempty"`
	PlainWinner string `json:"plainWinner,omitempty"`
	// BGP: the paths each announcing node sends.
	Paths []PathReport `json:"paths,omitempty"`
}

// NodeVerdict is the speaker's decision on one node.
type NodeVerdict struct {
	Node     string `json:"node"`
	Announce bool   `json:"announce"`
	// Reason is MetalLB's reason name (announce.Reason), Detail the
	// decision's explanation.
	Reason string `json:"reason,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Live: the node's speaker Pod is Running and Ready. A BGP decision
	// does not look at it; a node that is not live announces nothing.
	Live bool `json:"live"`
	// Interfaces (layer 2, when announcing): "" means every interface.
	Interfaces []string `json:"interfaces,omitempty"`
	// Peers (BGP, when announcing): the peers receiving a path.
	Peers []string `json:"peers,omitempty"`
}

// RankEntry is one candidate of the layer 2 election, winner first.
type RankEntry struct {
	Node       string `json:"node"`
	Serves     int    `json:"serves"`
	Preference int    `json:"preference"`
	// Hash is the first 8 bytes of announce.ElectionHash, hex.
	Hash string `json:"hash"`
	// Load is, with the balanced election, how many layer 2 addresses the
	// node wins.
	Load int `json:"load,omitempty"`
}

// PathReport is one BGP path of one node.
type PathReport struct {
	Node             string   `json:"node"`
	Advertisement    string   `json:"advertisement"`
	Prefix           string   `json:"prefix"`
	Communities      []string `json:"communities,omitempty"`
	LargeCommunities []string `json:"largeCommunities,omitempty"`
	// LocalPref is set only when sent (an iBGP peer receives the path).
	LocalPref *uint32 `json:"localPref,omitempty"`
	// Weight is the weighted-ECMP weight (local endpoints) the path carries
	// as a link bandwidth community (RFC 10005, Weight Mbit/s), 0 for none.
	Weight uint32 `json:"weight,omitempty"`
	// Peers receive the path.
	Peers []string `json:"peers"`
	// Sessions are the states of the node's sessions to Peers (one per
	// peer, same order), from the BGPSessionState objects; State "Unknown"
	// when there is no object (an older speaker, or not written yet).
	Sessions []PeerSession `json:"sessions,omitempty"`
}

// PeerSession is the state of one BGP session (node, BGPPeer) a Service's
// path goes to.
type PeerSession struct {
	Node string `json:"node"`
	Peer string `json:"peer"`
	SessionState
}

// ReportedState is what Herald's components wrote.
type ReportedState struct {
	// Condition is the herald.io/IPAllocated condition ("" when absent):
	// "True IPAllocated: message".
	Condition string `json:"condition,omitempty"`
	// L2 are the ServiceL2Status objects: node -> interfaces.
	L2 []ReportedL2 `json:"l2,omitempty"`
	// BGP are the ServiceBGPStatus objects: node -> peers.
	BGP []ReportedBGP `json:"bgp,omitempty"`
	// Events of the Service, oldest first.
	Events []EventLine `json:"events,omitempty"`
}

// ReportedL2 is one ServiceL2Status.
type ReportedL2 struct {
	Object     string   `json:"object"`
	Node       string   `json:"node"`
	Interfaces []string `json:"interfaces,omitempty"`
}

// ReportedBGP is one ServiceBGPStatus.
type ReportedBGP struct {
	Object string   `json:"object"`
	Node   string   `json:"node"`
	Peers  []string `json:"peers,omitempty"`
	// Sessions are the states of the node's sessions to Peers (one per
	// peer, same order); State "Unknown" without a BGPSessionState.
	Sessions []PeerSession `json:"sessions,omitempty"`
}

// EventLine is one event.
type EventLine struct {
	Type    string `json:"type"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	Count   int32  `json:"count,omitempty"`
	Last    string `json:"last,omitempty"`
}

// Why explains the Service namespace/name.
func Why(c *Cluster, namespace, name string) (*WhyReport, error) {
	var svc *corev1.Service
	for i := range c.Services {
		if c.Services[i].Namespace == namespace && c.Services[i].Name == name {
			svc = &c.Services[i]
		}
	}
	if svc == nil {
		return nil, fmt.Errorf("%w: %s/%s", ErrServiceNotFound, namespace, name)
	}
	v := newView(c)
	r := &WhyReport{Service: namespace + "/" + name, Type: string(svc.Spec.Type),
		ExternalTrafficPolicy: string(announce.ServiceFromK8s(svc).ExternalTrafficPolicy)}
	if svc.Spec.LoadBalancerClass != nil {
		r.LoadBalancerClass = *svc.Spec.LoadBalancerClass
	}
	eps := v.endpoints(namespace, name)
	for _, ep := range eps {
		if ep.CanServe() && !slices.Contains(r.EndpointNodes, ep.NodeName) {
			r.EndpointNodes = append(r.EndpointNodes, ep.NodeName)
		}
	}
	sort.Strings(r.EndpointNodes)
	if v.buildErr != nil {
		r.Problems = append(r.Problems, fmt.Sprintf("the configuration does not build (the components keep their last valid one, which the API does not show; see kubectl herald config): %v", v.buildErr))
	}
	v.explainAllocation(svc, r)
	v.explainAnnouncement(svc, eps, r)
	v.reported(svc, r)
	v.compare(r)
	v.sessions(r, NewObjectSessions(c.SessionStates, nil))
	r.Problems = oneLine(r.Problems)
	return r, nil
}

// oneLine makes each of problems one line: a multi-line part (a joined
// error, errors.Join's "\n") becomes its trimmed, non-empty lines joined
// with "; ". It rewrites problems in place and returns it.
func oneLine(problems []string) []string {
	for i, p := range problems {
		if !strings.ContainsAny(p, "\r\n") {
			continue
		}
		var parts []string
		for _, l := range strings.FieldsFunc(p, func(r rune) bool { return r == '\n' || r == '\r' }) {
			if l = strings.TrimSpace(l); l != "" {
				parts = append(parts, l)
			}
		}
		problems[i] = strings.Join(parts, "; ")
	}
	return problems
}

func (v *view) explainAllocation(svc *corev1.Service, r *WhyReport) {
	a := &r.Allocation
	key := svcreq.Key(svc)
	for _, ip := range svcreq.IngressIPs(svc) {
		a.IPs = append(a.IPs, ip.String())
	}
	a.AnnotatedPool = svc.Annotations[annotations.AllocatedFromPool]
	if !svcreq.Handled(svc, v.c.ControllerLBClass) {
		switch {
		case svc.Spec.Type != corev1.ServiceTypeLoadBalancer:
			a.Why = fmt.Sprintf("not a LoadBalancer Service (type %s)", svc.Spec.Type)
		case !svcreq.OwnsClass(svc, v.c.ControllerLBClass):
			a.Why = fmt.Sprintf("loadBalancerClass %q is not the controller's (%q): another implementation allocates", r.LoadBalancerClass, v.c.ControllerLBClass)
		default:
			a.Why = "headless (no ClusterIP): the controller allocates nothing"
		}
		return
	}
	a.Handled = true
	req := v.reqs[key]
	for _, ip := range req.RequestedIPs {
		a.RequestedIPs = append(a.RequestedIPs, ip.String())
	}
	a.RequestedPool, a.SharingKey = req.PoolName, req.SharingKey
	switch {
	case req.PoolName != "":
		// Allocate tries the named pool alone (ipam step 2).
		a.CandidateOrder = []string{req.PoolName}
	case len(req.RequestedIPs) > 0:
		// Requested addresses are taken from the pool that holds them, in
		// no automatic order (ipam: ErrRequestedIPNotInPool when none does).
		if v.snap != nil {
			for _, p := range svcreq.PoolsFor(v.snap) {
				if cp, _ := v.snap.Pool(p.Name); cp != nil && slices.ContainsFunc(req.RequestedIPs, cp.Contains) {
					a.CandidateOrder = append(a.CandidateOrder, p.Name)
				}
			}
		}
	default:
		a.CandidateOrder = v.alloc.Candidates(req)
	}
	free := map[string]ipam.PoolStats{}
	for _, st := range v.alloc.Stats() {
		free[st.Pool] = st
	}
	if v.snap != nil {
		for _, p := range svcreq.PoolsFor(v.snap) {
			ok, why := p.Selects(&req)
			if req.PoolName != "" && p.Name != req.PoolName {
				ok, why = false, fmt.Sprintf("not tried: the Service names pool %q (%s)", req.PoolName, annotations.AddressPool)
			}
			pv := PoolVerdict{Name: p.Name, AutoAssign: p.AutoAssign, Selected: ok, WhyNot: why, FreeIPv4: -1, FreeIPv6: -1}
			cp, _ := v.snap.Pool(p.Name)
			st := free[p.Name]
			if cp.HasIPv4() {
				pv.FreeIPv4 = st.AvailableIPv4
			}
			if cp.HasIPv6() {
				pv.FreeIPv6 = st.AvailableIPv6
			}
			for _, ip := range req.RequestedIPs {
				if cp.Contains(ip) {
					pv.Contains = append(pv.Contains, ip.String())
				}
			}
			a.Pools = append(a.Pools, pv)
		}
	}
	if err := v.reqErr[key]; err != nil {
		a.Pending = len(a.IPs) == 0
		a.Error = err.Error()
		a.Why = "the Service's request is invalid: " + err.Error()
		r.Problems = append(r.Problems, "allocation: "+a.Why)
		return
	}
	if v.snap == nil {
		a.Why = "unknown: the configuration does not build"
		return
	}
	if len(a.IPs) > 0 {
		if err := v.importErr[key]; err != nil {
			a.Why = "the addresses the status shows are not valid for the Service: " + err.Error()
			a.Error = err.Error()
			r.Problems = append(r.Problems, "allocation: "+a.Why)
			return
		}
		asg, _ := v.alloc.Lookup(key)
		a.Pool = asg.Pool
		a.Why = v.howChosen(key, req, asg)
		if a.AnnotatedPool != "" && a.AnnotatedPool != a.Pool {
			r.Problems = append(r.Problems, fmt.Sprintf("disagreement: annotation %s says pool %q, the addresses are in pool %q", annotations.AllocatedFromPool, a.AnnotatedPool, a.Pool))
		}
		return
	}
	a.Pending = true
	asg, err := v.alloc.Allocate(req)
	if err != nil {
		a.Error = err.Error()
		a.Why = "pending: " + pendingCause(err)
		r.Problems = append(r.Problems, "allocation: "+a.Why+": "+err.Error())
		return
	}
	var ips []string
	for _, ip := range asg.IPs {
		ips = append(ips, ip.String())
	}
	a.Why = fmt.Sprintf("pending, although the allocator gives it %s from pool %q now: the controller has not written it (is it running and leader? see kubectl herald config and the Service's events)", strings.Join(ips, ", "), asg.Pool)
	r.Problems = append(r.Problems, "allocation: "+a.Why)
}

// pendingCause names the allocator's error kind in words.
func pendingCause(err error) string {
	for _, k := range []struct {
		err  error
		text string
	}{
		{ipam.ErrSharingConflict, "IP sharing conflict"},
		{ipam.ErrIPInUse, "the requested address is held by another Service"},
		{ipam.ErrNoPoolMatches, "no pool may serve the Service (namespace, labels, autoAssign)"},
		{ipam.ErrPoolExhausted, "every candidate pool is full"},
		{ipam.ErrRequestedIPNotInPool, "the requested address is outside every allowed pool"},
		{ipam.ErrFamilyUnavailable, "no candidate pool offers the IP family"},
		{ipam.ErrUnknownPool, "the pool named by metallb.io/address-pool does not exist"},
		{ipam.ErrInvalidRequest, "invalid request"},
	} {
		if errors.Is(err, k.err) {
			return k.text
		}
	}
	return "allocation failed"
}

// howChosen says why the Service holds the addresses of asg.
func (v *view) howChosen(key string, req ipam.Request, asg ipam.Assignment) string {
	switch {
	case len(req.RequestedIPs) > 0:
		return fmt.Sprintf("requested (metallb.io/loadBalancerIPs or spec.loadBalancerIP), in pool %q", asg.Pool)
	case req.PoolName != "":
		return fmt.Sprintf("pool %q is named by metallb.io/address-pool", asg.Pool)
	}
	var sharers []string
	if req.SharingKey != "" {
		for k, other := range v.alloc.Assignments() {
			if k != key && slices.ContainsFunc(other.IPs, func(ip netip.Addr) bool { return slices.Contains(asg.IPs, ip) }) {
				sharers = append(sharers, k)
			}
		}
		sort.Strings(sharers)
	}
	cands := v.alloc.Candidates(req)
	why := fmt.Sprintf("pool %q is the first of the candidate pools %v with a free address (serviceAllocation priority, then name); the lowest free address at allocation time", asg.Pool, cands)
	switch earlier := v.earlierWithRoom(cands, asg); {
	case !slices.Contains(cands, asg.Pool):
		why = fmt.Sprintf("pool %q gave the addresses, and an allocation is kept while its pool still serves the Service: the pool is no longer among the candidate pools %v of a new allocation (autoAssign false, or serviceAllocation no longer selects the Service for automatic allocation)", asg.Pool, cands)
	case earlier != "":
		why = fmt.Sprintf("pool %q gave the addresses, and an allocation is kept while its pool still serves the Service: pool %q, before it among the candidate pools %v (serviceAllocation priority, then name), has a free address now and would serve a new Service", asg.Pool, earlier, cands)
	}
	if len(sharers) > 0 {
		why += fmt.Sprintf("; shared (allow-shared-ip %q) with %s", req.SharingKey, strings.Join(sharers, ", "))
	}
	return why
}

// earlierWithRoom returns the first pool of cands before asg.Pool with a
// free address of each family asg holds, "" when there is none or asg's
// pool is not among cands.
func (v *view) earlierWithRoom(cands []string, asg ipam.Assignment) string {
	i := slices.Index(cands, asg.Pool)
	if i <= 0 {
		return ""
	}
	var v4, v6 bool
	for _, ip := range asg.IPs {
		v4, v6 = v4 || ip.Is4(), v6 || ip.Is6()
	}
	free := map[string]ipam.PoolStats{}
	for _, st := range v.alloc.Stats() {
		free[st.Pool] = st
	}
	for _, name := range cands[:i] {
		st, ok := free[name]
		if ok && (!v4 || st.AvailableIPv4 > 0) && (!v6 || st.AvailableIPv6 > 0) {
			return name
		}
	}
	return ""
}

// explainAnnouncement runs every node's decision.
func (v *view) explainAnnouncement(svc *corev1.Service, eps []announce.Endpoint, r *WhyReport) {
	r.Notes = append(r.Notes, v.liveNote)
	service := announce.ServiceFromK8s(svc)
	sharing := v.sharing(svc)
	type nodeDecision struct {
		node string
		in   announce.Input
		d    announce.Decision
	}
	var ds []nodeDecision
	var balancedErr error
	for _, n := range v.nodes {
		snap, err := v.nodeSnapshot(n.Name)
		if snap == nil {
			r.Problems = append(r.Problems, fmt.Sprintf("node %s: the speaker's configuration does not build: %v", n.Name, err))
			continue
		}
		// Each node's speaker with its own election (they differ during
		// a rollout that changes --l2-election).
		in := announce.Input{Config: snap, Node: n.Name, Nodes: v.nodes, Live: v.live, Service: service,
			Endpoints: eps, Sharing: sharing, Options: v.elect.options(v.c.Options, n.Name)}
		if v.elect.of(n.Name) == L2ElectionBalanced {
			be, err := v.balancedWinners(snap)
			if err != nil {
				balancedErr = err
			} else {
				in.L2Winners = be.Winners
			}
		}
		ds = append(ds, nodeDecision{n.Name, in, announce.Decide(in)})
	}
	if balancedErr != nil {
		r.Problems = append(r.Problems, "the balanced layer 2 election fails: "+balancedErr.Error())
	}
	if len(ds) == 0 {
		if len(v.nodes) == 0 {
			r.Problems = append(r.Problems, "the cluster has no Node")
		}
		return
	}
	anyL2 := false
	defer func() {
		if anyL2 {
			r.Notes = append(r.Notes, v.elect.note())
			r.Problems = append(r.Problems, v.elect.problems()...)
		}
	}()
	if reason := ds[0].d.Reason; reason != announce.ReasonNone {
		r.NotAnnounced = reason.String()
		if reason == announce.ReasonNoIPAllocated && r.Allocation.Handled && !r.Allocation.Pending {
			r.Problems = append(r.Problems, "not announced: the Service has no address (noIPAllocated)")
		}
		return
	}
	for i, ipd := range ds[0].d.IPs {
		ir := IPReport{IP: ipd.IP.String(), Pool: ipd.Pool}
		if ipd.Pool == "" {
			r.Problems = append(r.Problems, fmt.Sprintf("%s: %s (ipNotAllowed): no speaker announces it", ipd.IP, ipd.L2.Detail))
			r.IPs = append(r.IPs, ir)
			continue
		}
		var pool *config.Pool
		if v.snap != nil {
			pool, _ = v.snap.Pool(ipd.Pool)
		}
		hasL2 := pool == nil || len(pool.L2Advertisements) > 0
		hasBGP := pool == nil || len(pool.BGPAdvertisements) > 0
		if !hasL2 && !hasBGP {
			r.Problems = append(r.Problems, fmt.Sprintf("%s: no L2Advertisement or BGPAdvertisement selects pool %q: nobody announces it", ipd.IP, ipd.Pool))
		}
		if hasL2 {
			m := &ModeReport{}
			var announcers []string
			for _, nd := range ds {
				l2 := nd.d.IPs[i].L2
				nv := NodeVerdict{Node: nd.node, Announce: l2.Announce, Reason: l2.Reason.String(), Detail: l2.Detail, Live: v.live[nd.node]}
				failed, detail := l2Failed(v.c.Events, svc, nd.node, ipd.IP)
				if l2.Announce && failed {
					// The plugin cannot see the node's interfaces
					// (announce.Decide skips the check without them): the
					// speaker's own report decides.
					nv.Announce, nv.Reason, nv.Detail = false, announce.ReasonNoMatchingInterface.String(), detail
					r.Problems = append(r.Problems, fmt.Sprintf("%s: nobody announces it in layer 2: node %s won the election but has none of the L2Advertisement's interfaces (%s, its speaker's announceFailed event): %s",
						ipd.IP, nd.node, announce.ReasonNoMatchingInterface, detail))
				}
				if nv.Announce {
					nv.Interfaces = l2.Interfaces
					announcers = append(announcers, nd.node)
				}
				if l2.Reason == announce.ReasonNotOwner && !nv.Live {
					nv.Detail += " (" + v.notLiveWhy(nd.node) + ")"
				}
				m.Nodes = append(m.Nodes, nv)
			}
			if len(announcers) > 0 {
				m.Winner = announcers[0]
			}
			// The election explained: the winner's speaker's, else the
			// one most speakers run.
			ex := ds[0]
			for _, nd := range ds {
				if (m.Winner == "" && v.elect.of(nd.node) == v.elect.common) || nd.node == m.Winner {
					ex = nd
					break
				}
			}
			m.Election = v.elect.of(ex.node)
			ballot := announce.BallotIP(ex.in, ipd.IP)
			if ballot != ipd.IP.Unmap().WithZone("") {
				m.BallotIP = ballot.String()
			}
			var be *announce.BalancedElection
			if m.Election == L2ElectionBalanced {
				be, _ = v.balancedWinners(ex.in.Config)
			}
			cands := announce.L2Candidates(ex.in, ipd.IP)
			for _, c := range cands {
				h := announce.ElectionHash(c.Node, ballot)
				e := RankEntry{Node: c.Node, Serves: c.Serves, Preference: c.Preference, Hash: hex.EncodeToString(h[:8])}
				if be != nil {
					e.Load = be.Loads()[c.Node]
				}
				m.Ranking = append(m.Ranking, e)
			}
			m.WinnerWhy = winnerWhy(m.Ranking, m.Nodes)
			switch {
			case be != nil && m.Winner != "":
				m.Capacity = be.Capacity
				if len(m.Ranking) > 0 && m.Ranking[0].Node != m.Winner {
					m.PlainWinner = m.Ranking[0].Node
				}
				m.WinnerWhy = balancedWhy(be, ipd.IP, m.Winner, m.Ranking)
			case m.BallotIP != "":
				m.WinnerWhy = fmt.Sprintf("MetalLB's election (--l2-election=metallb): every address of the Service goes to the winner of its first address %s; %s", m.BallotIP, m.WinnerWhy)
			}
			switch {
			case len(announcers) > 1:
				r.Problems = append(r.Problems, fmt.Sprintf("%s: %d nodes announce it in layer 2 (%s): their speakers run different elections", ipd.IP, len(announcers), v.withElections(announcers)))
			case m.Winner == "" && !slices.ContainsFunc(m.Nodes, func(n NodeVerdict) bool { return n.Reason == announce.ReasonNoMatchingInterface.String() }):
				why := summarize(m.Nodes)
				if v.elect.mixed() {
					why += "; the speakers run different elections"
				}
				r.Problems = append(r.Problems, fmt.Sprintf("%s: no node announces it in layer 2 (%s)", ipd.IP, why))
			case !v.elect.mixed() && !consistentWinner(m, be != nil):
				r.Problems = append(r.Problems, fmt.Sprintf("%s: internal inconsistency: %s announces but the ranking is %v", ipd.IP, m.Winner, m.Ranking))
			}
			ir.L2 = m
			anyL2 = true
		}
		if hasBGP {
			m := &ModeReport{}
			anyLive := false
			for _, nd := range ds {
				b := nd.d.IPs[i].BGP
				nv := NodeVerdict{Node: nd.node, Announce: b.Announce, Reason: b.Reason.String(), Detail: b.Detail, Live: v.live[nd.node], Peers: b.Peers}
				if b.Announce {
					if nv.Live {
						anyLive = true
					} else {
						nv.Detail = "would announce, but " + v.notLiveWhy(nd.node)
					}
					peers := announce.Sessions(nd.in.Config, nd.node, nodeLabels(v.nodes, nd.node), netip.Addr{})
					for j, p := range b.Paths {
						pr := PathReport{Node: nd.node, Advertisement: b.Advertisements[j], Prefix: p.Prefix.String(), LocalPref: p.LocalPref, Weight: p.Weight}
						for _, c := range p.Communities {
							pr.Communities = append(pr.Communities, fmt.Sprintf("%d:%d", c>>16, c&0xffff))
						}
						for _, c := range p.LargeCommunities {
							pr.LargeCommunities = append(pr.LargeCommunities, fmt.Sprintf("%d:%d:%d", c[0], c[1], c[2]))
						}
						for _, s := range peers {
							if len(p.Peers) == 0 || slices.Contains(p.Peers, s.Name) {
								pr.Peers = append(pr.Peers, s.Name)
							}
						}
						m.Paths = append(m.Paths, pr)
					}
				}
				m.Nodes = append(m.Nodes, nv)
			}
			if !anyLive {
				r.Problems = append(r.Problems, fmt.Sprintf("%s: no live node announces it over BGP (%s)", ipd.IP, summarize(m.Nodes)))
			}
			ir.BGP = m
		}
		r.IPs = append(r.IPs, ir)
	}
}

// consistentWinner reports whether m's winner is the one its election
// gives: the ranking's first (per-address, metallb), or one of its first
// rank, the candidates with the first's Serves and Preference (balanced).
// Without a winner, true.
func consistentWinner(m *ModeReport, balanced bool) bool {
	if m.Winner == "" {
		return true
	}
	if len(m.Ranking) == 0 {
		return false
	}
	if !balanced {
		return m.Ranking[0].Node == m.Winner
	}
	top := m.Ranking[0]
	return slices.ContainsFunc(m.Ranking, func(e RankEntry) bool {
		return e.Node == m.Winner && e.Serves == top.Serves && e.Preference == top.Preference
	})
}

// withElections names nodes with their speakers' elections: "n1
// (balanced), n3 (per-address)".
func (v *view) withElections(nodes []string) string {
	parts := make([]string, len(nodes))
	for i, n := range nodes {
		parts[i] = fmt.Sprintf("%s (%s)", n, v.elect.of(n))
	}
	return strings.Join(parts, ", ")
}

// Speaker event texts (internal/k8s/speaker: reportNotAnnounced and
// syncService) l2Failed reads.
const (
	eventAnnounceFailed = "announceFailed"
	eventNodeAssigned   = "nodeAssigned"
)

// l2Failed reports whether node's speaker says, in svc's newest
// announceFailed event for ip from node (one newer than every nodeAssigned
// from node in layer 2 naming ip), that it won the layer 2 election for ip
// but has none of its L2Advertisements' interfaces (announce's
// noMatchingInterface), and returns the event's detail: the speaker's
// message `failed to announce <ip> from node "<node>" with protocol
// "layer2": <detail>`.
func l2Failed(events []corev1.Event, svc *corev1.Service, node string, ip netip.Addr) (bool, string) {
	var failedAt, assignedAt time.Time
	var detail string
	for i := range events {
		e := &events[i]
		if e.InvolvedObject.Kind != "Service" || e.InvolvedObject.Namespace != svc.Namespace || e.InvolvedObject.Name != svc.Name ||
			(svc.UID != "" && e.InvolvedObject.UID != "" && e.InvolvedObject.UID != svc.UID) {
			continue
		}
		t := eventTime(e)
		switch e.Reason {
		case eventAnnounceFailed:
			d, ok := announce.ParseAnnounceFailed(e.Message, ip, node, "layer2")
			// Both texts of noMatchingInterface's detail say "won the
			// election"; other announceFailed reasons are not this case.
			ok = ok && strings.Contains(d, " won the election for ")
			if ok && (detail == "" || t.After(failedAt)) {
				failedAt, detail = t, d
			}
		case eventNodeAssigned:
			if announce.NodeAssignedIncludes(e.Message, node, "layer2", ip) && t.After(assignedAt) {
				assignedAt = t
			}
		}
	}
	if detail == "" || (!assignedAt.IsZero() && !failedAt.After(assignedAt)) {
		return false, ""
	}
	return true, detail
}

func nodeLabels(nodes []announce.Node, name string) labels.Set {
	for _, n := range nodes {
		if n.Name == name {
			return n.Labels
		}
	}
	return labels.Set{}
}

// eventTime is when an event last happened: lastTimestamp, else the
// series' or eventTime, else creation.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// summarize counts the reasons of the nodes that do not announce.
func summarize(nodes []NodeVerdict) string {
	count := map[string][]string{}
	for _, n := range nodes {
		if !n.Announce {
			count[n.Reason] = append(count[n.Reason], n.Node)
		}
	}
	var parts []string
	for reason, ns := range count {
		parts = append(parts, fmt.Sprintf("%s on %s", reason, strings.Join(ns, ",")))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// winnerWhy says why the first of ranking beats the second; without a
// candidate, "no candidate: " and the nodes' reasons (summarize).
func winnerWhy(ranking []RankEntry, nodes []NodeVerdict) string {
	switch len(ranking) {
	case 0:
		if s := summarize(nodes); s != "" {
			return "no candidate: " + s
		}
		return "no candidate: no live node passes the advertisement's selectors, the exclusions and the endpoint rule"
	case 1:
		return fmt.Sprintf("%s is the only candidate", ranking[0].Node)
	}
	w, r := ranking[0], ranking[1]
	switch {
	case w.Serves != r.Serves:
		return fmt.Sprintf("%s serves %d of the Services sharing the address, %s %d", w.Node, w.Serves, r.Node, r.Serves)
	case w.Preference != r.Preference:
		return fmt.Sprintf("%s has preferredNodeSelectors score %d, %s %d", w.Node, w.Preference, r.Node, r.Preference)
	}
	return fmt.Sprintf("equal serves and preference: %s has the lowest rendezvous hash SHA-256(node#ip) %s… (next %s %s…)", w.Node, w.Hash, r.Node, r.Hash)
}

// reported collects what the components wrote about svc.
func (v *view) reported(svc *corev1.Service, r *WhyReport) {
	if cond := meta.FindStatusCondition(svc.Status.Conditions, AllocationConditionType); cond != nil {
		r.Reported.Condition = fmt.Sprintf("%s %s: %s", cond.Status, cond.Reason, cond.Message)
	}
	mine := func(ns, name string, lbl map[string]string) bool {
		return (ns == svc.Namespace && name == svc.Name) ||
			(lbl[v1beta1.LabelServiceNamespace] == svc.Namespace && lbl[v1beta1.LabelServiceName] == svc.Name)
	}
	for _, s := range v.c.L2Statuses {
		if !mine(s.Status.ServiceNamespace, s.Status.ServiceName, s.Labels) {
			continue
		}
		rl := ReportedL2{Object: s.Name, Node: cmpOr(s.Status.Node, s.Labels[v1beta1.LabelNode])}
		for _, i := range s.Status.Interfaces {
			rl.Interfaces = append(rl.Interfaces, i.Name)
		}
		r.Reported.L2 = append(r.Reported.L2, rl)
	}
	for _, s := range v.c.BGPStatuses {
		if !mine(s.Status.ServiceNamespace, s.Status.ServiceName, s.Labels) {
			continue
		}
		r.Reported.BGP = append(r.Reported.BGP, ReportedBGP{Object: s.Name, Node: cmpOr(s.Status.Node, s.Labels[v1beta1.LabelNode]), Peers: s.Status.Peers})
	}
	sort.Slice(r.Reported.L2, func(i, j int) bool { return r.Reported.L2[i].Node < r.Reported.L2[j].Node })
	sort.Slice(r.Reported.BGP, func(i, j int) bool { return r.Reported.BGP[i].Node < r.Reported.BGP[j].Node })
	r.Reported.Events = eventsOf(v.c.Events, "Service", svc.Namespace, svc.Name, svc.UID)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// eventsOf returns the events of one object, oldest first. With a uid,
// events of an earlier object of the same name (deleted and created again)
// are left out, as kubectl describe does; events that name no UID stay.
func eventsOf(events []corev1.Event, kind, ns, name string, uid types.UID) []EventLine {
	var evs []corev1.Event
	for _, e := range events {
		if e.InvolvedObject.Kind == kind && e.InvolvedObject.Namespace == ns && e.InvolvedObject.Name == name &&
			(uid == "" || e.InvolvedObject.UID == "" || e.InvolvedObject.UID == uid) {
			evs = append(evs, e)
		}
	}
	sort.SliceStable(evs, func(i, j int) bool { return eventTime(&evs[i]).Before(eventTime(&evs[j])) })
	var out []EventLine
	for i := range evs {
		e := &evs[i]
		l := EventLine{Type: e.Type, Reason: e.Reason, Message: e.Message, Count: e.Count}
		if t := eventTime(e); !t.IsZero() {
			l.Last = t.UTC().Format("2006-01-02T15:04:05Z")
		}
		out = append(out, l)
	}
	return out
}

// compare flags every disagreement between the computed and the reported
// state.
func (v *view) compare(r *WhyReport) {
	a := &r.Allocation
	if a.Handled && r.Reported.Condition != "" {
		allocated := strings.HasPrefix(r.Reported.Condition, string(corev1.ConditionTrue)+" ")
		if allocated == a.Pending {
			r.Problems = append(r.Problems, fmt.Sprintf("disagreement: the controller's condition says %q, the replay says pending=%v", r.Reported.Condition, a.Pending))
		}
	}
	wantL2 := map[string]bool{}
	wantBGP := map[string][]string{}
	notLive := map[string]bool{} // would announce over BGP, speaker not Ready
	for _, ip := range r.IPs {
		if ip.L2 != nil {
			// Every announcing node: one, the winner, unless the
			// speakers run different elections.
			for _, n := range ip.L2.Nodes {
				if n.Announce {
					wantL2[n.Node] = true
				}
			}
		}
		if ip.BGP != nil {
			for _, n := range ip.BGP.Nodes {
				if n.Announce && n.Live {
					wantBGP[n.Node] = union(wantBGP[n.Node], n.Peers)
				}
				if n.Announce && !n.Live {
					notLive[n.Node] = true
				}
			}
		}
	}
	// The interfaces the advertisements restrict the winner to (nil:
	// every interface).
	allowed := map[string][]string{}
	restricted := map[string]bool{}
	for _, ip := range r.IPs {
		if ip.L2 == nil {
			continue
		}
		for _, n := range ip.L2.Nodes {
			if n.Announce && len(n.Interfaces) > 0 {
				restricted[n.Node] = true
				allowed[n.Node] = union(allowed[n.Node], n.Interfaces)
			}
		}
	}
	gotL2 := map[string]bool{}
	for _, s := range r.Reported.L2 {
		gotL2[s.Node] = true
		if restricted[s.Node] {
			switch {
			case len(s.Interfaces) == 0:
				r.Problems = append(r.Problems, fmt.Sprintf("disagreement: ServiceL2Status %s from node %s names no interface, but the L2Advertisement restricts it to %v: the node may have none of them, and then nothing answers", s.Object, s.Node, allowed[s.Node]))
			default:
				for _, i := range s.Interfaces {
					if !slices.Contains(allowed[s.Node], i) {
						r.Problems = append(r.Problems, fmt.Sprintf("disagreement: ServiceL2Status %s from node %s names interface %s, outside the L2Advertisement's interfaces %v", s.Object, s.Node, i, allowed[s.Node]))
					}
				}
			}
		}
		if !wantL2[s.Node] {
			r.Problems = append(r.Problems, fmt.Sprintf("disagreement: node %s reports announcing in layer 2 (ServiceL2Status %s), but the computed winner is %s", s.Node, s.Object, keys(wantL2)))
		}
	}
	for _, n := range keys(wantL2) {
		if !gotL2[n] {
			r.Problems = append(r.Problems, fmt.Sprintf("disagreement: node %s wins the layer 2 election, but there is no ServiceL2Status from it", n))
		}
	}
	gotBGP := map[string]bool{}
	for _, s := range r.Reported.BGP {
		gotBGP[s.Node] = true
		want, ok := wantBGP[s.Node]
		switch {
		case !ok && notLive[s.Node]:
			r.Problems = append(r.Problems, fmt.Sprintf("disagreement: node %s reports announcing over BGP (ServiceBGPStatus %s), but its speaker Pod is not Running and Ready (a stopped speaker's objects stay until it is back)", s.Node, s.Object))
		case !ok:
			r.Problems = append(r.Problems, fmt.Sprintf("disagreement: node %s reports announcing over BGP (ServiceBGPStatus %s), but computes no path there", s.Node, s.Object))
		case strings.Join(union(nil, s.Peers), ",") != strings.Join(want, ","):
			r.Problems = append(r.Problems, fmt.Sprintf("disagreement: node %s reports BGP peers %v, computed %v", s.Node, s.Peers, want))
		}
	}
	for _, n := range sortedKeys(wantBGP) {
		if !gotBGP[n] {
			r.Problems = append(r.Problems, fmt.Sprintf("disagreement: node %s announces over BGP (computed), but there is no ServiceBGPStatus from it", n))
		}
	}
}

func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedKeys(m map[string][]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// sessions fills the Sessions of r's BGP paths and ServiceBGPStatuses from
// src, and adds a problem for each session (node, peer) they go to that is
// known and not Established: the peer does not receive the path, whatever
// the ServiceBGPStatus says. A session src does not know (no
// BGPSessionState: an older speaker) is shown as Unknown, not a problem.
func (v *view) sessions(r *WhyReport, src SessionSource) {
	state := func(node, peer string) PeerSession {
		st, ok := src.Session(node, peer)
		if !ok {
			st = SessionState{State: "Unknown", Prefixes: -1}
		}
		return PeerSession{Node: node, Peer: peer, SessionState: st}
	}
	var all []PeerSession
	seen := map[[2]string]bool{}
	add := func(s PeerSession) {
		if k := [2]string{s.Node, s.Peer}; !seen[k] {
			seen[k] = true
			all = append(all, s)
		}
	}
	for i := range r.Reported.BGP {
		b := &r.Reported.BGP[i]
		b.Sessions = nil
		for _, p := range b.Peers {
			s := state(b.Node, p)
			b.Sessions = append(b.Sessions, s)
			add(s)
		}
	}
	for i := range r.IPs {
		m := r.IPs[i].BGP
		if m == nil {
			continue
		}
		for j := range m.Paths {
			pr := &m.Paths[j]
			pr.Sessions = nil
			for _, p := range pr.Peers {
				s := state(pr.Node, p)
				pr.Sessions = append(pr.Sessions, s)
				if v.live[pr.Node] {
					add(s)
				}
			}
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Node != all[j].Node {
			return all[i].Node < all[j].Node
		}
		return all[i].Peer < all[j].Peer
	})
	for _, s := range all {
		if !s.Known() || s.Established() {
			continue
		}
		msg := fmt.Sprintf("node %s, peer %s: BGP session %s", s.Node, s.Peer, s.State)
		if s.Since != "" {
			msg += " since " + s.Since
		}
		if s.LastError != "" {
			msg += ", last error: " + s.LastError
		} else {
			msg += ", no error reported"
		}
		r.Problems = append(r.Problems, msg+": the peer does not receive the Service's paths from this node (BGPSessionState; kubectl herald peers)")
	}
}

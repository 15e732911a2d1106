package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/e2e/lab"
)

// RolloutOptions shapes the speaker rolling update scenario.
type RolloutOptions struct {
	// Rounds is how many times every speaker is rolled; 0 means 1.
	Rounds int
	// Addresses is the number of layer 2 Services; 0 means 6.
	Addresses int
	// First is the first address of the scenario's pool; zero means
	// 198.51.100.230.
	First netip.Addr
	// BGPAddresses is the number of BGP Services (announced by every
	// node to the lab's router); 0 means 4.
	BGPAddresses int
	// FirstBGP is the first address of the BGP pool; zero means
	// 203.0.113.248.
	FirstBGP netip.Addr
	// Interval is the pause between two requests of one address's
	// poller; 0 means 100 ms.
	Interval time.Duration
	// Down is how long each speaker stays stopped before it is started
	// again (a DaemonSet rollout deletes the old Pod, then creates and
	// starts the new one); the router's table is read about every 200 ms
	// meanwhile. 0 means 2 s.
	Down time.Duration
}

func (o *RolloutOptions) defaults() {
	if o.Rounds == 0 {
		o.Rounds = 1
	}
	if o.Addresses == 0 {
		o.Addresses = 6
	}
	if !o.First.IsValid() {
		o.First = netip.MustParseAddr("198.51.100.230")
	}
	if o.BGPAddresses == 0 {
		o.BGPAddresses = 4
	}
	if !o.FirstBGP.IsValid() {
		o.FirstBGP = netip.MustParseAddr("203.0.113.248")
	}
	if o.Interval == 0 {
		o.Interval = 100 * time.Millisecond
	}
	if o.Down == 0 {
		o.Down = 2 * time.Second
	}
}

// ScenarioRollout names the rolling update scenario in the table.
const ScenarioRollout = "rolling update of the speakers"

// GapTarget is the product target for the longest time an address goes
// unanswered during a rollout.
const GapTarget = time.Second

// Rollout rolls the speakers as a DaemonSet update with maxUnavailable 1
// does: one node at a time, SIGTERM, o.Down later start, wait until it is
// ready, until every layer 2 Service has one ServiceL2Status again and
// until the router has every BGP Service's path from every node again,
// then the next node. It announces o.Addresses layer 2 Services and
// o.BGPAddresses BGP Services (a BGPPeer from every node to the lab's FRR
// router, with graceful restart, RFC 4724). Meanwhile the client polls
// every address over HTTP (a new connection per request, 1 s timeout,
// o.Interval apart; BGP addresses through the router). The client's ARP is
// never probed meanwhile (replies would correct its neighbour cache). It
// reports:
//
//   - requests lost to layer 2 addresses (failed or timed out), reported
//     without a target: a connection in flight when its address moves to
//     another node is reset by that node (it has no socket for it), as with
//     any layer 2 failover; what the rollout must bound is the gap, below;
//   - the longest time between two answered requests of one layer 2
//     address (target GapTarget);
//   - requests answered by a node other than the owner its
//     ServiceL2Status names, from when the statuses settled after a node's
//     start until the next node's stop (target 0): traffic a wrong
//     neighbour entry sends to a node that is not announcing;
//   - routes to a node whose speaker is gone: reads of the router's table
//     (per BGP prefix) while a node's speaker is stopped that still have a
//     path from that node, stale or not (target 0: the speaker's Cease,
//     RFC 4271 §6.7 and RFC 4486, makes the router withdraw them at once,
//     graceful restart notwithstanding);
//   - requests lost to BGP addresses, reported without a target (the
//     router always has paths from the nodes that run a speaker, but a
//     connection in flight when a path is withdrawn is hashed to another
//     node, which has no socket for it and resets it: ECMP without
//     resilient hashing), and the longest gap of one BGP address (target
//     GapTarget).
func Rollout(ctx context.Context, e *Env, o RolloutOptions) (res Result, err error) {
	o.defaults()
	res = Result{Scenario: ScenarioRollout, Form: fmt.Sprintf("%d round(s), %d layer 2 + %d BGP addresses", o.Rounds, o.Addresses, o.BGPAddresses)}
	f, err := newL2Fixture(ctx, e, "rollout", o.First, o.Addresses)
	if err != nil {
		return res, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = f.delete(dctx, e, "rollout")
	}()
	bgpSvcs, prefixes, cleanBGP, err := newBGPServices(ctx, e, f.ns, "chaos-rollout-bgp", o.FirstBGP, o.BGPAddresses)
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		err = errors.Join(err, cleanBGP(dctx))
	}()
	if err != nil {
		return res, fmt.Errorf("%s: %w", ScenarioRollout, err)
	}
	before, err := f.settle(ctx, e, 90*time.Second)
	if err != nil {
		return res, fmt.Errorf("%s: before: %w", ScenarioRollout, err)
	}
	if _, _, err := bgpState(ctx, e, prefixes, len(e.Lab.Nodes), 90*time.Second); err != nil {
		return res, fmt.Errorf("%s: before: %w", ScenarioRollout, err)
	}
	if err := f.primeClient(ctx, e, before); err != nil {
		return res, fmt.Errorf("%s: %w", ScenarioRollout, err)
	}

	// owners as the statuses say, and whether requests are judged now.
	var mu sync.Mutex
	cur, judging := before, true
	type stats struct {
		sent, lost, wrong     int
		gap                   time.Duration
		firstWrong, firstLost string
	}
	targets := append(slices.Clone(f.services), bgpSvcs...)
	isBGP := func(i int) bool { return i >= len(f.services) }
	st := make([]stats, len(targets))
	pctx, stopPolling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, s := range targets {
		wg.Go(func() {
			lastOK := time.Now()
			for pctx.Err() == nil {
				rctx, cancel := context.WithTimeout(pctx, time.Second)
				sentAt := time.Now()
				r, err := e.Lab.Get(rctx, e.Lab.ClientNamespace(), s.IP, 80)
				cancel()
				if pctx.Err() != nil {
					return
				}
				st[i].sent++
				if err != nil {
					st[i].lost++
					if st[i].firstLost == "" {
						st[i].firstLost = fmt.Sprintf("lost (%s): %v", sentAt.UTC().Format("15:04:05.000"), err)
					}
				} else {
					st[i].gap = max(st[i].gap, time.Since(lastOK))
					lastOK = time.Now()
					mu.Lock()
					if !isBGP(i) && judging && r.Node != cur[s.IP] {
						st[i].wrong++
						if st[i].firstWrong == "" {
							st[i].firstWrong = fmt.Sprintf("%s served by %s, owner %s (%s)", s.IP, r.Node, cur[s.IP], sentAt.UTC().Format("15:04:05.000"))
						}
					}
					mu.Unlock()
				}
				time.Sleep(o.Interval)
			}
		})
	}
	// Reads of the router's table while a speaker is stopped.
	var goneReads, goneRoutes int
	var firstGone string
	readGone := func(node lab.Node, stoppedAt time.Time) error {
		routes, err := e.Lab.BGPRoutes(ctx, "ipv4")
		if err != nil {
			return err
		}
		for _, p := range prefixes {
			goneReads++
			if i := slices.IndexFunc(routes[p], func(bp lab.BGPPath) bool { return pathFrom(bp, node.IPv4) }); i >= 0 {
				goneRoutes++
				if firstGone == "" {
					firstGone = fmt.Sprintf("%s: router has a path via %s %.1f s after its speaker stopped (%+v)",
						p, node.Name, time.Since(stoppedAt).Seconds(), routes[p][i])
				}
			}
		}
		return nil
	}
	rollErr := func() error {
		for round := range o.Rounds {
			for _, n := range e.Herald.SpeakerNodes() {
				node, ok := e.Lab.Node(n)
				if !ok {
					return fmt.Errorf("no lab node %q", n)
				}
				mu.Lock()
				judging = false
				mu.Unlock()
				if err := e.Herald.StopSpeaker(n); err != nil {
					return err
				}
				stoppedAt := time.Now()
				for first := true; first || time.Since(stoppedAt) < o.Down; first = false {
					if err := readGone(node, stoppedAt); err != nil {
						return fmt.Errorf("round %d, %s stopped: %w", round+1, n, err)
					}
					time.Sleep(200 * time.Millisecond)
				}
				if err := e.Herald.StartSpeaker(ctx, n); err != nil {
					return err
				}
				o, err := f.settleStatus(ctx, e, 60*time.Second)
				if err != nil {
					return fmt.Errorf("round %d, after %s: %w", round+1, n, err)
				}
				mu.Lock()
				cur, judging = o, true
				mu.Unlock()
				if _, _, err := bgpState(ctx, e, prefixes, len(e.Lab.Nodes), 60*time.Second); err != nil {
					return fmt.Errorf("round %d, after %s: %w", round+1, n, err)
				}
				e.log().Info("rolled", "round", round+1, "node", n)
			}
		}
		return nil
	}()
	// Keep polling a little after the last node (observation window).
	time.Sleep(2 * time.Second)
	stopPolling()
	wg.Wait()
	if rollErr != nil {
		return res, fmt.Errorf("%s: %w", ScenarioRollout, rollErr)
	}
	var sent, lost, wrong, bgpSent, bgpLost int
	var gap, bgpGap time.Duration
	var gapAddr, bgpGapAddr netip.Addr
	for i, s := range st {
		if isBGP(i) {
			bgpSent += s.sent
			bgpLost += s.lost
			if s.gap > bgpGap {
				bgpGap, bgpGapAddr = s.gap, targets[i].IP
			}
		} else {
			sent += s.sent
			lost += s.lost
			wrong += s.wrong
			if s.gap > gap {
				gap, gapAddr = s.gap, targets[i].IP
			}
		}
		if s.firstWrong != "" && len(res.Notes) < 4 {
			res.Notes = append(res.Notes, s.firstWrong)
		}
		if s.firstLost != "" {
			res.Notes = append(res.Notes, s.firstLost)
		}
	}
	if firstGone != "" {
		res.Notes = append(res.Notes, firstGone)
	}
	res.Notes = append(res.Notes, fmt.Sprintf("longest gap on %s (layer 2), %s (BGP)", gapAddr, bgpGapAddr))
	res.Rows = []Row{
		reportedRow(ScenarioRollout, "requests lost", lost, sent),
		{Scenario: ScenarioRollout, Measure: "longest time between two answered requests of one address", Timing: true,
			Duration: gap, Target: fmt.Sprintf("≤ %.0f s", GapTarget.Seconds()), Met: gap <= GapTarget},
		countRow(ScenarioRollout, "requests answered by a node other than the announcing one, once the statuses settled", wrong, sent),
		countRow(ScenarioRollout, "BGP: router table reads (× prefix) with a path via the node whose speaker is stopped", goneRoutes, goneReads),
		reportedRow(ScenarioRollout, "BGP: requests lost (client through the router)", bgpLost, bgpSent),
		{Scenario: ScenarioRollout, Measure: "BGP: longest time between two answered requests of one address", Timing: true,
			Duration: bgpGap, Target: fmt.Sprintf("≤ %.0f s", GapTarget.Seconds()), Met: bgpGap <= GapTarget},
	}
	return res, nil
}

// pathFrom reports whether a path of the router's table was learnt from
// the node at addr (its peer or one of its next hops).
func pathFrom(p lab.BGPPath, addr netip.Addr) bool {
	if p.PeerID == addr.String() {
		return true
	}
	for _, nh := range p.NextHops {
		if nh.IP == addr.String() {
			return true
		}
	}
	return false
}

// newBGPServices creates pool and BGPAdvertisement pool (n addresses from
// first, not auto-assigned), a BGPPeer "<pool>-router" from every node to
// the lab's router (graceful restart on, hold time 9 s, connect time 1 s)
// and n LoadBalancer Services "bgpNN" in ns with a ready endpoint on every
// node; it waits until each has its address and returns them with their
// /32 prefixes. cleanup deletes what it created (also after an error).
func newBGPServices(ctx context.Context, e *Env, ns, pool string, first netip.Addr, n int) (svcs []service, prefixes []string, cleanup func(context.Context) error, err error) {
	last := first
	for range n - 1 {
		last = last.Next()
	}
	if !lab.BGPPrefixV4.Contains(first) || !lab.BGPPrefixV4.Contains(last) {
		return nil, nil, func(context.Context) error { return nil }, fmt.Errorf("%s: %s-%s is not in the lab's BGP range %s", pool, first, last, lab.BGPPrefixV4)
	}
	c := e.Herald.Client()
	objs := []client.Object{
		&v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: pool, Namespace: lab.HeraldNamespace},
			Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{first.String() + "-" + last.String()}, AutoAssign: ptr.To(false)}},
		&v1beta1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: pool, Namespace: lab.HeraldNamespace},
			Spec: v1beta1.BGPAdvertisementSpec{IPAddressPools: []string{pool}}},
		&v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: pool + "-router", Namespace: lab.HeraldNamespace},
			Spec: v1beta2.BGPPeerSpec{MyASN: lab.NodeASN, PeerASN: lab.RouterASN, PeerAddress: lab.RouterAddr.String(),
				HoldTime: &metav1.Duration{Duration: 9 * time.Second}, ConnectTime: &metav1.Duration{Duration: time.Second},
				EnableGracefulRestart: true}},
	}
	k := e.Lab.Client()
	var names []string
	cleanup = func(ctx context.Context) error {
		var errs []error
		for _, name := range names {
			if err := k.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
		for i := len(objs) - 1; i >= 0; i-- {
			if err := c.Delete(ctx, objs[i]); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, nil, cleanup, fmt.Errorf("create %T %s: %w", obj, obj.GetName(), err)
		}
	}
	var eps []lab.Endpoint
	for _, nd := range e.Lab.Nodes {
		eps = append(eps, lab.Endpoint{Node: nd.Name, Ready: true})
	}
	for i := range n {
		name := fmt.Sprintf("bgp%02d", i)
		names = append(names, name)
		if _, err := k.CoreV1().Services(ns).Create(ctx, lbService(ns, name, pool), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, nil, cleanup, fmt.Errorf("create service %s/%s: %w", ns, name, err)
		}
		if err := e.Lab.SetEndpoints(ctx, ns, name, eps); err != nil {
			return nil, nil, cleanup, err
		}
	}
	for _, name := range names {
		ips, err := e.Herald.WaitServiceIPs(ctx, ns, name, 1)
		if err != nil {
			return nil, nil, cleanup, err
		}
		svcs = append(svcs, service{Namespace: ns, Name: name, IP: ips[0]})
		prefixes = append(prefixes, ips[0].String()+"/32")
	}
	return svcs, prefixes, cleanup, nil
}

// settleStatus waits (at most timeout) until every Service of the fixture
// has had exactly one ServiceL2Status naming the same node for
// statusStable, and returns the nodes they name. It sends nothing on the
// wire.
func (f *l2Fixture) settleStatus(ctx context.Context, e *Env, timeout time.Duration) (owners, error) {
	deadline := time.Now().Add(timeout)
	var prev owners
	var since time.Time
	for {
		o, err := f.statusOwners(ctx, e)
		switch {
		case err != nil:
			prev = nil
		case prev == nil || !maps.Equal(prev, o):
			prev, since = o, time.Now()
		case time.Since(since) >= statusStable:
			return o, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if err == nil {
				err = fmt.Errorf("still changing: %v", o)
			}
			return nil, fmt.Errorf("statuses not settled within %s: %w", timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// statusStable is how long the statuses must stay the same to count as
// settled (a move shows one status on the old node, then one on the new).
const statusStable = 1500 * time.Millisecond

// statusOwners returns the node of each Service's one ServiceL2Status, or
// an error when a Service has none or several.
func (f *l2Fixture) statusOwners(ctx context.Context, e *Env) (owners, error) {
	o := owners{}
	for _, s := range f.services {
		st, err := e.Herald.L2Statuses(ctx, s.Namespace, s.Name)
		if err != nil {
			return nil, err
		}
		if len(st) != 1 {
			return nil, fmt.Errorf("%s/%s has %d ServiceL2Status objects", s.Namespace, s.Name, len(st))
		}
		o[s.IP] = st[0].Status.Node
	}
	return o, nil
}

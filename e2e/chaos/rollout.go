package chaos

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"sync"
	"time"
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
	// Interval is the pause between two requests of one address's
	// poller; 0 means 100 ms.
	Interval time.Duration
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
	if o.Interval == 0 {
		o.Interval = 100 * time.Millisecond
	}
}

// ScenarioRollout names the rolling update scenario in the table.
const ScenarioRollout = "rolling update of the speakers"

// GapTarget is the product target for the longest time an address goes
// unanswered during a rollout.
const GapTarget = time.Second

// Rollout rolls the speakers as a DaemonSet update with maxUnavailable 1
// does: one node at a time, SIGTERM, start, wait until it is ready, and
// until every Service has one ServiceL2Status again, then the next node.
// Meanwhile the client polls every address over HTTP (a new connection
// per request, 1 s timeout, o.Interval apart). The client's ARP is never
// probed meanwhile (replies would correct its neighbour cache). It
// reports:
//
//   - requests lost (failed or timed out), reported without a target: a
//     connection in flight when its address moves to another node is reset
//     by that node (it has no socket for it), as with any layer 2 failover;
//     what the rollout must bound is the gap, below;
//   - the longest time between two answered requests of one address
//     (target GapTarget);
//   - requests answered by a node other than the owner its
//     ServiceL2Status names, from when the statuses settled after a node's
//     start until the next node's stop (target 0): traffic a wrong
//     neighbour entry sends to a node that is not announcing.
func Rollout(ctx context.Context, e *Env, o RolloutOptions) (res Result, err error) {
	o.defaults()
	res = Result{Scenario: ScenarioRollout, Form: fmt.Sprintf("%d round(s), %d addresses", o.Rounds, o.Addresses)}
	f, err := newL2Fixture(ctx, e, "rollout", o.First, o.Addresses)
	if err != nil {
		return res, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = f.delete(dctx, e, "rollout")
	}()
	before, err := f.settle(ctx, e, 90*time.Second)
	if err != nil {
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
	st := make([]stats, len(f.services))
	pctx, stopPolling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, s := range f.services {
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
					if judging && r.Node != cur[s.IP] {
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
	rollErr := func() error {
		for round := range o.Rounds {
			for _, n := range e.Herald.SpeakerNodes() {
				mu.Lock()
				judging = false
				mu.Unlock()
				if err := e.Herald.StopSpeaker(n); err != nil {
					return err
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
	var sent, lost, wrong int
	var gap time.Duration
	var gapAddr netip.Addr
	for i, s := range st {
		sent += s.sent
		lost += s.lost
		wrong += s.wrong
		if s.gap > gap {
			gap, gapAddr = s.gap, f.services[i].IP
		}
		if s.firstWrong != "" && len(res.Notes) < 4 {
			res.Notes = append(res.Notes, s.firstWrong)
		}
		if s.firstLost != "" {
			res.Notes = append(res.Notes, s.firstLost)
		}
	}
	res.Notes = append(res.Notes, fmt.Sprintf("longest gap on %s", gapAddr))
	res.Rows = []Row{
		reportedRow(ScenarioRollout, "requests lost", lost, sent),
		{Scenario: ScenarioRollout, Measure: "longest time between two answered requests of one address", Timing: true,
			Duration: gap, Target: fmt.Sprintf("≤ %.0f s", GapTarget.Seconds()), Met: gap <= GapTarget},
		countRow(ScenarioRollout, "requests answered by a node other than the announcing one, once the statuses settled", wrong, sent),
	}
	return res, nil
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

package chaos

import (
	"context"
	"fmt"
	"net/netip"
	"time"
)

// LinkCutOptions shapes the link cut scenario.
type LinkCutOptions struct {
	// Cut is how long the node's switch port stays down; 0 means 60 s.
	Cut time.Duration
	// Observe is how long after the restore the client keeps probing;
	// 0 means 90 s.
	Observe time.Duration
	// Grace is when, after the restore, answers start to count for the
	// answerer rows; 0 means 5 s (the time row has its own target).
	Grace time.Duration
	// Trials is the number of cuts; 0 means 3.
	Trials int
	// Addresses is the number of layer 2 Services; 0 means 6.
	Addresses int
	// First is the first address of the scenario's pool; zero means
	// 198.51.100.212.
	First netip.Addr
}

func (o *LinkCutOptions) defaults() {
	if o.Cut == 0 {
		o.Cut = 60 * time.Second
	}
	if o.Observe == 0 {
		o.Observe = 90 * time.Second
	}
	if o.Grace == 0 {
		o.Grace = 5 * time.Second
	}
	if o.Trials == 0 {
		o.Trials = 3
	}
	if o.Addresses == 0 {
		o.Addresses = 6
	}
	if !o.First.IsValid() {
		o.First = netip.MustParseAddr("198.51.100.212")
	}
}

// ScenarioLinkCut names the link cut scenario in the table.
const ScenarioLinkCut = "node link cut, then restored"

// SingleAnswererTarget is the product target for one answerer per address
// after a partition heals.
const SingleAnswererTarget = 2 * time.Second

// LinkCut takes the switch port of the node owning most of o.Addresses
// layer 2 addresses down for o.Cut (the others take its addresses over;
// it, alone, believes the others dead), restores it and probes every
// address from the client (one ARP request each, all replies collected)
// for o.Observe. It reports:
//
//   - the most nodes answering one address in any probe from o.Grace
//     after the restore on (target 1);
//   - address probes nobody answered from o.Grace on (target 0);
//   - the time from the restore until every address has had exactly one
//     answerer in every later probe (target SingleAnswererTarget); when
//     the last probe still saw otherwise, the whole window and "not met".
func LinkCut(ctx context.Context, e *Env, o LinkCutOptions) (Result, error) {
	o.defaults()
	res := Result{Scenario: ScenarioLinkCut, Form: fmt.Sprintf("%d cuts of %s, %d addresses", o.Trials, o.Cut, o.Addresses)}
	f, err := newL2Fixture(ctx, e, "linkcut", o.First, o.Addresses)
	if err != nil {
		return res, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = f.delete(dctx, e, "linkcut")
	}()
	var agg healMeasure
	agg.converged = true
	for trial := range o.Trials {
		m, notes, err := cutOnce(ctx, e, f, o)
		for _, n := range notes {
			res.Notes = append(res.Notes, fmt.Sprintf("trial %d: %s", trial+1, n))
		}
		if err != nil {
			return res, err
		}
		res.Notes = append(res.Notes, fmt.Sprintf("trial %d: most answerers %d, unanswered %d of %d, single answerer after %.3f s",
			trial+1, m.maxAnswerers, m.unanswered, m.counted, m.single.Seconds()))
		agg.maxAnswerers = max(agg.maxAnswerers, m.maxAnswerers)
		agg.unanswered += m.unanswered
		agg.counted += m.counted
		agg.single = max(agg.single, m.single)
		agg.converged = agg.converged && m.converged
	}
	m := agg
	res.Rows = []Row{
		{Scenario: ScenarioLinkCut, Measure: fmt.Sprintf("most nodes answering one address, %s after the restore and later", o.Grace),
			Count: m.maxAnswerers, Target: "1", Met: m.maxAnswerers == 1},
		countRow(ScenarioLinkCut, fmt.Sprintf("address probes nobody answered, %s after the restore and later", o.Grace), m.unanswered, m.counted),
		{Scenario: ScenarioLinkCut, Measure: "time from the restore to a single answerer for every address (worst trial)", Timing: true,
			Duration: m.single, Target: fmt.Sprintf("≤ %.0f s", SingleAnswererTarget.Seconds()), Met: m.converged && m.single <= SingleAnswererTarget},
	}
	return res, nil
}

// cutOnce plays one cut and heal and measures it.
func cutOnce(ctx context.Context, e *Env, f *l2Fixture, o LinkCutOptions) (m healMeasure, notes []string, err error) {
	before, err := f.settle(ctx, e, 90*time.Second)
	if err != nil {
		return m, notes, fmt.Errorf("%s: before: %w", ScenarioLinkCut, err)
	}
	node, most := "", -1
	for _, n := range e.Herald.SpeakerNodes() {
		if c := countOwned(before, n); c > most {
			node, most = n, c
		}
	}
	cutAt := time.Now()
	if err := e.Herald.CutLink(ctx, node); err != nil {
		return m, notes, err
	}
	restored := false
	defer func() {
		if !restored {
			_ = e.Herald.RestoreLink(context.WithoutCancel(ctx), node)
		}
	}()
	// The others take over (the cut node's ServiceL2Status cannot be
	// updated by it: only the wire counts here).
	if _, err := f.settleARP(ctx, e, 30*time.Second); err != nil {
		return m, notes, fmt.Errorf("%s: failover during the cut: %w", ScenarioLinkCut, err)
	}
	notes = append(notes, fmt.Sprintf("cut %s (owned %d of %d); the others answered every address %.1f s after the cut",
		node, most, o.Addresses, time.Since(cutAt).Seconds()))
	// The cut lasts o.Cut: the scenario's own duration.
	time.Sleep(time.Until(cutAt.Add(o.Cut)))
	if err := e.Herald.RestoreLink(ctx, node); err != nil {
		return m, notes, err
	}
	restored = true
	healAt := time.Now()
	var probes []probe
	for time.Since(healAt) < o.Observe {
		if err := ctx.Err(); err != nil {
			return m, notes, err
		}
		at := time.Since(healAt)
		who, err := e.Lab.ProbeARP(ctx, f.addrs(), 300*time.Millisecond)
		if err != nil {
			return m, notes, err
		}
		probes = append(probes, probe{at: at, end: time.Since(healAt), who: who})
	}
	m = measureHeal(probes, o.Grace, o.Observe)
	if !m.converged {
		notes = append(notes, fmt.Sprintf("still not one answerer per address %s after the restore: %v", o.Observe, probes[len(probes)-1].who))
	}
	if m.firstMulti != "" {
		notes = append(notes, "after the restore: "+m.firstMulti)
	}
	// Leave one owner per address for the next scenario; a restart joins at
	// once where memberlist would rejoin only after --ml-rejoin-interval.
	if _, err := f.settle(ctx, e, 30*time.Second); err != nil {
		notes = append(notes, fmt.Sprintf("not settled 30 s after the window (%v): %s's speaker restarted", err, node))
		if err := e.Herald.StopSpeaker(node); err != nil {
			return m, notes, err
		}
		if err := e.Herald.StartSpeaker(ctx, node); err != nil {
			return m, notes, err
		}
		if _, err := f.settle(ctx, e, 60*time.Second); err != nil {
			return m, notes, fmt.Errorf("%s: after the restart: %w", ScenarioLinkCut, err)
		}
	}
	return m, notes, nil
}

// probe is one round of ARP requests after the heal: started at, ended at
// (both since the restore), and who answered each address.
type probe struct {
	at, end time.Duration
	who     map[netip.Addr][]string
}

type healMeasure struct {
	maxAnswerers, unanswered, counted int
	single                            time.Duration
	converged                         bool
	firstMulti                        string
}

// measureHeal reduces the probes after a heal (in order): the most
// answerers of one address and the unanswered address probes among those
// started at grace or later, and the time to a single answerer (the end of
// the last probe that saw an address with other than one answerer; 0 when
// none did). converged is false when the last probe was such a probe (then
// single is window).
func measureHeal(probes []probe, grace, window time.Duration) healMeasure {
	var m healMeasure
	m.converged = true
	for i, p := range probes {
		bad := false
		for a, w := range p.who {
			if len(w) != 1 {
				bad = true
				if m.firstMulti == "" && len(w) > 1 {
					m.firstMulti = fmt.Sprintf("%s answered by %v %.1f s after", a, w, p.at.Seconds())
				}
			}
			if p.at >= grace {
				m.counted++
				m.maxAnswerers = max(m.maxAnswerers, len(w))
				if len(w) == 0 {
					m.unanswered++
				}
			}
		}
		if bad {
			m.single = p.end
			if i == len(probes)-1 {
				m.converged = false
				m.single = window
			}
		}
	}
	return m
}

// settleARP waits (at most timeout) until every address has exactly one
// answerer on the wire, whatever the status objects say.
func (f *l2Fixture) settleARP(ctx context.Context, e *Env, timeout time.Duration) (owners, error) {
	deadline := time.Now().Add(timeout)
	for {
		who, err := e.Lab.ProbeARP(ctx, f.addrs(), 300*time.Millisecond)
		if err != nil {
			return nil, err
		}
		o, bad := owners{}, ""
		for a, w := range who {
			if len(w) != 1 {
				bad = fmt.Sprintf("%s answered by %v", a, w)
				break
			}
			o[a] = w[0]
		}
		if bad == "" {
			return o, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("not one answerer per address within %s: %s", timeout, bad)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

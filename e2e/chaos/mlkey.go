package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/e2e/lab"
	"github.com/herald-lb/herald/internal/layer2"
	"github.com/herald-lb/herald/internal/members"
	"github.com/herald-lb/herald/internal/poll"
)

// MLKeyOptions shapes the memberlist key rotation scenario.
type MLKeyOptions struct {
	// Addresses is the number of layer 2 Services; 0 means 4.
	Addresses int
	// First is the first address of the scenario's pool; zero means
	// 198.51.100.236.
	First netip.Addr
	// Rotations is how many times the Secret is deleted and its new key
	// handed out; 0 means 1.
	Rotations int
	// Secret is the memberlist Secret's name; "" means herald-memberlist
	// (the manifests' and the chart's).
	Secret string
	// Stagger is how long each node stays on its keys before the next
	// node gets the new Secret (the kubelet's sync period spreads the
	// update over a minute or so); 0 means 10 s.
	Stagger time.Duration
	// Timeout bounds each wait (Secret re-created, a speaker on the new
	// key); 0 means 1 min.
	Timeout time.Duration
	// AloneAfter is the speakers' --ml-alone-after (a starting speaker
	// whose joins all fail for this long elects as if alone); 0 means
	// 10 s, the default. The speaker restarted mid-rotation is watched
	// for 5 s longer than this before the others get the new key.
	AloneAfter time.Duration
}

func (o *MLKeyOptions) defaults() {
	if o.Addresses == 0 {
		o.Addresses = 4
	}
	if !o.First.IsValid() {
		o.First = netip.MustParseAddr("198.51.100.236")
	}
	if o.Rotations == 0 {
		o.Rotations = 1
	}
	if o.Secret == "" {
		o.Secret = "herald-memberlist"
	}
	if o.Stagger == 0 {
		o.Stagger = 10 * time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = time.Minute
	}
	if o.AloneAfter == 0 {
		o.AloneAfter = 10 * time.Second
	}
}

// ScenarioMLKey names the memberlist key rotation scenario in the table.
const ScenarioMLKey = "memberlist Secret deleted; key rotated"

// MLKeyRotation deletes the memberlist Secret under running speakers (the
// controller creates it again with a new key), hands the new Secret to
// the speakers' mounted files one node at a time (o.Stagger apart), as the kubelet does some
// time after a Secret changed (lab.Herald.SyncSpeakerSecrets), and waits
// until each speaker installed the new key and all finished the rotation
// (their logs say so, naming the key's ID); o.Rotations times. In each
// rotation, once the Secret is re-created and before any node's files are
// updated, the last node's speaker is restarted (SIGTERM, start): as a
// new Pod its files already hold the new key and, as previoussecretkey,
// the replaced one, while the others still run on the old key alone; the
// others get the new files only once it has joined them and
// o.AloneAfter + 5 s have passed since its start. From before the delete
// until the end the client probes every layer 2 address (one ARP request
// each, every reply collected) in a loop. It reports:
//
//   - the most nodes answering one address in one probe, throughout
//     (target 1) but for the hand-back: from the restarted speaker's start
//     until handbackFor after it joined (at most o.AloneAfter when it has
//     not joined by then), when it takes its addresses back
//     from the interim owner and both may answer for one gratuitous burst
//     (reported separately, without a target); a speaker that elects as if
//     alone 10 s after its start shows in the first;
//   - the longest overlap: how long two nodes answered one address, from
//     a capture of the client's switch port (the client also sends a
//     request for every address every overlapRequestEvery; see
//     answerStretches), throughout; target: at most one gratuitous burst
//     (layer2.DefaultBurstLength), with the longest per rotation and
//     address in the notes;
//   - address probes nobody answered (target 0), and address probes
//     answered by another node than the owner from before (target 0: a
//     rotation moves nothing), both outside the restart window (from the
//     stop until a probe finds every address answered by its owner from
//     before alone again: the restarted node's addresses fail over and
//     back meanwhile, as with any restart);
//   - restarted speakers that elected as if alone (their log says so;
//     target 0): split brain while the keys differ; and restarted
//     speakers that had not joined the others o.Timeout after their start
//     (target 0; the scenario then hands the others the new files anyway
//     and goes on counting answerers).
func MLKeyRotation(ctx context.Context, e *Env, o MLKeyOptions) (res Result, err error) {
	o.defaults()
	res = Result{Scenario: ScenarioMLKey, Form: fmt.Sprintf("%d rotations (a speaker restarted in each), %d addresses", o.Rotations, o.Addresses)}
	f, err := newL2Fixture(ctx, e, "mlkey", o.First, o.Addresses)
	if err != nil {
		return res, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = f.delete(dctx, e, "mlkey")
	}()
	before, err := f.settle(ctx, e, 90*time.Second)
	if err != nil {
		return res, fmt.Errorf("%s: before: %w", ScenarioMLKey, err)
	}

	// What the client's port sees (its requests, every answer) and ARP
	// requests every overlapRequestEvery for the overlap measure.
	capture, err := e.Lab.CaptureClientARP()
	if err != nil {
		return res, fmt.Errorf("%s: %w", ScenarioMLKey, err)
	}
	defer func() { err = errors.Join(err, capture.Close()) }()
	pctx, stopProbe := context.WithCancel(ctx)
	defer stopProbe()
	requested := make(chan error, 1)
	go func() { requested <- e.Lab.RequestARP(pctx, f.addrs(), overlapRequestEvery) }()
	// rotationAt: when each rotation began (its delete); an overlap
	// belongs to the last rotation that began before it.
	var rotationAt []time.Time
	var (
		pmu                              sync.Mutex
		most, unanswered, moved, counted int
		firstBad                         string
		probeErr                         error
		// restarting: within the restart window; settledAt: the last
		// probe that found every address answered by its owner alone.
		restarting bool
		settledAt  time.Time
		// handback: from the restarted speaker's start until 2 s after
		// it joined, when it takes its addresses back; mostHandback is
		// the most answerers of one address meanwhile.
		handback     bool
		mostHandback int
		// bad: the first probes (outside the restart window) not answered
		// by the owner alone, with the time.
		bad []string
	)
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		start := time.Now()
		for pctx.Err() == nil {
			who, err := e.Lab.ProbeARP(pctx, f.addrs(), 300*time.Millisecond)
			if err != nil {
				if pctx.Err() == nil {
					pmu.Lock()
					probeErr = err
					pmu.Unlock()
				}
				return
			}
			pmu.Lock()
			settled := true
			for a, w := range who {
				if handback {
					mostHandback = max(mostHandback, len(w))
				} else {
					most = max(most, len(w))
				}
				if len(w) != 1 || w[0] != before[a] {
					settled = false
				}
				if len(w) > 1 && !handback && firstBad == "" {
					firstBad = fmt.Sprintf("%s answered by %v (owner %s) %.1f s after the first delete", a, w, before[a], time.Since(start).Seconds())
				}
				if restarting {
					continue
				}
				counted++
				switch {
				case len(w) == 0:
					unanswered++
				case !slices.Contains(w, before[a]):
					moved++
				}
				if len(w) != 1 || w[0] != before[a] {
					if firstBad == "" {
						firstBad = fmt.Sprintf("%s answered by %v (owner %s) %.1f s after the first delete", a, w, before[a], time.Since(start).Seconds())
					}
					if len(bad) < 8 {
						bad = append(bad, fmt.Sprintf("%s: %s answered by %v (owner %s)", time.Now().UTC().Format("15:04:05.000"), a, w, before[a]))
					}
				}
			}
			if settled {
				settledAt = time.Now()
			}
			pmu.Unlock()
		}
	}()

	// restarted speakers that elected as if alone, that did not join
	alone, notJoined := 0, 0
	var (
		overlapRow      Row
		overlapMeasured bool
	)
	// measureOverlaps stops the requester and turns the capture into the
	// overlap row and notes (once; later calls do nothing).
	measureOverlaps := func() error {
		if overlapMeasured {
			return nil
		}
		overlapMeasured = true
		stopProbe()
		if err := <-requested; err != nil {
			return err
		}
		longest, notes := overlapReport(overlaps(answerStretches(capture.Frames(), f.addrs(), lab.ClientAddr, e.Lab.NodeByMAC, overlapBreakAfter)), f.addrs(), rotationAt)
		res.Notes = append(res.Notes, notes...)
		overlapRow = Row{Scenario: ScenarioMLKey,
			Measure: fmt.Sprintf("longest time two nodes answered one address (client's port captured, ARP requests every %s; per rotation and address in the notes)", overlapRequestEvery),
			Timing:  true, Duration: longest, Target: burstTarget, Met: longest <= layer2.DefaultBurstLength}
		return nil
	}
	rows := func() []Row {
		rs := []Row{
			{Scenario: ScenarioMLKey, Measure: "most nodes answering one address (ARP probes throughout, but for the hand-back below)", Count: most, Target: "1", Met: most == 1},
			{Scenario: ScenarioMLKey, Measure: "most nodes answering one address during the hand-back (restarted speaker's start to 2 s after it joined)", Count: mostHandback, Target: "reported", Met: true},
			countRow(ScenarioMLKey, "address probes nobody answered", unanswered, counted),
			countRow(ScenarioMLKey, "address probes answered by another node than the owner from before", moved, counted),
			countRow(ScenarioMLKey, "speakers restarted mid-rotation (new key + previoussecretkey, the others on the old key) that elected as if alone", alone, o.Rotations),
			countRow(ScenarioMLKey, fmt.Sprintf("speakers restarted mid-rotation that had not joined the others %s after the start", o.Timeout), notJoined, o.Rotations),
		}
		if overlapRow.Scenario != "" {
			rs = slices.Insert(rs, 2, overlapRow)
		}
		return rs
	}
	// A scenario that cannot go on still reports what was counted so far.
	defer func() {
		if err != nil && res.Rows == nil {
			stopProbe()
			<-probed
			if oerr := measureOverlaps(); oerr != nil {
				res.Notes = append(res.Notes, "overlap measure: "+oerr.Error())
			}
			pmu.Lock()
			defer pmu.Unlock()
			if firstBad != "" {
				res.Notes = append(res.Notes, "first probe not answered by the owner alone: "+firstBad)
			}
			res.Rows = rows()
		}
	}()

	secrets := e.Lab.Client().CoreV1().Secrets(lab.HeraldNamespace)
	nodes := e.Herald.SpeakerNodes()
	for r := range o.Rotations {
		old, err := secrets.Get(ctx, o.Secret, metav1.GetOptions{})
		if err != nil {
			return res, fmt.Errorf("%s: %w", ScenarioMLKey, err)
		}
		deletedAt := time.Now()
		rotationAt = append(rotationAt, deletedAt)
		if err := secrets.Delete(ctx, o.Secret, metav1.DeleteOptions{}); err != nil {
			return res, fmt.Errorf("%s: delete Secret: %w", ScenarioMLKey, err)
		}
		var newID string
		if _, err := poll.Wait(ctx, o.Timeout, "the controller re-creates the memberlist Secret", func() error {
			s, err := secrets.Get(ctx, o.Secret, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				return err
			case err != nil:
				return err
			case s.UID == old.UID:
				return fmt.Errorf("still the old Secret")
			case string(s.Data["secretkey"]) == string(old.Data["secretkey"]):
				return fmt.Errorf("re-created Secret has the old key")
			}
			newID = members.SecretID(s.Data["secretkey"])
			return nil
		}); err != nil {
			return res, fmt.Errorf("%s: %w", ScenarioMLKey, err)
		}
		recreated := time.Since(deletedAt)

		// A speaker restarts before the kubelet updated the others' files.
		restarted := nodes[len(nodes)-1]
		joinedBefore, err := speakerLogCount(e, restarted, "memberlist: joined the cluster")
		if err != nil {
			return res, fmt.Errorf("%s: %w", ScenarioMLKey, err)
		}
		aloneBefore, err := speakerLogCount(e, restarted, "electing as if alone")
		if err != nil {
			return res, fmt.Errorf("%s: %w", ScenarioMLKey, err)
		}
		pmu.Lock()
		restarting = true
		pmu.Unlock()
		e.log().Info("memberlist key: restarting a speaker mid-rotation", "node", restarted)
		if err := e.Herald.StopSpeaker(restarted); err != nil {
			return res, fmt.Errorf("%s: %w", ScenarioMLKey, err)
		}
		startedAt := time.Now()
		pmu.Lock()
		handback = true
		pmu.Unlock()
		if err := e.Herald.StartSpeaker(ctx, restarted); err != nil {
			return res, fmt.Errorf("%s: %w", ScenarioMLKey, err)
		}
		// Watch it past --ml-alone-after; it must join the others (whose
		// files still hold the old key alone) meanwhile.
		var joinedAfter time.Duration
		for joinedAfter == 0 || time.Since(startedAt) < o.AloneAfter+5*time.Second {
			n, err := speakerLogCount(e, restarted, "memberlist: joined the cluster")
			if err != nil {
				return res, fmt.Errorf("%s: %w", ScenarioMLKey, err)
			}
			if n > joinedBefore && joinedAfter == 0 {
				joinedAfter = time.Since(startedAt)
				time.AfterFunc(handbackFor, func() {
					pmu.Lock()
					handback = false
					pmu.Unlock()
				})
			}
			if joinedAfter == 0 && time.Since(startedAt) >= o.AloneAfter {
				pmu.Lock()
				handback = false // not joined by now: no hand-back to wait for
				pmu.Unlock()
			}
			if (joinedAfter == 0 && time.Since(startedAt) > o.Timeout) || ctx.Err() != nil {
				pmu.Lock()
				handback = false // it never took its addresses back
				pmu.Unlock()
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		// endRestart closes the restart window once a probe found every
		// address answered by its owner alone again.
		endRestart := func() error {
			threshold := startedAt.Add(o.AloneAfter + 5*time.Second)
			if _, err := poll.Wait(ctx, o.Timeout, "every address answered by its owner alone after the restart", func() error {
				pmu.Lock()
				defer pmu.Unlock()
				if settledAt.Before(threshold) {
					return fmt.Errorf("not since %s", threshold.UTC().Format("15:04:05.0"))
				}
				return nil
			}); err != nil {
				return fmt.Errorf("%s: %w", ScenarioMLKey, err)
			}
			pmu.Lock()
			restarting = false
			pmu.Unlock()
			e.log().Info("memberlist key: restart window over", "node", restarted)
			return nil
		}
		if joinedAfter > 0 {
			res.Notes = append(res.Notes, fmt.Sprintf("rotation %d: speaker %s restarted before the others' files were updated; joined the others %.1f s after it was started",
				r+1, restarted, joinedAfter.Seconds()))
			if err := endRestart(); err != nil {
				return res, err
			}
		} else {
			// Give it the others' files anyway (then it joins) and go on
			// counting answerers: the table shows what the split did.
			notJoined++
			res.Notes = append(res.Notes, fmt.Sprintf("rotation %d: speaker %s restarted before the others' files were updated; had not joined the others %s after it was started",
				r+1, restarted, o.Timeout))
		}
		aloneAfter, err := speakerLogCount(e, restarted, "electing as if alone")
		if err != nil {
			return res, fmt.Errorf("%s: %w", ScenarioMLKey, err)
		}
		alone += aloneAfter - aloneBefore

		for i, node := range nodes {
			if i > 0 {
				// The previous node's stage lasts o.Stagger: the scenario's
				// own timing, while the prober runs.
				time.Sleep(o.Stagger)
			}
			e.log().Info("memberlist key: new Secret files", "node", node)
			if err := e.Herald.SyncSpeakerSecrets(ctx, node); err != nil {
				return res, fmt.Errorf("%s: %w", ScenarioMLKey, err)
			}
			if node == restarted {
				continue // its files had the new key at its start
			}
			if _, err := poll.Wait(ctx, o.Timeout, "new key on "+node, func() error {
				return speakerLogged(e, node, "new key installed for decryption", newID)
			}); err != nil {
				return res, fmt.Errorf("%s: %w", ScenarioMLKey, err)
			}
		}
		if _, err := poll.Wait(ctx, o.Timeout, "every speaker encrypts with the new key alone", func() error {
			for _, node := range nodes {
				if err := speakerLogged(e, node, "memberlist key rotation complete", newID); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return res, fmt.Errorf("%s: %w", ScenarioMLKey, err)
		}
		if joinedAfter == 0 {
			if err := endRestart(); err != nil {
				return res, err
			}
		}
		res.Notes = append(res.Notes, fmt.Sprintf("rotation %d: key %s -> %s; Secret re-created after %.1f s, every speaker on the new key alone %.1f s after the delete",
			r+1, members.SecretID(old.Data["secretkey"]), newID, recreated.Seconds(), time.Since(deletedAt).Seconds()))
		e.log().Info("memberlist key rotated", "rotation", r+1, "key", newID)
	}
	// A few more probes after the last rotation (observation window).
	time.Sleep(2 * time.Second)
	stopProbe()
	<-probed
	pmu.Lock()
	defer pmu.Unlock()
	if probeErr != nil {
		return res, fmt.Errorf("%s: probe: %w", ScenarioMLKey, probeErr)
	}
	if err := measureOverlaps(); err != nil {
		return res, fmt.Errorf("%s: overlap: %w", ScenarioMLKey, err)
	}
	if firstBad != "" {
		res.Notes = append(res.Notes, "first probe not answered by the owner alone: "+firstBad)
	}
	if len(bad) > 0 {
		res.Notes = append(res.Notes, "probes outside the restart window not answered by the owner alone (first 8): "+strings.Join(bad, "; "))
	}
	res.Rows = rows()
	return res, nil
}

// overlapRequestEvery is how often the client asks for every address
// (besides the prober's requests) while its port is captured: the overlap
// measure's resolution. overlapBreakAfter unanswered requests in a row end
// an answerer's stretch (about 0.45 s with both requesters): shorter gaps,
// a lost reply or a stalled process, count as answering, so an overlap is
// never cut short.
const (
	overlapRequestEvery = 50 * time.Millisecond
	overlapBreakAfter   = 10
)

// burstTarget is the overlap row's target: one gratuitous burst as the
// speaker defines it (internal/layer2.DefaultBurstLength).
var burstTarget = fmt.Sprintf("≤ %.1f s (one gratuitous burst: %d packets %s apart)",
	layer2.DefaultBurstLength.Seconds(), layer2.DefaultGratuitousCount, layer2.DefaultGratuitousInterval)

// overlapReport returns the longest of ovs and one note per rotation
// (rotationAt: when each began; overlaps before the first belong to it)
// with the longest overlap of each of addrs, the nodes and its start.
func overlapReport(ovs []overlap, addrs []netip.Addr, rotationAt []time.Time) (time.Duration, []string) {
	n := max(len(rotationAt), 1)
	worst := make([]map[netip.Addr]overlap, n)
	for i := range worst {
		worst[i] = map[netip.Addr]overlap{}
	}
	var longest time.Duration
	for _, o := range ovs {
		r := 0
		for i, at := range rotationAt {
			if !o.Start.Before(at) {
				r = i
			}
		}
		if o.Duration() > worst[r][o.Addr].Duration() {
			worst[r][o.Addr] = o
		}
		longest = max(longest, o.Duration())
	}
	var notes []string
	for r := range n {
		var parts []string
		for _, a := range addrs {
			o, ok := worst[r][a]
			if !ok {
				parts = append(parts, a.String()+" 0 s")
				continue
			}
			parts = append(parts, fmt.Sprintf("%s %.3f s (%s and %s from %s)", a, o.Duration().Seconds(), o.Nodes[0], o.Nodes[1], o.Start.UTC().Format("15:04:05.000")))
		}
		notes = append(notes, fmt.Sprintf("rotation %d: longest time two nodes answered each address: %s", r+1, strings.Join(parts, ", ")))
	}
	return longest, notes
}

// handbackFor is how long after the restarted speaker joined the others
// its addresses are still being handed back: the interim owner may answer
// for up to one gratuitous burst (0.8 s) after the restarted one claimed
// (docs/reliability.md, "Two nodes answering for one address").
const handbackFor = 2 * time.Second

// speakerLogged returns nil when node's speaker log has a line containing
// every one of parts.
func speakerLogged(e *Env, node string, parts ...string) error {
	b, err := os.ReadFile(filepath.Join(e.Lab.StateDir(), e.Herald.SpeakerProcessName(node)+".log"))
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
			return nil
		}
	}
	return fmt.Errorf("speaker %s has not logged %q", node, parts)
}

// speakerLogCount counts the lines of node's speaker log that contain part.
func speakerLogCount(e *Env, node, part string) (int, error) {
	b, err := os.ReadFile(filepath.Join(e.Lab.StateDir(), e.Herald.SpeakerProcessName(node)+".log"))
	if err != nil {
		return 0, err
	}
	return strings.Count(string(b), part), nil
}

package chaos

import (
	"context"
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
}

// ScenarioMLKey names the memberlist key rotation scenario in the table.
const ScenarioMLKey = "memberlist Secret deleted; key rotated"

// MLKeyRotation deletes the memberlist Secret under running speakers (the
// controller creates it again with a new key), hands the new Secret to
// the speakers' mounted files one node at a time (o.Stagger apart), as the kubelet does some
// time after a Secret changed (lab.Herald.SyncSpeakerSecrets), and waits
// until each speaker installed the new key and all finished the rotation
// (their logs say so, naming the key's ID); o.Rotations times. From
// before the delete until the end the client probes every layer 2 address
// (one ARP request each, every reply collected) in a loop. It reports:
//
//   - the most nodes answering one address in one probe (target 1);
//   - address probes nobody answered (target 0);
//   - address probes answered by another node than the owner from before
//     (target 0: a rotation moves nothing).
func MLKeyRotation(ctx context.Context, e *Env, o MLKeyOptions) (res Result, err error) {
	o.defaults()
	res = Result{Scenario: ScenarioMLKey, Form: fmt.Sprintf("%d rotations, %d addresses", o.Rotations, o.Addresses)}
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

	pctx, stopProbe := context.WithCancel(ctx)
	defer stopProbe()
	var (
		pmu                              sync.Mutex
		most, unanswered, moved, counted int
		firstBad                         string
		probeErr                         error
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
			for a, w := range who {
				counted++
				most = max(most, len(w))
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
				}
			}
			pmu.Unlock()
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
		for i, node := range nodes {
			if i > 0 {
				// The previous node's stage lasts o.Stagger: the scenario's
				// own timing, while the prober runs.
				time.Sleep(o.Stagger)
			}
			if err := e.Herald.SyncSpeakerSecrets(ctx, node); err != nil {
				return res, fmt.Errorf("%s: %w", ScenarioMLKey, err)
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
	if firstBad != "" {
		res.Notes = append(res.Notes, "first probe not answered by the owner alone: "+firstBad)
	}
	res.Rows = []Row{
		{Scenario: ScenarioMLKey, Measure: "most nodes answering one address (ARP probes throughout)", Count: most, Target: "1", Met: most == 1},
		countRow(ScenarioMLKey, "address probes nobody answered", unanswered, counted),
		countRow(ScenarioMLKey, "address probes answered by another node than the owner from before", moved, counted),
	}
	return res, nil
}

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

package speaker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/announce"
	"github.com/herald-lb/herald/internal/config"
	"github.com/herald-lb/herald/internal/poll"
)

// handoverWait is the hand-over timeout of the tests that must see the
// release end the wait: longer than every poll of the test, so that
// answering within a poll proves the release (not the timeout) let the
// taker answer.
const handoverWait = 10 * time.Minute

func withHandoverTimeout(d time.Duration) func(*testSpeaker, *Options) {
	return func(_ *testSpeaker, o *Options) { o.HandoverTimeout = d }
}

// decidedOrWaiting is a poll condition: s announces ip for key, or reports
// it as waiting for the hand-over. Both mean s has decided ip with its
// current view.
func decidedOrWaiting(s *testSpeaker, key string, ip netip.Addr) func() error {
	return func() error {
		if slices.Contains(s.l2.announced(key), ip.String()) {
			return nil
		}
		if v, _ := gauge(s.reg, "herald_speaker_not_announced", map[string]string{"protocol": protoL2, "reason": reasonHandoverPending}); v >= 1 {
			return nil
		}
		return fmt.Errorf("%s neither announces %s nor waits for a hand-over", s.name, ip)
	}
}

// TestHandBackWaitsForRelease is the hand-back of issues #11 and #13: a
// speaker (n1) comes back and wins an address that another live speaker
// (n2) answers, before n2 has processed n1's return (the two speakers see
// the membership change at different moments). n1 must not answer while
// n2 still does (the e2e runs measured two answerers for up to 0.25 s):
// it answers once n2 has withdrawn the address and released it, and the
// timeout does not come into it. A crashed holder is not waited for.
func TestHandBackWaitsForRelease(t *testing.T) {
	f := newL2Fixture(t, "n1", "n2")
	ip := ipWonBy(t, "n1", "n1", "n2")
	key := f.service("web", ip, "n2")

	// n2 alone: it answers.
	view2 := &liveness{live: map[string]bool{"n2": true}}
	s2 := startSpeakerProbedWith(t, f, "n2", view2, withHandoverTimeout(handoverWait))
	poll.Until(t, 30*time.Second, "n2 answers while n1 is down", func() error {
		if got := s2.l2.announced(key); !slices.Equal(got, []string{ip.String()}) {
			return fmt.Errorf("n2 announces %v", got)
		}
		return nil
	})

	// n1 starts and joins: it sees n2 live and wins ip. n2 has not
	// processed n1's join yet, so it still answers.
	view1 := &liveness{live: map[string]bool{"n1": true, "n2": true}}
	s1 := startSpeakerProbedWith(t, f, "n1", view1, withHandoverTimeout(handoverWait))
	s2.l2.setOnReleased(func(ips []netip.Addr) { s1.spk.L2Released("n2", ips) })
	poll.Until(t, 30*time.Second, "n1 decided "+ip.String(), decidedOrWaiting(s1, key, ip))
	if got := s1.l2.announced(key); len(got) != 0 {
		t.Fatalf("n1 answers %v while n2, live, still answers %v: two answerers", got, s2.l2.announced(key))
	}

	// n2 processes the join: it withdraws and releases, and n1 answers.
	view2.set("n1", true)
	poll.Until(t, 30*time.Second, "n1 answers after n2's release", func() error {
		if got := s1.l2.announced(key); !slices.Equal(got, []string{ip.String()}) {
			return fmt.Errorf("n1 announces %v (n2: %v)", got, s2.l2.announced(key))
		}
		return nil
	})
	if got := s2.l2.announced(key); len(got) != 0 {
		t.Errorf("n2 still announces %v after its release", got)
	}
	if v, _ := gauge(s1.reg, "herald_layer2_handovers_total", map[string]string{"outcome": "released"}); v != 1 {
		t.Errorf("n1 herald_layer2_handovers_total{outcome=released} = %v, want 1", v)
	}

	// n1 crashes (no release): n2 takes over at once, not after the
	// timeout: failover is not slowed by the hand-over.
	view2.set("n1", false)
	poll.Until(t, 30*time.Second, "n2 takes over from the crashed n1", func() error {
		if got := s2.l2.announced(key); !slices.Equal(got, []string{ip.String()}) {
			return fmt.Errorf("n2 announces %v", got)
		}
		return nil
	})
	if v, _ := gauge(s2.reg, "herald_layer2_handovers_total", map[string]string{"outcome": "previousNotLive"}); v != 1 {
		t.Errorf("n2 herald_layer2_handovers_total{outcome=previousNotLive} = %v, want 1", v)
	}
}

// TestHandoverTimeout: a previous holder that never releases (a MetalLB
// speaker during a migration, an older Herald, a lost message) delays the
// taker by the timeout only.
func TestHandoverTimeout(t *testing.T) {
	f := newL2Fixture(t, "n1", "n2")
	ip := ipWonBy(t, "n1", "n1", "n2")
	key := f.service("web", ip, "n2")
	view1 := &liveness{live: map[string]bool{"n1": true, "n2": true}}
	s1 := startSpeakerProbedWith(t, f, "n1", view1, withHandoverTimeout(300*time.Millisecond))
	poll.Until(t, 30*time.Second, "n1 answers after the timeout", func() error {
		if got := s1.l2.announced(key); !slices.Equal(got, []string{ip.String()}) {
			return fmt.Errorf("n1 announces %v", got)
		}
		return nil
	})
	if v, _ := gauge(s1.reg, "herald_layer2_handovers_total", map[string]string{"outcome": "timedOut"}); v != 1 {
		t.Errorf("herald_layer2_handovers_total{outcome=timedOut} = %v, want 1", v)
	}
	// The decision that follows the takeover clears the reason; it may
	// run just after the announcer answers.
	poll.Until(t, 10*time.Second, "no address reported waiting after the takeover", func() error {
		if v, ok := gauge(s1.reg, "herald_speaker_not_announced", map[string]string{"protocol": protoL2, "reason": reasonHandoverPending}); ok && v != 0 {
			return fmt.Errorf("still %v address(es) reported waiting", v)
		}
		return nil
	})
}

// TestHandoverFromSpeakerWithoutReleases: a previous holder whose speaker
// does not advertise releases (a MetalLB speaker during the migration, an
// older Herald), with no prober (Options.L2Probe nil), is not waited for:
// the taker answers at once instead of leaving the address unanswered for
// the timeout (issue #13).
func TestHandoverFromSpeakerWithoutReleases(t *testing.T) {
	f := newL2Fixture(t, "n1", "n2")
	ip := ipWonBy(t, "n1", "n1", "n2")
	key := f.service("web", ip, "n2")
	view1 := &liveness{live: map[string]bool{"n1": true, "n2": true}, noReleases: map[string]bool{"n2": true}}
	s1 := startSpeakerProbedWith(t, f, "n1", view1, withHandoverTimeout(handoverWait))
	poll.Until(t, 30*time.Second, "n1 answers at once", func() error {
		if got := s1.l2.announced(key); !slices.Equal(got, []string{ip.String()}) {
			return fmt.Errorf("n1 announces %v", got)
		}
		return nil
	})
	if v, _ := gauge(s1.reg, "herald_layer2_handovers_total", map[string]string{"outcome": "noReleaseExpected"}); v != 1 {
		t.Errorf("herald_layer2_handovers_total{outcome=noReleaseExpected} = %v, want 1", v)
	}
}

func withProber(p *fakeProber) func(*testSpeaker, *Options) {
	return func(_ *testSpeaker, o *Options) { o.L2Probe = p.probe }
}

// msgProbedSilent is the log message of a takeover after a silent probe.
const msgProbedSilent = "layer 2 hand-over: the previous holder, whose speaker sends no release, stopped answering; taking over"

// TestHandoverProbesSpeakerWithoutReleases is the migration case of issue
// #13: the previous holder of an address is a MetalLB speaker (it sends
// no release), and it still answers the address, either live (it has not
// processed the membership change yet) or after it left memberlist (a
// MetalLB speaker on SIGTERM leaves first and answers until it exits).
// The taker must not answer while it does (two answerers, 2-4 ARP probes
// in 300 in the e2e runs when the taker answered at once): it probes the
// address and answers once nobody else does, long before the timeout.
func TestHandoverProbesSpeakerWithoutReleases(t *testing.T) {
	f := newL2Fixture(t, "n1", "n2")
	ipLive := ipWonBy(t, "n1", "n1", "n2") // n1 wins it with n2 live
	ipLeft := ipWonBy(t, "n2", "n1", "n2") // n1 wins it once n2 left
	keyLive := f.service("live", ipLive, "n2")
	keyLeft := f.service("left", ipLeft, "n1")
	p := newFakeProber()
	p.set(ipLive, true)
	p.set(ipLeft, true)
	view1 := &liveness{live: map[string]bool{"n1": true, "n2": true}, noReleases: map[string]bool{"n2": true}}
	s1 := startSpeakerProbedWith(t, f, "n1", view1, withHandoverTimeout(handoverWait), withProber(p))

	// n2, live, still answers ipLive: held while the probe gets answers.
	poll.Until(t, 30*time.Second, "n1 probes "+ipLive.String(), func() error {
		if p.callsOf(ipLive) == 0 {
			return errors.New("no probe yet")
		}
		return decidedOrWaiting(s1, keyLive, ipLive)()
	})
	if got := s1.l2.announced(keyLive); len(got) != 0 {
		t.Fatalf("n1 answers %v while n2's speaker, which sends no release, still answers it: two answerers", got)
	}
	if v, _ := gauge(s1.reg, "herald_speaker_not_announced", map[string]string{"protocol": protoL2, "reason": reasonHandoverPending}); v != 1 {
		t.Errorf("herald_speaker_not_announced{reason=handoverPending} = %v, want 1", v)
	}
	// n2 stops answering it: n1 answers.
	p.set(ipLive, false)
	poll.Until(t, 30*time.Second, "n1 answers "+ipLive.String()+" once n2 is silent", func() error {
		if got := s1.l2.announced(keyLive); !slices.Equal(got, []string{ipLive.String()}) {
			return fmt.Errorf("n1 announces %v", got)
		}
		return nil
	})
	if v, _ := gauge(s1.reg, "herald_layer2_handovers_total", map[string]string{"outcome": "probedSilent"}); v != 1 {
		t.Errorf("herald_layer2_handovers_total{outcome=probedSilent} = %v, want 1", v)
	}
	if got := s1.l2.announced(keyLeft); len(got) != 0 {
		t.Fatalf("n1 answers %v, which n2 wins", got)
	}

	// n2's speaker leaves memberlist and keeps answering until it exits:
	// n1 wins ipLeft, and waits until the probe finds it silent.
	view1.set("n2", false)
	poll.Until(t, 30*time.Second, "n1 probes "+ipLeft.String()+" after n2 left", func() error {
		if p.callsOf(ipLeft) == 0 {
			return errors.New("no probe yet")
		}
		return decidedOrWaiting(s1, keyLeft, ipLeft)()
	})
	if got := s1.l2.announced(keyLeft); len(got) != 0 {
		t.Fatalf("n1 answers %v while n2's speaker, which left memberlist, still answers it: two answerers", got)
	}
	p.set(ipLeft, false)
	poll.Until(t, 30*time.Second, "n1 answers "+ipLeft.String()+" once n2 is silent", func() error {
		if got := s1.l2.announced(keyLeft); !slices.Equal(got, []string{ipLeft.String()}) {
			return fmt.Errorf("n1 announces %v", got)
		}
		return nil
	})
	if v, _ := gauge(s1.reg, "herald_layer2_handovers_total", map[string]string{"outcome": "probedSilent"}); v != 2 {
		t.Errorf("herald_layer2_handovers_total{outcome=probedSilent} = %v, want 2", v)
	}
	if n := s1.logs.count(msgProbedSilent); n != 2 {
		t.Errorf("%d takeover logs %q, want 2", n, msgProbedSilent)
	}
	if v, ok := gauge(s1.reg, "herald_speaker_not_announced", map[string]string{"protocol": protoL2, "reason": reasonHandoverPending}); ok && v != 0 {
		t.Errorf("still %v address(es) reported waiting after the takeovers", v)
	}
}

// TestHandoverDisabled: a negative timeout takes over at once.
func TestHandoverDisabled(t *testing.T) {
	f := newL2Fixture(t, "n1", "n2")
	ip := ipWonBy(t, "n1", "n1", "n2")
	key := f.service("web", ip, "n2")
	view1 := &liveness{live: map[string]bool{"n1": true, "n2": true}}
	s1 := startSpeakerProbedWith(t, f, "n1", view1, withHandoverTimeout(-1))
	poll.Until(t, 30*time.Second, "n1 answers", func() error {
		if got := s1.l2.announced(key); !slices.Equal(got, []string{ip.String()}) {
			return errors.New("not yet")
		}
		return nil
	})
	if v, _ := gauge(s1.reg, "herald_layer2_handovers_total", map[string]string{"outcome": "disabled"}); v != 1 {
		t.Errorf("herald_layer2_handovers_total{outcome=disabled} = %v, want 1", v)
	}
}

// startSpeakerProbedWith starts the speaker of node in f's namespace with
// its own memberlist view.
func startSpeakerProbedWith(t *testing.T, f *l2Fixture, node string, view *liveness, tune ...func(*testSpeaker, *Options)) *testSpeaker {
	t.Helper()
	m := view.member(node)
	s := startSpeakerProbed(t, f.env, f.ns, node, m, 7946, "0", tune...)
	s.members = m
	return s
}

// TestHandOverGlue drives handOver and L2Released without an API server:
// a won address a live previous holder answers waits, a release ends the
// wait and is used up, a dead holder is not waited for, and an address no
// longer won stops waiting.
func TestHandOverGlue(t *testing.T) {
	f := newPureFixture(t)
	s := f.controller("n1", time.Minute)
	st := &serviceState{}
	ip := f.ip
	in := f.input("n1", map[string]bool{"n1": true, "n2": true})
	d := announce.Decide(in)
	targets := d.L2Targets()
	if len(targets) != 1 {
		t.Fatalf("n1 does not win %s: %+v", ip, d)
	}
	log := slog.New(slog.DiscardHandler)

	got, held := s.handOver(log, st, &in, &d, targets, true)
	if len(got) != 0 || held[announcement{protoL2, ip.String()}].reason != reasonHandoverPending {
		t.Fatalf("live previous holder n2: answered %v, held %v; want a wait", got, held)
	}
	since := st.waiting[ip]
	// Decided again (another event): still waiting, same start.
	if got, _ = s.handOver(log, st, &in, &d, targets, true); len(got) != 0 || !st.waiting[ip].Equal(since) {
		t.Fatalf("second decision: answered %v, wait since %v (was %v)", got, st.waiting[ip], since)
	}
	// n2 releases it: answered.
	s.L2Released("n2", []netip.Addr{ip})
	if got, _ = s.handOver(log, st, &in, &d, targets, true); len(got) != 1 {
		t.Fatalf("after the release: answered %v", got)
	}
	if _, ok := st.waiting[ip]; ok {
		t.Error("still waiting after answering")
	}
	if n := len(s.handover.releasesOf(ip)); n != 0 {
		t.Errorf("%d release(s) left after the takeover used them", n)
	}

	// A new takeover (another Service state, nothing applied) waits for a
	// new release: the old one was used up.
	st2 := &serviceState{}
	if got, _ = s.handOver(log, st2, &in, &d, targets, true); len(got) != 0 {
		t.Fatalf("a used release let a later takeover answer: %v", got)
	}
	// Not won any more: the wait ends.
	if _, _ = s.handOver(log, st2, &in, &d, nil, true); len(st2.waiting) != 0 {
		t.Errorf("waits for an address not won: %v", st2.waiting)
	}

	// The start-up pass is over: a wait that began with a guess keeps
	// waiting for the guessed node...
	s.handover.settled = true
	st3 := &serviceState{}
	if got, _ = s.handOver(log, st3, &in, &d, targets, true); len(got) != 0 {
		t.Fatalf("settled, n2 remembered from the last wait: answered %v", got)
	}
	// ...while an address nobody was seen to hold (a new Service) is
	// answered at once.
	delete(s.handover.last, ip)
	if got, _ = s.handOver(log, &serviceState{}, &in, &d, targets, true); len(got) != 1 {
		t.Fatalf("settled, no previous holder known: answered %v, want at once", got)
	}

	// The previous holder's speaker sends no releases (MetalLB) and this
	// node cannot probe: at once.
	m := s.opts.Members.(*fakeMembers)
	m.live.noReleases = map[string]bool{"n2": true}
	s.handover.noteSenders("n1", m.ReleaseSenders(), in.Live)
	s.handover.last[ip] = "n2"
	if got, _ = s.handOver(log, &serviceState{}, &in, &d, targets, true); len(got) != 1 {
		t.Fatalf("previous holder without releases: answered %v, want at once", got)
	}
	m.live.noReleases = nil
	s.handover.noteSenders("n1", m.ReleaseSenders(), in.Live)

	// The previous holder crashed (a Herald speaker, seen advertising
	// releases while it was live): at once.
	dead := f.input("n1", map[string]bool{"n1": true, "n2": false})
	s.handover.noteSenders("n1", map[string]bool{}, dead.Live)
	dd := announce.Decide(dead)
	if got, _ = s.handOver(log, &serviceState{}, &dead, &dd, dd.L2Targets(), true); len(got) != 1 {
		t.Fatalf("dead previous holder: answered %v, want at once", got)
	}
	// Already answering it (applied for this Service): no wait.
	applied := &serviceState{l2: targets, l2Applied: true}
	if got, _ = s.handOver(log, applied, &in, &d, targets, true); len(got) != 1 {
		t.Fatalf("already answering: answered %v", got)
	}
}

// TestHandOverGlueProbe drives handOver with a prober: a previous holder
// that sends no release and still answers holds the address (one probe,
// however often it is decided), the probe's silence lets it be answered;
// the same for such a holder that left memberlist; a probe that fails
// answers at once; hand-over off does not probe.
func TestHandOverGlueProbe(t *testing.T) {
	f := newPureFixture(t)
	s := f.controller("n1", time.Minute)
	p := newFakeProber()
	s.opts.L2Probe = p.probe
	m := s.opts.Members.(*fakeMembers)
	m.live.noReleases = map[string]bool{"n2": true}
	ip := f.ip
	in := f.input("n1", map[string]bool{"n1": true, "n2": true})
	s.handover.noteSenders("n1", m.ReleaseSenders(), in.Live)
	d := announce.Decide(in)
	targets := d.L2Targets()
	log := slog.New(slog.DiscardHandler)
	probedSilent := func() float64 {
		return testutil.ToFloat64(s.handover.counter.WithLabelValues("n1", announce.HandoverProbedSilent.String()))
	}

	p.set(ip, true)
	st := &serviceState{}
	got, held := s.handOver(log, st, &in, &d, targets, true)
	h := held[announcement{protoL2, ip.String()}]
	if len(got) != 0 || h.reason != reasonHandoverPending ||
		!strings.Contains(h.detail, "waiting for node n2's speaker, which sends no release, to stop answering") {
		t.Fatalf("previous holder without releases, still answering: answered %v, held %+v; want a wait", got, h)
	}
	poll.Until(t, 10*time.Second, "a probe of "+ip.String(), func() error {
		if p.callsOf(ip) != 1 {
			return fmt.Errorf("%d probes", p.callsOf(ip))
		}
		return nil
	})
	if got, _ = s.handOver(log, st, &in, &d, targets, true); len(got) != 0 || p.callsOf(ip) != 1 {
		t.Fatalf("decided again while it answers: answered %v, %d probes (want 1)", got, p.callsOf(ip))
	}
	p.set(ip, false)
	poll.Until(t, 10*time.Second, "answered once silent", func() error {
		if got, _ := s.handOver(log, st, &in, &d, targets, true); len(got) != 1 {
			return errors.New("still held")
		}
		return nil
	})
	if v := probedSilent(); v != 1 {
		t.Errorf("probedSilent = %v, want 1", v)
	}
	if pr := s.handover.probeOf(ip); pr.result != announce.ProbePending {
		t.Errorf("probe state left after the takeover: %+v", pr)
	}

	// A holder without releases that left memberlist (MetalLB answers
	// until its process exits): probed too.
	left := f.input("n1", map[string]bool{"n1": true, "n2": false})
	s.handover.noteSenders("n1", map[string]bool{}, left.Live)
	dl := announce.Decide(left)
	s.handover.last[ip] = "n2"
	p.set(ip, true)
	st = &serviceState{}
	if got, _ = s.handOver(log, st, &left, &dl, dl.L2Targets(), true); len(got) != 0 {
		t.Fatalf("holder without releases that left, still answering: answered %v, want a wait", got)
	}
	p.set(ip, false)
	poll.Until(t, 10*time.Second, "answered once silent", func() error {
		if got, _ := s.handOver(log, st, &left, &dl, dl.L2Targets(), true); len(got) != 1 {
			return errors.New("still held")
		}
		return nil
	})
	if v := probedSilent(); v != 2 {
		t.Errorf("probedSilent = %v, want 2", v)
	}

	// The probe fails (no interface): answered at once after it.
	s.opts.L2Probe = func(context.Context, netip.Addr, []string) (int, string, error) {
		return 0, "", errors.New("no interface to probe on")
	}
	s.handover.last[ip] = "n2"
	st = &serviceState{}
	poll.Until(t, 10*time.Second, "answered after a failed probe", func() error {
		if got, _ := s.handOver(log, st, &in, &d, targets, true); len(got) != 1 {
			return errors.New("still held")
		}
		return nil
	})
	if v := testutil.ToFloat64(s.handover.counter.WithLabelValues("n1", announce.HandoverNoReleaseExpected.String())); v != 1 {
		t.Errorf("noReleaseExpected = %v, want 1", v)
	}

	// Hand-over off: no probe, at once.
	off := f.controller("n1", -1)
	off.opts.L2Probe = p.probe
	p.set(ip, true)
	calls := p.callsOf(ip)
	if got, _ = off.handOver(log, &serviceState{}, &in, &d, targets, true); len(got) != 1 || p.callsOf(ip) != calls {
		t.Errorf("hand-over off: answered %v, %d probes", got, p.callsOf(ip)-calls)
	}
}

// TestHandoverRequestsListFails: when the Services of an address cannot
// be listed, its re-decision is retried (a warning, and the address is
// poked again), not dropped.
func TestHandoverRequestsListFails(t *testing.T) {
	f := newPureFixture(t)
	s := f.controller("n1", time.Minute)
	fl := &failingIndexer{Indexer: toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{indexServiceIP: serviceIPs})}
	web, err := transformService(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: f.ip.String()}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := fl.Add(web); err != nil {
		t.Fatal(err)
	}
	fl.fails.Store(1)
	s.svcs = fl
	s.log = slog.New(newCountingHandler())
	if reqs := s.handoverRequests(context.Background(), f.ip); reqs != nil {
		t.Fatalf("requests %v from a failed List", reqs)
	}
	select {
	case <-s.handover.poke:
	case <-time.After(30 * time.Second):
		t.Fatal("the address was not poked again after the failed List")
	}
	s.handover.mu.Lock()
	pending := s.handover.pending[f.ip]
	s.handover.mu.Unlock()
	if !pending {
		t.Fatal("the address is not pending again after the failed List")
	}
	if reqs := s.handoverRequests(context.Background(), f.ip); len(reqs) != 1 {
		t.Fatalf("requests %v after the List works again, want 1", reqs)
	}
	if d := s.handover.listFailed(f.ip); d != handoverListRetryFirst {
		t.Errorf("retry delay after a success = %s, want it reset to %s", d, handoverListRetryFirst)
	}
}

// failingIndexer fails ByIndex while fails > 0, then reads its Indexer.
type failingIndexer struct {
	toolscache.Indexer
	fails atomic.Int32
}

func (l *failingIndexer) ByIndex(name, value string) ([]any, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, errors.New("index failed")
	}
	return l.Indexer.ByIndex(name, value)
}

// pureFixture builds decision inputs for a two-node cluster with one layer
// 2 pool and a Service whose address n1 wins, without an API server.
type pureFixture struct {
	t    *testing.T
	snap *config.Snapshot
	ip   netip.Addr
}

func newPureFixture(t *testing.T) *pureFixture {
	t.Helper()
	res := config.Resources{
		Pools: []v1beta1.IPAddressPool{{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: "herald-system"},
			Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"198.51.100.0/28"}}}},
		L2Advertisements: []v1beta1.L2Advertisement{{ObjectMeta: metav1.ObjectMeta{Name: "l2", Namespace: "herald-system"}}},
	}
	for _, n := range []string{"n1", "n2"} {
		res.Nodes = append(res.Nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	snap, err := config.Build(res, config.Options{Namespace: "herald-system", NodeName: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	return &pureFixture{t: t, snap: snap, ip: ipWonBy(t, "n1", "n1", "n2")}
}

func (f *pureFixture) input(node string, live map[string]bool) announce.Input {
	return announce.Input{
		Config: f.snap, Node: node, Live: live,
		Nodes: []announce.Node{{Name: "n1"}, {Name: "n2"}},
		Service: announce.Service{Key: "ns/web", LoadBalancer: true, ExternalTrafficPolicy: announce.TrafficPolicyCluster,
			IPs: []netip.Addr{f.ip}},
		Endpoints: []announce.Endpoint{{NodeName: "n2", Ready: true}},
	}
}

func (f *pureFixture) controller(node string, timeout time.Duration) *Controller {
	h, err := newHandoverState(timeout, node, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	// Every node sends releases (a Herald group).
	live := map[string]bool{"n1": true, "n2": true}
	m := (&liveness{live: live}).member(node)
	h.noteSenders(node, m.ReleaseSenders(), live)
	return &Controller{opts: Options{NodeName: node, L2: &fakeL2{}, Members: m}, log: slog.New(slog.DiscardHandler), handover: h}
}

// TestHandOverGuessedSenderProbed: a speaker that has just started guesses
// the previous holder of an address it wins (announce.PreviousL2Holder).
// When the guess is a Herald speaker (a release sender) that never held
// the address (a MetalLB speaker did, and has exited: the node-by-node
// migration), no release ever comes: the address is probed as well, and
// answered once silent, not after the hand-over timeout.
func TestHandOverGuessedSenderProbed(t *testing.T) {
	f := newPureFixture(t)
	s := f.controller("n1", time.Minute)
	p := newFakeProber()
	s.opts.L2Probe = p.probe
	m := s.opts.Members.(*fakeMembers)
	ip := f.ip
	in := f.input("n1", map[string]bool{"n1": true, "n2": true})
	s.handover.noteSenders("n1", m.ReleaseSenders(), in.Live)
	if !s.handover.senders["n2"] {
		t.Fatalf("fixture: n2 is not a release sender: %v", s.handover.senders)
	}
	d := announce.Decide(in)
	targets := d.L2Targets()
	log := slog.New(slog.DiscardHandler)

	// Somebody still answers: held, probing.
	p.set(ip, true)
	st := &serviceState{}
	got, held := s.handOver(log, st, &in, &d, targets, true)
	if h := held[announcement{protoL2, ip.String()}]; len(got) != 0 || h.reason != reasonHandoverPending {
		t.Fatalf("guessed release sender, address answered: answered %v, held %+v; want a wait", got, h)
	}
	poll.Until(t, 10*time.Second, "a probe of "+ip.String(), func() error {
		if p.callsOf(ip) != 1 {
			return fmt.Errorf("%d probes", p.callsOf(ip))
		}
		return nil
	})
	// Later decisions of the wait (n2 is now remembered) still use the probe.
	if got, _ = s.handOver(log, st, &in, &d, targets, true); len(got) != 0 {
		t.Fatalf("decided again while it answers: answered %v", got)
	}
	p.set(ip, false)
	poll.Until(t, 10*time.Second, "answered once silent (timeout 1 min)", func() error {
		if got, _ := s.handOver(log, st, &in, &d, targets, true); len(got) != 1 {
			return errors.New("still held")
		}
		return nil
	})
	if v := testutil.ToFloat64(s.handover.counter.WithLabelValues("n1", announce.HandoverProbedSilent.String())); v != 1 {
		t.Errorf("probedSilent = %v, want 1", v)
	}
	if len(s.handover.guessed) != 0 {
		t.Errorf("guessed left after the takeover: %v", s.handover.guessed)
	}
}

// TestHandOverAfterNotCandidate: a node that was no candidate for an
// address (labeled node.kubernetes.io/exclude-from-external-load-balancers,
// as during the node-by-node migration's drain; or without a local
// endpoint of an externalTrafficPolicy Local Service) while its speaker
// ran, and becomes one and wins the address, takes it from the node that
// answered it meanwhile: that node still answers until it has processed
// the same change. The taker waits for its release (a Herald speaker), or
// probes it (a speaker that sends no release), as when it lost the
// election before; it does not answer at once as for an address nobody
// held.
func TestHandOverAfterNotCandidate(t *testing.T) {
	f := newPureFixture(t)
	ip := f.ip
	live := map[string]bool{"n1": true, "n2": true}
	excluded := f.input("n1", live)
	excluded.Nodes[0].Labels = map[string]string{announce.ExcludeFromLBLabel: "true"}
	local := f.input("n1", live)
	local.Service.ExternalTrafficPolicy = announce.TrafficPolicyLocal // the only endpoint is on n2
	localBoth := f.input("n1", live)
	localBoth.Service.ExternalTrafficPolicy = announce.TrafficPolicyLocal
	localBoth.Endpoints = append(localBoth.Endpoints, announce.Endpoint{NodeName: "n1", Ready: true})
	log := slog.New(slog.DiscardHandler)
	for _, c := range []struct {
		name          string
		before, after announce.Input
		reason        announce.Reason
	}{
		{"excluded then not", excluded, f.input("n1", live), announce.ReasonNodeLabeledExcludeBalancers},
		{"local endpoint appears", local, localBoth, announce.ReasonNoLocalEndpoints},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, sender := range []bool{true, false} {
				s := f.controller("n1", time.Minute)
				s.handover.settled = true // the speaker ran a full pass meanwhile
				p := newFakeProber()
				s.opts.L2Probe = p.probe
				if !sender { // n2 runs a MetalLB speaker
					m := s.opts.Members.(*fakeMembers)
					m.live.noReleases = map[string]bool{"n2": true}
					s.handover.noteSenders("n1", m.ReleaseSenders(), live)
				}
				st := &serviceState{}
				db := announce.Decide(c.before)
				if r := db.IPs[0].L2.Reason; r != c.reason || len(db.L2Targets()) != 0 {
					t.Fatalf("fixture: before, n1 decides %v (%v), want %v and no target", r, db.L2Targets(), c.reason)
				}
				if got, _ := s.handOver(log, st, &c.before, &db, nil, true); len(got) != 0 {
					t.Fatalf("before: answered %v", got)
				}
				da := announce.Decide(c.after)
				targets := da.L2Targets()
				if len(targets) != 1 {
					t.Fatalf("fixture: after, n1 does not win %s: %+v", ip, da)
				}
				p.set(ip, true) // n2 still answers
				got, held := s.handOver(log, st, &c.after, &da, targets, true)
				if h := held[announcement{protoL2, ip.String()}]; len(got) != 0 || h.reason != reasonHandoverPending {
					t.Fatalf("release sender %v: n1 answered %v at once (held %+v) while n2 still answers: two answerers", sender, got, h)
				}
				if sender {
					s.L2Released("n2", []netip.Addr{ip})
				} else {
					p.set(ip, false)
				}
				poll.Until(t, 10*time.Second, "answered once n2 stopped (timeout 1 min)", func() error {
					if got, _ := s.handOver(log, st, &c.after, &da, targets, true); len(got) != 1 {
						return errors.New("still held")
					}
					return nil
				})
			}
		})
	}
}

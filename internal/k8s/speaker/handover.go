package speaker

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/herald-lb/herald/internal/announce"
)

// Layer 2 hand-over (see announce.Handover and docs/l2-failover.md,
// "Hand-over"): a layer 2 address this node wins is answered only once the
// live node that answered it before has released it (L2Released), or after
// Options.HandoverTimeout. When that node's speaker does not advertise
// releases (Members.ReleaseSenders: a MetalLB speaker, live or just left),
// the address is probed on the segment (Options.L2Probe) and answered once
// nobody else answers it. This file is the speaker's side of it: the
// received releases, the probes, the waits, the re-decisions they trigger,
// and the herald_layer2_handovers_total counter.

// reasonHandoverPending: this node won the address and waits for the
// previous holder's release, or for it to stop answering (logs,
// herald_speaker_not_announced).
const reasonHandoverPending = "handoverPending"

// Re-decisions whose Services could not be listed (watchHandover) are
// retried after handoverListRetryFirst, doubling up to handoverListRetryLast at most.
const (
	handoverListRetryFirst = 100 * time.Millisecond
	handoverListRetryLast  = 5 * time.Second
)

// handoverState is the speaker's hand-over state. The fields under mu are
// written by memberlist's packet handler (L2Released) and timers; last is
// touched only by the reconcile worker.
type handoverState struct {
	timeout time.Duration // <= 0: hand-over off
	now     func() time.Time
	events  chan event.TypedGenericEvent[netip.Addr]
	poke    chan struct{}
	counter *prometheus.CounterVec

	mu sync.Mutex
	// released: ip -> node -> when its release was received.
	released map[netip.Addr]map[string]time.Time
	// pending: addresses whose Services are to be decided again.
	pending map[netip.Addr]bool
	// timers: the deadline timer of each address waited for.
	timers map[netip.Addr]handoverTimer
	// probes: the probe of each address whose previous holder sends no
	// release.
	probes map[netip.Addr]*handoverProbe
	// listRetry: the next retry delay of each address whose Services
	// could not be listed.
	listRetry map[netip.Addr]time.Duration
	// ctx ends the probes (runHandover's context; Background before it
	// runs).
	ctx context.Context

	// last: the last winner other than this node that a decision named for
	// each address (announce.PreviousL2Holder's remembered), reconcile
	// worker only.
	last map[netip.Addr]string
	// guessed: the addresses whose wait began on a guessed previous holder
	// (announce.HandoverInput.Guessed), until the wait ends (reconcile
	// worker only): later decisions of the wait name that node in last,
	// and must still probe.
	guessed map[netip.Addr]bool
	// settled: a full pass over every Service ran with memberlist joined
	// (reconcile worker only). Before it, this speaker has just started and
	// guesses the previous holders (announce.PreviousL2Holder's guess).
	settled bool
	// sendsReleases: whether each other node's speaker advertised releases
	// when last seen live (reconcile worker only). Memberlist forgets a
	// member's metadata when it leaves or fails; the hand-over still has
	// to know whether a holder that just left was a Herald speaker (it
	// stopped answering before it left) or a MetalLB one (it answers until
	// its process exits).
	sendsReleases map[string]bool
	// senders: the release senders of the last noteSenders (reconcile
	// worker only).
	senders map[string]bool
}

// handoverProbe is the probe of one address (Options.L2Probe).
type handoverProbe struct {
	cancel context.CancelFunc
	// Under handoverState.mu: the result so far, and what it heard.
	result     announce.ProbeResult
	answers    int
	answeredBy string
	err        error
}

type handoverTimer struct {
	at    time.Time
	timer *time.Timer
}

func newHandoverState(timeout time.Duration, node string, reg prometheus.Registerer) (*handoverState, error) {
	switch {
	case timeout == 0:
		timeout = announce.DefaultHandoverTimeout
	case timeout < 0:
		timeout = 0
	}
	h := &handoverState{
		timeout:  timeout,
		now:      time.Now,
		events:   make(chan event.TypedGenericEvent[netip.Addr], 64),
		poke:     make(chan struct{}, 1),
		released: map[netip.Addr]map[string]time.Time{},
		pending:  map[netip.Addr]bool{},
		timers:   map[netip.Addr]handoverTimer{},
		probes:   map[netip.Addr]*handoverProbe{},
		last:     map[netip.Addr]string{},
		guessed:  map[netip.Addr]bool{},
		counter:  newHandoverCounter(),

		listRetry:     map[netip.Addr]time.Duration{},
		ctx:           context.Background(),
		sendsReleases: map[string]bool{},
	}
	for _, r := range []announce.HandoverReason{announce.HandoverReleased, announce.HandoverTimedOut,
		announce.HandoverPreviousNotLive, announce.HandoverNoPreviousHolder, announce.HandoverNoReleaseExpected,
		announce.HandoverProbedSilent} {
		h.counter.WithLabelValues(node, r.String())
	}
	if reg != nil {
		if err := reg.Register(h.counter); err != nil {
			return nil, err
		}
	}
	return h, nil
}

func newHandoverCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "herald",
		Subsystem: "layer2",
		Name:      "handovers_total",
		Help:      "Layer 2 addresses this node took over, by how the wait for the previous holder ended (released: its release arrived; probedSilent: its speaker sends no release, e.g. a MetalLB speaker, and probes of the address went unanswered; timedOut: no release or still answering within --l2-handover-timeout, e.g. a lost message; noReleaseExpected: its speaker sends no release and the address could not be probed, no wait; previousNotLive: it had failed or left, no wait; noPreviousHolder: no other node could have answered; disabled: hand-over off).",
	}, []string{"node", "outcome"})
}

// L2Released records that the speaker on node no longer answers ips in
// layer 2 (a hand-over release received over memberlist; wire it to
// members.Config.OnReleased), and decides the Services holding them again,
// so that a taker waiting for node answers at once. It never blocks and may
// be called from any goroutine.
func (s *Controller) L2Released(node string, ips []netip.Addr) {
	h := s.handover
	now := h.now()
	h.mu.Lock()
	for ip, by := range h.released {
		for n, at := range by {
			if now.Sub(at) > announce.HandoverReleaseMemory {
				delete(by, n)
			}
		}
		if len(by) == 0 {
			delete(h.released, ip)
		}
	}
	for _, ip := range ips {
		ip = ip.Unmap().WithZone("")
		if h.released[ip] == nil {
			h.released[ip] = map[string]time.Time{}
		}
		h.released[ip][node] = now
		h.pending[ip] = true
	}
	h.mu.Unlock()
	s.log.Debug("layer 2 addresses released by another speaker", "node", node, "ips", ips)
	h.wake()
}

func (h *handoverState) wake() {
	select {
	case h.poke <- struct{}{}:
	default:
	}
}

// redecideAt makes the Services holding ip be decided again at at (the end
// of a wait); one timer per address.
func (h *handoverState) redecideAt(ip netip.Addr, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, ok := h.timers[ip]; ok {
		if t.at.Equal(at) {
			return
		}
		t.timer.Stop()
	}
	h.timers[ip] = handoverTimer{at: at, timer: time.AfterFunc(at.Sub(h.now()), func() {
		h.mu.Lock()
		h.pending[ip] = true
		h.mu.Unlock()
		h.wake()
	})}
}

// redecideAfter makes the Services holding ip be decided again after d
// (a retry; the deadline timer of ip is not touched).
func (h *handoverState) redecideAfter(ip netip.Addr, d time.Duration) {
	time.AfterFunc(d, func() {
		h.mu.Lock()
		h.pending[ip] = true
		h.mu.Unlock()
		h.wake()
	})
}

// listFailed returns how long to wait before deciding ip's Services again
// after listing them failed (doubling per consecutive failure).
func (h *handoverState) listFailed(ip netip.Addr) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	d := h.listRetry[ip]
	if d == 0 {
		d = handoverListRetryFirst
	}
	h.listRetry[ip] = min(2*d, handoverListRetryLast)
	return d
}

// listed resets ip's list retry delay.
func (h *handoverState) listed(ip netip.Addr) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.listRetry, ip)
}

// probeOf returns the result of ip's probe so far: ProbePending while it
// runs or before it started.
func (h *handoverState) probeOf(ip netip.Addr) handoverProbe {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p := h.probes[ip]; p != nil {
		return handoverProbe{result: p.result, answers: p.answers, answeredBy: p.answeredBy, err: p.err}
	}
	return handoverProbe{result: announce.ProbePending}
}

// startProbe starts probing ip on ifaces (empty: every interface) with
// probe, until the prober finds it silent, fails, or deadline passes,
// unless a probe of ip runs or has a result already. Its result decides
// the Services holding ip again.
func (h *handoverState) startProbe(probe L2ProbeFunc, ip netip.Addr, ifaces []string, deadline time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.probes[ip] != nil {
		return
	}
	ctx, cancel := context.WithTimeout(h.ctx, deadline.Sub(h.now()))
	p := &handoverProbe{cancel: cancel, result: announce.ProbePending}
	h.probes[ip] = p
	go func() {
		defer cancel()
		answers, by, err := probe(ctx, ip, ifaces)
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.probes[ip] != p {
			return // the wait ended meanwhile
		}
		p.answers, p.answeredBy = answers, by
		switch {
		case err == nil:
			p.result = announce.ProbeSilent
		case ctx.Err() != nil:
			return // the deadline passed: its timer decides again
		default:
			p.result, p.err = announce.ProbeUnavailable, err
		}
		h.pending[ip] = true
		h.wake()
	}()
}

// done ends the wait for ip (answered, or no longer wanted): its timer
// and its probe are stopped and, when consume is set, its releases are
// used up (a later takeover of ip waits for a new one).
func (h *handoverState) done(ip netip.Addr, consume bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, ok := h.timers[ip]; ok {
		t.timer.Stop()
		delete(h.timers, ip)
	}
	if p := h.probes[ip]; p != nil {
		p.cancel()
		delete(h.probes, ip)
	}
	if consume {
		delete(h.released, ip)
	}
}

// noteSenders records the nodes that send releases for the hand-over
// decisions (announce.HandoverInput.ReleaseSenders): those whose speakers
// advertise it now (senders, Members.ReleaseSenders), and those that did
// when last seen live and are not live now (a Herald speaker that failed
// or left). It remembers what each live node advertises. clusterView
// calls it with each view of the members; reconcile worker only.
func (h *handoverState) noteSenders(self string, senders, live map[string]bool) {
	for n, alive := range live {
		if alive && n != self {
			h.sendsReleases[n] = senders[n]
		}
	}
	out := make(map[string]bool, len(senders))
	for n, ok := range senders {
		if ok {
			out[n] = true
		}
	}
	for n, ok := range h.sendsReleases {
		if ok && live != nil && !live[n] {
			out[n] = true
		}
	}
	h.senders = out
}

func (h *handoverState) releasesOf(ip netip.Addr) map[string]time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]time.Time, len(h.released[ip]))
	for n, at := range h.released[ip] {
		out[n] = at
	}
	return out
}

// runHandover turns the pending addresses into re-decisions of the
// Services holding them, until ctx ends.
func (s *Controller) runHandover(ctx context.Context) error {
	h := s.handover
	h.mu.Lock()
	h.ctx = ctx
	h.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-h.poke:
		}
		h.mu.Lock()
		ips := make([]netip.Addr, 0, len(h.pending))
		for ip := range h.pending {
			ips = append(ips, ip)
		}
		clear(h.pending)
		h.mu.Unlock()
		for _, ip := range ips {
			select {
			case h.events <- event.TypedGenericEvent[netip.Addr]{Object: ip}:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// watchHandover adds the source of the hand-over re-decisions to b: each
// address queues the Services holding it (handoverRequests).
func (s *Controller) watchHandover(b *builder.TypedBuilder[reconcile.Request]) *builder.TypedBuilder[reconcile.Request] {
	return b.WatchesRawSource(source.TypedChannel(s.handover.events,
		handler.TypedEnqueueRequestsFromMapFunc(s.handoverRequests)))
}

// handoverRequests returns the requests of the Services holding ip (from
// the cache). When they cannot be listed, the re-decision is not dropped:
// it logs a warning and pokes ip again later (handoverListRetryFirst,
// doubling up to handoverListRetryLast), since a taker waiting for that
// re-decision would otherwise wait for its timeout, or, for a previous
// holder that sends no release, leave the address unanswered until then.
func (s *Controller) handoverRequests(ctx context.Context, ip netip.Addr) []reconcile.Request {
	h := s.handover
	list, err := s.servicesWithIP(ip)
	if err != nil {
		d := h.listFailed(ip)
		s.log.Warn("layer 2 hand-over: cannot list the Services of an address; deciding them again later",
			"ip", ip, "retryIn", d, "error", err)
		h.redecideAfter(ip, d)
		return nil
	}
	h.listed(ip)
	reqs := make([]reconcile.Request, 0, len(list))
	for _, r := range list {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(r)})
	}
	return reqs
}

// handOver filters targets, the layer 2 addresses the decision d of one
// Service (input in; nil for a deleted Service) lets this node answer,
// down to those it may answer now (announce.Handover), and returns why
// each other one waits. st is the Service's state (its waits and applied
// targets); joined is memberlist's start-up gate (winners are remembered
// only from decisions on a complete member list).
func (s *Controller) handOver(log *slog.Logger, st *serviceState, in *announce.Input, d *announce.Decision, targets []announce.L2Target, joined bool) ([]announce.L2Target, map[announcement]notAnnounced) {
	h := s.handover
	if joined {
		for _, ipd := range d.IPs {
			w := ipd.L2.Winner
			if w == "" && in != nil && notCandidate(ipd.L2.Reason) {
				// This node is no candidate (excluded, NetworkUnavailable,
				// no local endpoint), so the decision names no
				// winner; the node that answers meanwhile is the winner
				// among the others, and it still answers when this node
				// becomes a candidate again and wins the address (the
				// exclude label removed after a migration's drain).
				w = announce.PreviousL2Holder(*in, ipd.IP, "", true)
			}
			if w != "" && w != s.opts.NodeName {
				h.last[ipd.IP] = w
				delete(h.guessed, ipd.IP)
			}
		}
	}
	wanted := map[netip.Addr]bool{}
	var out []announce.L2Target
	var held map[announcement]notAnnounced
	now := h.now()
	// Without memberlist no release can arrive: nobody is waited for a
	// release (a previous holder is probed).
	var senders map[string]bool
	if s.opts.Members != nil {
		senders = h.senders
	}
	for _, t := range targets {
		wanted[t.IP] = true
		if in == nil || s.answering(st, t.IP) {
			out = append(out, t)
			delete(st.waiting, t.IP)
			continue
		}
		since, waiting := st.waiting[t.IP]
		probe := handoverProbe{result: announce.ProbeUnavailable}
		if s.opts.L2Probe != nil {
			probe = h.probeOf(t.IP)
		}
		remembered := h.last[t.IP]
		previous := announce.PreviousL2Holder(*in, t.IP, remembered, !h.settled)
		guessed := previous != "" && (h.guessed[t.IP] || (!h.settled && (remembered == "" || remembered == s.opts.NodeName)))
		r := announce.Handover(announce.HandoverInput{
			Node:           s.opts.NodeName,
			Previous:       previous,
			Guessed:        guessed,
			Live:           in.Live,
			ReleaseSenders: senders,
			Released:       h.releasesOf(t.IP),
			Probe:          probe.result,
			Since:          since,
			Now:            now,
			Timeout:        h.timeout,
		})
		if !r.Answer {
			// Later decisions of this wait (after the start-up pass, which
			// ends guessing) wait for the same node.
			h.last[t.IP] = r.WaitFor
			if guessed {
				h.guessed[t.IP] = true
			}
			if !waiting {
				if st.waiting == nil {
					st.waiting = map[netip.Addr]time.Time{}
				}
				st.waiting[t.IP] = now
				log.Debug("layer 2 hand-over: waiting for the previous holder to stop answering", "ip", t.IP,
					"previous", r.WaitFor, "probing", r.Probe, "timeout", h.timeout)
			}
			h.redecideAt(t.IP, r.Deadline)
			detail := fmt.Sprintf("node %s won %s; waiting for node %s, which answers it, to release it (at most %s)",
				s.opts.NodeName, t.IP, r.WaitFor, h.timeout)
			if r.Probe && s.opts.L2Probe != nil {
				h.startProbe(s.opts.L2Probe, t.IP, t.Interfaces, r.Deadline)
				detail = fmt.Sprintf("node %s won %s; waiting for node %s's speaker, which sends no release, to stop answering it (probing; at most %s)",
					s.opts.NodeName, t.IP, r.WaitFor, h.timeout)
			}
			if held == nil {
				held = map[announcement]notAnnounced{}
			}
			held[announcement{protoL2, t.IP.String()}] = notAnnounced{reason: reasonHandoverPending, winner: s.opts.NodeName, detail: detail}
			continue
		}
		out = append(out, t)
		delete(st.waiting, t.IP)
		delete(h.last, t.IP)
		delete(h.guessed, t.IP)
		h.done(t.IP, true)
		h.counter.WithLabelValues(s.opts.NodeName, r.Reason.String()).Inc()
		attrs := []any{"ip", t.IP, "outcome", r.Reason.String()}
		if waiting {
			attrs = append(attrs, "waited", now.Sub(since))
		}
		if probe.answers > 0 || probe.answeredBy != "" {
			attrs = append(attrs, "probeAnswers", probe.answers, "answeredBy", probe.answeredBy)
		}
		switch {
		case r.Reason == announce.HandoverTimedOut:
			log.Info("layer 2 hand-over: the previous holder sent no release or still answered in time, taking over anyway", append(attrs, "previous", r.WaitFor)...)
		case r.Reason == announce.HandoverProbedSilent:
			log.Info("layer 2 hand-over: the previous holder, whose speaker sends no release, stopped answering; taking over", attrs...)
		case probe.err != nil:
			log.Warn("layer 2 hand-over: cannot probe the address, taking over at once", append(attrs, "error", probe.err)...)
		default:
			log.Debug("layer 2 hand-over: taking over", attrs...)
		}
	}
	for ip := range st.waiting {
		if !wanted[ip] {
			delete(st.waiting, ip)
			delete(h.guessed, ip)
			h.done(ip, false)
		}
	}
	return out, held
}

// answering reports whether this node answers ip already: the Service of
// st has it applied, or the announcer has another owner for it.
func (s *Controller) answering(st *serviceState, ip netip.Addr) bool {
	if st.l2Applied {
		for _, t := range st.l2 {
			if t.IP == ip {
				return true
			}
		}
	}
	if o, ok := s.opts.L2.(l2Owners); ok {
		return len(o.Owners(ip)) > 0
	}
	return false
}

// forgetHandover drops what the hand-over remembers of the addresses of a
// deleted Service.
func (s *Controller) forgetHandover(st *serviceState) {
	for _, ip := range st.ips {
		delete(s.handover.last, ip)
		delete(s.handover.guessed, ip)
	}
	for ip := range st.waiting {
		s.handover.done(ip, false)
	}
}

// notCandidate reports whether a layer 2 decision's reason means that this
// node is no candidate of the election while other nodes may be: the
// decision then names no winner (announce.L2Decision.Winner), and handOver
// elects the one among the others to remember who answers the address.
// This speaker's own view of itself as not live (notOwner) is not one: a
// speaker back from the other side of a partition answered meanwhile too,
// and takes its addresses back at once (TestHealReannounces).
func notCandidate(r announce.Reason) bool {
	switch r {
	case announce.ReasonNodeLabeledExcludeBalancers, announce.ReasonNodeNetworkUnavailable,
		announce.ReasonNoLocalEndpoints:
		return true
	}
	return false
}

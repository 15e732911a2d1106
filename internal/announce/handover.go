package announce

import (
	"net/netip"
	"time"
)

// Layer 2 hand-over: when this node wins a layer 2 address that another
// speaker answers now (the previous holder), both nodes would answer for it
// from this node's takeover until the previous holder has processed the
// same membership change and stopped (the two speakers' views of the
// member list converge at different moments), or, for a MetalLB speaker
// shutting down, until its process exits (it leaves memberlist first and
// answers ARP and NDP until then). To avoid two answerers, the taker
// waits. For a previous holder whose speaker advertises in its memberlist
// metadata that it sends releases (a Herald speaker), it waits for that
// release (sent over memberlist once its announcer stopped answering), at
// once when that holder is not live (crash, graceful leave: a Herald
// speaker stops answering before it leaves, so failover costs nothing).
// For a previous holder that sends no release (a MetalLB speaker, live or
// just left, an older Herald, any speaker without memberlist) it probes
// the address on the segment (ARP requests, NDP neighbor solicitations)
// and answers once the probes go unanswered (ProbeSilent). Either wait is
// bounded by the timeout (a lost release, a holder that keeps answering).
// See docs/l2-failover.md, "Hand-over".

// DefaultHandoverTimeout is the default bound of a hand-over wait
// (--l2-handover-timeout): how long a taker waits for a live previous
// holder's release before it answers anyway.
const DefaultHandoverTimeout = time.Second

// HandoverReleaseMemory is how long a received release counts: a release
// received more than this before the taker decides is ignored (the holder
// may have taken the address back since). A release normally precedes the
// taker's decision by at most the difference between the two speakers'
// reaction times to one membership change, well under a second.
const HandoverReleaseMemory = 5 * time.Second

// HandoverReason says why a taker answers, or that it waits.
type HandoverReason uint8

const (
	// HandoverWaiting: the previous holder is live and has not released
	// the address; wait until HandoverResult.Deadline at most.
	HandoverWaiting HandoverReason = iota
	// HandoverAnswering: this node answers the address already (another of
	// its Services holds it): nothing is handed over.
	HandoverAnswering
	// HandoverDisabled: the timeout is 0 or negative (hand-over off).
	HandoverDisabled
	// HandoverNoPreviousHolder: no other node is believed to answer the
	// address (no other candidate).
	HandoverNoPreviousHolder
	// HandoverPreviousNotLive: the previous holder's speaker is not live
	// (failed or left): it answers nothing, take over at once.
	HandoverPreviousNotLive
	// HandoverReleased: a node released the address recently.
	HandoverReleased
	// HandoverTimedOut: no release within the timeout; answer anyway.
	HandoverTimedOut
	// HandoverNoReleaseExpected: the previous holder's speaker does not
	// advertise that it sends releases (a MetalLB speaker, a Herald from
	// before the advertisement, no memberlist) and this node cannot probe
	// the address (ProbeUnavailable): waiting would only cost the timeout,
	// a gap; answer at once, as without hand-over.
	HandoverNoReleaseExpected
	// HandoverProbedSilent: the previous holder's speaker sends no release,
	// and this node's probes of the address went unanswered by any other
	// host (ProbeSilent): the previous holder stopped answering.
	HandoverProbedSilent
)

var handoverReasonNames = [...]string{
	HandoverWaiting:           "waiting",
	HandoverAnswering:         "answering",
	HandoverDisabled:          "disabled",
	HandoverNoPreviousHolder:  "noPreviousHolder",
	HandoverPreviousNotLive:   "previousNotLive",
	HandoverReleased:          "released",
	HandoverTimedOut:          "timedOut",
	HandoverNoReleaseExpected: "noReleaseExpected",
	HandoverProbedSilent:      "probedSilent",
}

// ProbeResult is what probing a layer 2 address on the segment (ARP
// requests for IPv4, RFC 826; neighbor solicitations for IPv6, RFC 4861
// §7.2.2; internal/layer2's Announcer.Probe) found so far, the input of
// Handover for a previous holder that sends no release.
type ProbeResult uint8

const (
	// ProbePending: no result yet (the probe is to start, or runs: some
	// host answered it, or too few probes went unanswered yet).
	ProbePending ProbeResult = iota
	// ProbeSilent: the last consecutive probes (layer2.DefaultProbeCount)
	// drew no answer from any other host: nobody answers the address.
	ProbeSilent
	// ProbeUnavailable: this node cannot probe (no prober, no interface to
	// probe on, a socket error): decide as without probing.
	ProbeUnavailable
)

var probeResultNames = [...]string{
	ProbePending:     "pending",
	ProbeSilent:      "silent",
	ProbeUnavailable: "unavailable",
}

// String returns the result's name (logs).
func (p ProbeResult) String() string {
	if int(p) < len(probeResultNames) {
		return probeResultNames[p]
	}
	return "unknown"
}

// String returns the reason's camelCase name (metric label, logs).
func (r HandoverReason) String() string {
	if int(r) < len(handoverReasonNames) {
		return handoverReasonNames[r]
	}
	return "unknown"
}

// HandoverInput is what the hand-over decision of one layer 2 address that
// this node won depends on.
type HandoverInput struct {
	// Node is this node.
	Node string
	// Answering: this node answers the address already.
	Answering bool
	// Previous is the node believed to answer the address now
	// (PreviousL2Holder), "" when none.
	Previous string
	// Live are the live speakers (Input.Live; nil: every node is live).
	Live map[string]bool
	// ReleaseSenders are the nodes whose speakers advertise that they send
	// releases (members.List.ReleaseSenders: their memberlist node
	// metadata says so), and those that did when last seen live (a Herald
	// speaker that failed or left: memberlist forgets its metadata, the
	// caller remembers it); nil: none does (no memberlist).
	ReleaseSenders map[string]bool
	// Guessed: Previous is PreviousL2Holder's guess (this speaker has just
	// started and does not know who answers the address), not a holder a
	// decision named. A guessed release sender is probed as well as waited
	// for: it may not answer the address at all (a speaker that is not
	// Herald held it), and then no release ever comes.
	Guessed bool
	// Probe is what probing the address found (see ProbeResult); it
	// matters only when Previous is not among ReleaseSenders, or Guessed. The caller
	// starts a probe when a result says Probe and decides again on its
	// result.
	Probe ProbeResult
	// Released holds, for each node that released the address, when its
	// release was received. Releases from this node are ignored.
	Released map[string]time.Time
	// Since is when this node first found it should take the address over
	// (the start of the wait); the zero time means Now.
	Since time.Time
	// Now is the current time.
	Now time.Time
	// Timeout bounds the wait (DefaultHandoverTimeout); 0 or negative
	// disables waiting.
	Timeout time.Duration
}

// HandoverResult is the hand-over decision of one address.
type HandoverResult struct {
	// Answer: this node answers the address now.
	Answer bool
	// Reason says why it answers, or HandoverWaiting.
	Reason HandoverReason
	// WaitFor is the previous holder waited for (HandoverWaiting and
	// HandoverTimedOut), "" otherwise.
	WaitFor string
	// Probe (with HandoverWaiting): the previous holder sends no release;
	// the wait ends when a probe of the address finds it silent (decide
	// again with HandoverInput.Probe = ProbeSilent) or at Deadline.
	Probe bool
	// Deadline is when the wait ends (Since + Timeout) when waiting: decide
	// again then, or on the next release.
	Deadline time.Time
}

// Handover decides whether this node, which won a layer 2 address, answers
// it now or waits for the previous holder. In order: already answering
// (answering), timeout off (disabled), no previous holder other than this
// node (noPreviousHolder), previous holder a release sender that is not
// live (previousNotLive: a Herald speaker stops answering before it
// leaves, and a crashed one answers nothing), a release of the address
// from any other node received within HandoverReleaseMemory before Now
// (released). Then, for a previous holder not among ReleaseSenders (a
// MetalLB speaker, live or shutting down, an older Herald, no memberlist):
// probe unavailable (previousNotLive when it is not live, else
// noReleaseExpected: answer at once, as before probing existed), probe
// silent (probedSilent). Then Now at or past Since + Timeout (timedOut);
// otherwise wait (waiting) until Since + Timeout, with Probe set for a
// previous holder that sends no release.
//
// Why probe rather than answer at once: a MetalLB speaker on SIGTERM
// leaves memberlist first and keeps answering until its process exits, and
// a live one stops only once it processed the membership change; answering
// at once made two answerers (issue #13). The probe ends the wait as soon
// as the holder is silent, so the cost is the probe's silent interval
// (layer2.DefaultProbeCount × layer2.DefaultProbeInterval, 75 ms), not the
// timeout.
//
// A release from a node other than Previous counts as well: Previous is a
// belief (a restarted speaker does not know who answered while it was
// down, and guesses the node that would win without it), and the node that
// really held the address is the one that sends a release for it. A node
// that did not answer the address sends none.
//
// Whether to wait is decided on Previous only: when Previous is a guess
// that names a node that is not live while the real holder is a live
// Herald that sends releases, this node answers at once and both may
// answer until the holder stops (as with the hand-over off).
func Handover(in HandoverInput) HandoverResult {
	switch {
	case in.Answering:
		return HandoverResult{Answer: true, Reason: HandoverAnswering}
	case in.Timeout <= 0:
		return HandoverResult{Answer: true, Reason: HandoverDisabled}
	case in.Previous == "" || in.Previous == in.Node:
		return HandoverResult{Answer: true, Reason: HandoverNoPreviousHolder}
	}
	sender := in.ReleaseSenders[in.Previous]
	live := in.Live == nil || in.Live[in.Previous]
	if sender && !live {
		return HandoverResult{Answer: true, Reason: HandoverPreviousNotLive}
	}
	for node, at := range in.Released {
		if node != in.Node && !at.After(in.Now) && in.Now.Sub(at) <= HandoverReleaseMemory {
			return HandoverResult{Answer: true, Reason: HandoverReleased}
		}
	}
	probe := !sender || in.Guessed
	if probe {
		switch in.Probe {
		case ProbeUnavailable:
			switch {
			case sender: // a guessed release sender: wait for its release
			case !live:
				return HandoverResult{Answer: true, Reason: HandoverPreviousNotLive}
			default:
				return HandoverResult{Answer: true, Reason: HandoverNoReleaseExpected}
			}
		case ProbeSilent:
			return HandoverResult{Answer: true, Reason: HandoverProbedSilent}
		}
	}
	since := in.Since
	if since.IsZero() || since.After(in.Now) {
		since = in.Now
	}
	deadline := since.Add(in.Timeout)
	if !in.Now.Before(deadline) {
		return HandoverResult{Answer: true, Reason: HandoverTimedOut, WaitFor: in.Previous}
	}
	return HandoverResult{Reason: HandoverWaiting, WaitFor: in.Previous, Deadline: deadline, Probe: probe && in.Probe != ProbeUnavailable}
}

// PreviousL2Holder returns the node believed to answer the layer 2 address
// ip of in.Service before in.Node takes it over: remembered, when it is
// set and not in.Node (the last winner other than this node that this
// node's own decisions named). Else, when guess is set (this speaker just
// started and cannot know who answered while it was away), the node that
// wins the election for ip without in.Node (the runner-up of Decide's
// election on the same input): by rendezvous hashing, the winner before
// in.Node's speaker came back. Otherwise "": an address this running
// speaker never saw won by another node (a new Service, endpoints that
// just appeared) was answered by nobody, and waiting would only delay it.
// With remembered "" and guess set, on an input where in.Node is no
// candidate (excluded, NetworkUnavailable, no local endpoint),
// it is the node that answers ip meanwhile: the speaker remembers it so
// that a later takeover by in.Node waits for that node.
// It returns "" as well when there is no such node, when ip lies in no
// pool, or when the Service has no serving endpoint. With Input.L2Winners
// (balanced election) the runner-up is the plain election's, a guess:
// Handover accepts a release from any node.
func PreviousL2Holder(in Input, ip netip.Addr, remembered string, guess bool) string {
	if remembered != "" && remembered != in.Node {
		return remembered
	}
	if !guess {
		return ""
	}
	ip = ip.Unmap().WithZone("")
	pool, ok := in.Config.PoolFor(ip)
	if !ok || !hasServingEndpoint(in.Endpoints, "") {
		return ""
	}
	e := newEnv(&in)
	ballot := e.ballotIP(ip)
	for _, n := range e.electL2(ballot, pool) {
		if n != in.Node {
			return n
		}
	}
	return ""
}

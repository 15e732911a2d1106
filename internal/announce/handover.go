package announce

import (
	"net/netip"
	"time"
)

// Layer 2 hand-over: when this node wins a layer 2 address that another
// live speaker answers now (the previous holder), both nodes would answer
// for it from this node's takeover until the previous holder has processed
// the same membership change and stopped (the two speakers' views of the
// member list converge at different moments). To avoid two answerers, the
// taker waits: it answers once the previous holder has told it that it no
// longer answers the address (a release, sent over memberlist by the
// holder's speaker once its announcer stopped answering), at once when the
// previous holder is not live (crash, graceful leave: failover costs
// nothing), at once as well when the previous holder's speaker does not
// advertise in its memberlist metadata that it sends releases (a MetalLB
// speaker, an older Herald: waiting for them would leave the address
// unanswered for the whole timeout), or after a bounded timeout when an
// advertised release does not come (a lost packet).
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
	// before the advertisement, no memberlist): waiting would only cost
	// the timeout, a gap; answer at once, as without hand-over.
	HandoverNoReleaseExpected
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
	// metadata says so); nil: none does (no memberlist).
	ReleaseSenders map[string]bool
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
	// Deadline is when the wait ends (Since + Timeout) when waiting: decide
	// again then, or on the next release.
	Deadline time.Time
}

// Handover decides whether this node, which won a layer 2 address, answers
// it now or waits for the previous holder. In order: already answering
// (answering), timeout off (disabled), no previous holder other than this
// node (noPreviousHolder), previous holder not live (previousNotLive), a
// release of the address from any other node received within
// HandoverReleaseMemory before Now (released), previous holder not among
// ReleaseSenders (noReleaseExpected: a MetalLB speaker or an older Herald
// never sends one, so waiting would only leave the address unanswered for
// the timeout), Now at or past Since + Timeout (timedOut); otherwise wait
// (waiting) until Since + Timeout.
//
// A release from a node other than Previous counts as well: Previous is a
// belief (a restarted speaker does not know who answered while it was
// down, and guesses the node that would win without it), and the node that
// really held the address is the one that sends a release for it. A node
// that did not answer the address sends none.
//
// Whether to wait is decided on Previous only: when Previous is a guess
// that names a node without releases while the real holder is a Herald
// that sends them, this node answers at once and both may answer until
// the holder stops (as with the hand-over off).
func Handover(in HandoverInput) HandoverResult {
	switch {
	case in.Answering:
		return HandoverResult{Answer: true, Reason: HandoverAnswering}
	case in.Timeout <= 0:
		return HandoverResult{Answer: true, Reason: HandoverDisabled}
	case in.Previous == "" || in.Previous == in.Node:
		return HandoverResult{Answer: true, Reason: HandoverNoPreviousHolder}
	case in.Live != nil && !in.Live[in.Previous]:
		return HandoverResult{Answer: true, Reason: HandoverPreviousNotLive}
	}
	for node, at := range in.Released {
		if node != in.Node && !at.After(in.Now) && in.Now.Sub(at) <= HandoverReleaseMemory {
			return HandoverResult{Answer: true, Reason: HandoverReleased}
		}
	}
	if !in.ReleaseSenders[in.Previous] {
		return HandoverResult{Answer: true, Reason: HandoverNoReleaseExpected}
	}
	since := in.Since
	if since.IsZero() || since.After(in.Now) {
		since = in.Now
	}
	deadline := since.Add(in.Timeout)
	if !in.Now.Before(deadline) {
		return HandoverResult{Answer: true, Reason: HandoverTimedOut, WaitFor: in.Previous}
	}
	return HandoverResult{Reason: HandoverWaiting, WaitFor: in.Previous, Deadline: deadline}
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

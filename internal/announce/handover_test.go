package announce

import (
	"testing"
	"time"

	"github.com/herald-lb/herald/api/v1beta1"
)

func TestHandover(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	live := map[string]bool{"n1": true, "n2": true, "n3": false}
	// n2, n3 and n4 are Herald speakers that send releases.
	senders := map[string]bool{"n2": true, "n3": true, "n4": true}
	base := HandoverInput{Node: "n1", Previous: "n2", Live: live, ReleaseSenders: senders, Since: t0, Now: t0, Timeout: time.Second}
	tests := []struct {
		name   string
		change func(*HandoverInput)
		want   HandoverResult
	}{
		{name: "live previous holder, no release: wait for the timeout",
			want: HandoverResult{Reason: HandoverWaiting, WaitFor: "n2", Deadline: t0.Add(time.Second)}},
		{name: "still waiting just before the deadline",
			change: func(in *HandoverInput) { in.Now = t0.Add(999 * time.Millisecond) },
			want:   HandoverResult{Reason: HandoverWaiting, WaitFor: "n2", Deadline: t0.Add(time.Second)}},
		{name: "the deadline passed: answer anyway (MetalLB or an older Herald holds it, or the release was lost)",
			change: func(in *HandoverInput) { in.Now = t0.Add(time.Second) },
			want:   HandoverResult{Answer: true, Reason: HandoverTimedOut, WaitFor: "n2"}},
		{name: "zero Since starts the wait now",
			change: func(in *HandoverInput) { in.Since = time.Time{}; in.Now = t0.Add(time.Hour) },
			want:   HandoverResult{Reason: HandoverWaiting, WaitFor: "n2", Deadline: t0.Add(time.Hour + time.Second)}},
		{name: "released by the previous holder",
			change: func(in *HandoverInput) { in.Released = map[string]time.Time{"n2": t0.Add(-time.Second)} },
			want:   HandoverResult{Answer: true, Reason: HandoverReleased}},
		{name: "released by another node (the previous holder was a guess)",
			change: func(in *HandoverInput) { in.Released = map[string]time.Time{"n4": t0} },
			want:   HandoverResult{Answer: true, Reason: HandoverReleased}},
		{name: "a release older than the memory does not count",
			change: func(in *HandoverInput) {
				in.Released = map[string]time.Time{"n2": t0.Add(-HandoverReleaseMemory - time.Millisecond)}
			},
			want: HandoverResult{Reason: HandoverWaiting, WaitFor: "n2", Deadline: t0.Add(time.Second)}},
		{name: "a release from the future (clock step) does not count",
			change: func(in *HandoverInput) { in.Released = map[string]time.Time{"n2": t0.Add(time.Minute)} },
			want:   HandoverResult{Reason: HandoverWaiting, WaitFor: "n2", Deadline: t0.Add(time.Second)}},
		{name: "this node's own release does not count",
			change: func(in *HandoverInput) { in.Released = map[string]time.Time{"n1": t0} },
			want:   HandoverResult{Reason: HandoverWaiting, WaitFor: "n2", Deadline: t0.Add(time.Second)}},
		{name: "previous holder a release sender not live (crashed, left): at once, failover is not slowed",
			change: func(in *HandoverInput) { in.Previous = "n3" },
			want:   HandoverResult{Answer: true, Reason: HandoverPreviousNotLive}},
		{name: "previous holder unknown to memberlist and never seen sending releases: probed",
			change: func(in *HandoverInput) { in.Previous = "n9" },
			want:   HandoverResult{Reason: HandoverWaiting, WaitFor: "n9", Deadline: t0.Add(time.Second), Probe: true}},
		{name: "nil Live: every node is live",
			change: func(in *HandoverInput) { in.Live = nil; in.Previous = "n3" },
			want:   HandoverResult{Reason: HandoverWaiting, WaitFor: "n3", Deadline: t0.Add(time.Second)}},
		{name: "no previous holder",
			change: func(in *HandoverInput) { in.Previous = "" },
			want:   HandoverResult{Answer: true, Reason: HandoverNoPreviousHolder}},
		{name: "previous holder is this node",
			change: func(in *HandoverInput) { in.Previous = "n1" },
			want:   HandoverResult{Answer: true, Reason: HandoverNoPreviousHolder}},
		{name: "already answering (another Service of this node holds the address)",
			change: func(in *HandoverInput) { in.Answering = true },
			want:   HandoverResult{Answer: true, Reason: HandoverAnswering}},
		{name: "already answering wins over a pending probe",
			change: func(in *HandoverInput) { in.Answering = true; in.ReleaseSenders = nil },
			want:   HandoverResult{Answer: true, Reason: HandoverAnswering}},
		// A previous holder that sends no release (a MetalLB speaker, an
		// older Herald, no memberlist): probe the address, answer once
		// nobody answers the probes (issue #13).
		{name: "live previous holder sends no releases (a MetalLB speaker): wait for the probe",
			change: func(in *HandoverInput) { in.ReleaseSenders = map[string]bool{"n3": true} },
			want:   HandoverResult{Reason: HandoverWaiting, WaitFor: "n2", Deadline: t0.Add(time.Second), Probe: true}},
		{name: "the probe still gets answers (pending): keep waiting",
			change: func(in *HandoverInput) {
				in.ReleaseSenders = map[string]bool{"n3": true}
				in.Probe = ProbePending
				in.Now = t0.Add(500 * time.Millisecond)
			},
			want: HandoverResult{Reason: HandoverWaiting, WaitFor: "n2", Deadline: t0.Add(time.Second), Probe: true}},
		{name: "the probe went silent: answer",
			change: func(in *HandoverInput) {
				in.ReleaseSenders = map[string]bool{"n3": true}
				in.Probe = ProbeSilent
				in.Now = t0.Add(75 * time.Millisecond)
			},
			want: HandoverResult{Answer: true, Reason: HandoverProbedSilent}},
		{name: "the probe never went silent: answer at the deadline",
			change: func(in *HandoverInput) {
				in.ReleaseSenders = map[string]bool{"n3": true}
				in.Now = t0.Add(time.Second)
			},
			want: HandoverResult{Answer: true, Reason: HandoverTimedOut, WaitFor: "n2"}},
		{name: "previous holder advertises false: probed",
			change: func(in *HandoverInput) { in.ReleaseSenders = map[string]bool{"n2": false} },
			want:   HandoverResult{Reason: HandoverWaiting, WaitFor: "n2", Deadline: t0.Add(time.Second), Probe: true}},
		{name: "nil ReleaseSenders (no memberlist): nobody sends releases, probed",
			change: func(in *HandoverInput) { in.ReleaseSenders = nil },
			want:   HandoverResult{Reason: HandoverWaiting, WaitFor: "n2", Deadline: t0.Add(time.Second), Probe: true}},
		{name: "a MetalLB speaker that just left (it answers until it exits): probed, not answered at once",
			change: func(in *HandoverInput) { in.Previous = "n3"; in.ReleaseSenders = nil },
			want:   HandoverResult{Reason: HandoverWaiting, WaitFor: "n3", Deadline: t0.Add(time.Second), Probe: true}},
		{name: "a non-sender that left, probe silent: answer",
			change: func(in *HandoverInput) { in.Previous = "n3"; in.ReleaseSenders = nil; in.Probe = ProbeSilent },
			want:   HandoverResult{Answer: true, Reason: HandoverProbedSilent}},
		{name: "cannot probe, live non-sender: at once, as before probing",
			change: func(in *HandoverInput) { in.ReleaseSenders = nil; in.Probe = ProbeUnavailable },
			want:   HandoverResult{Answer: true, Reason: HandoverNoReleaseExpected}},
		{name: "cannot probe, non-sender not live: at once",
			change: func(in *HandoverInput) { in.Previous = "n3"; in.ReleaseSenders = nil; in.Probe = ProbeUnavailable },
			want:   HandoverResult{Answer: true, Reason: HandoverPreviousNotLive}},
		{name: "a probe result does not matter for a release sender: wait for its release",
			change: func(in *HandoverInput) { in.Probe = ProbeSilent },
			want:   HandoverResult{Reason: HandoverWaiting, WaitFor: "n2", Deadline: t0.Add(time.Second)}},
		{name: "a guessed release sender (speaker just started) is probed too: it may not hold the address at all",
			change: func(in *HandoverInput) { in.Guessed = true },
			want:   HandoverResult{Reason: HandoverWaiting, WaitFor: "n2", Deadline: t0.Add(time.Second), Probe: true}},
		{name: "a guessed release sender, probed silent: answer (nobody answers, no release will come)",
			change: func(in *HandoverInput) { in.Guessed = true; in.Probe = ProbeSilent },
			want:   HandoverResult{Answer: true, Reason: HandoverProbedSilent}},
		{name: "a guessed release sender, probe still hearing answers: wait",
			change: func(in *HandoverInput) { in.Guessed = true; in.Probe = ProbePending },
			want:   HandoverResult{Reason: HandoverWaiting, WaitFor: "n2", Deadline: t0.Add(time.Second), Probe: true}},
		{name: "a guessed release sender, cannot probe: wait for its release",
			change: func(in *HandoverInput) { in.Guessed = true; in.Probe = ProbeUnavailable },
			want:   HandoverResult{Reason: HandoverWaiting, WaitFor: "n2", Deadline: t0.Add(time.Second)}},
		{name: "a guessed release sender that releases: answer",
			change: func(in *HandoverInput) { in.Guessed = true; in.Released = map[string]time.Time{"n2": t0} },
			want:   HandoverResult{Answer: true, Reason: HandoverReleased}},
		{name: "a release received counts even from a node that did not advertise it",
			change: func(in *HandoverInput) {
				in.ReleaseSenders = nil
				in.Released = map[string]time.Time{"n2": t0}
			},
			want: HandoverResult{Answer: true, Reason: HandoverReleased}},
		{name: "hand-over off: no probe either",
			change: func(in *HandoverInput) { in.Timeout = 0; in.ReleaseSenders = nil },
			want:   HandoverResult{Answer: true, Reason: HandoverDisabled}},
		{name: "timeout 0 disables the hand-over",
			change: func(in *HandoverInput) { in.Timeout = 0 },
			want:   HandoverResult{Answer: true, Reason: HandoverDisabled}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := base
			if tt.change != nil {
				tt.change(&in)
			}
			if got := Handover(in); got != tt.want {
				t.Errorf("Handover = %+v (%s), want %+v (%s)", got, got.Reason, tt.want, tt.want.Reason)
			}
		})
	}
}

func TestHandoverReasonString(t *testing.T) {
	for r := HandoverWaiting; r <= HandoverProbedSilent; r++ {
		if s := r.String(); s == "" || s == "unknown" {
			t.Errorf("HandoverReason(%d) has no name", r)
		}
	}
	if s := HandoverReason(200).String(); s != "unknown" {
		t.Errorf("HandoverReason(200) = %q", s)
	}
	for p := ProbePending; p <= ProbeUnavailable; p++ {
		if s := p.String(); s == "" || s == "unknown" {
			t.Errorf("ProbeResult(%d) has no name", p)
		}
	}
}

func TestPreviousL2Holder(t *testing.T) {
	c := newCluster(3)
	c.res.L2Advertisements = []v1beta1.L2Advertisement{l2ad("l2")}
	addr := "198.51.100.7"
	cands := []Candidate{{Node: "n1", Serves: 1}, {Node: "n2", Serves: 1}, {Node: "n3", Serves: 1}}
	ranked := Elect(ip(addr), cands)
	winner, second := ranked[0], ranked[1]
	in := c.input(t, winner, svc("ns/a", addr), ready("n1", "n2", "n3"))

	// A restarted winner remembers nothing: the node that wins without it,
	// i.e. the node that answered while it was down.
	if got := PreviousL2Holder(in, ip(addr), "", true); got != second {
		t.Errorf("runner-up: got %q, want %q (ranking %v)", got, second, ranked)
	}
	// What this node's own decisions last named wins over the guess.
	if got := PreviousL2Holder(in, ip(addr), ranked[2], false); got != ranked[2] {
		t.Errorf("remembered: got %q, want %q", got, ranked[2])
	}
	// A running speaker that remembers no other winner does not guess (a
	// new Service, endpoints that just appeared: nobody answered).
	if got := PreviousL2Holder(in, ip(addr), "", false); got != "" {
		t.Errorf("no guess: got %q", got)
	}
	// Remembering itself is no information.
	if got := PreviousL2Holder(in, ip(addr), winner, true); got != second {
		t.Errorf("remembered self: got %q, want %q", got, second)
	}
	// Local Service with its only endpoint on the winner: no other candidate.
	loc := c.input(t, winner, local(svc("ns/a", addr)), ready(winner))
	if got := PreviousL2Holder(loc, ip(addr), "", true); got != "" {
		t.Errorf("no other candidate: got %q", got)
	}
	// Not in a pool, no endpoint.
	if got := PreviousL2Holder(in, ip("203.0.113.1"), "", true); got != "" {
		t.Errorf("outside every pool: got %q", got)
	}
	noEps := c.input(t, winner, svc("ns/a", addr), nil)
	if got := PreviousL2Holder(noEps, ip(addr), "", true); got != "" {
		t.Errorf("no endpoint: got %q", got)
	}
	// A non-live node is no candidate (it could not have answered).
	c.live = map[string]bool{"n1": true, "n2": true, "n3": true, second: false}
	in = c.input(t, winner, svc("ns/a", addr), ready("n1", "n2", "n3"))
	if got := PreviousL2Holder(in, ip(addr), "", true); got != ranked[2] {
		t.Errorf("runner-up not live: got %q, want %q", got, ranked[2])
	}
}

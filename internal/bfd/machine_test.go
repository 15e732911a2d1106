package bfd

import (
	"errors"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func half() float64 { return 0.5 }

func TestReceiveTransitions(t *testing.T) {
	tests := []struct {
		local, remote State
		yourDiscr     uint32
		want          State
		wantDiag      Diag
		wantChange    bool
	}{
		{StateDown, StateDown, 0, StateInit, DiagNone, true},
		{StateDown, StateInit, 7, StateUp, DiagNone, true},
		{StateDown, StateUp, 7, StateDown, DiagNone, false},
		{StateDown, StateAdminDown, 0, StateDown, DiagNone, false},
		{StateInit, StateDown, 7, StateInit, DiagNone, false},
		{StateInit, StateInit, 7, StateUp, DiagNone, true},
		{StateInit, StateUp, 7, StateUp, DiagNone, true},
		{StateInit, StateAdminDown, 7, StateDown, DiagNeighborSignaledSessionDown, true},
		{StateUp, StateDown, 7, StateDown, DiagNeighborSignaledSessionDown, true},
		{StateUp, StateInit, 7, StateUp, DiagNone, false},
		{StateUp, StateUp, 7, StateUp, DiagNone, false},
		{StateUp, StateAdminDown, 7, StateDown, DiagNeighborSignaledSessionDown, true},
		{StateAdminDown, StateUp, 7, StateAdminDown, DiagAdministrativelyDown, false},
		// §6.8.6: Your Discriminator zero outside Down/AdminDown: discarded.
		{StateDown, StateInit, 0, StateDown, DiagNone, false},
		// Another session's discriminator: discarded.
		{StateUp, StateDown, 8, StateUp, DiagNone, false},
		// §6.8.6: Down (or AdminDown) with Your Discriminator zero is
		// valid: what a peer sends once its detection time expired and it
		// reset bfd.RemoteDiscr (§6.8.1). FRR 8.4's bfdd drops such a
		// packet while its session is Up; Herald applies it.
		{StateUp, StateDown, 0, StateDown, DiagNeighborSignaledSessionDown, true},
		{StateUp, StateAdminDown, 0, StateDown, DiagNeighborSignaledSessionDown, true},
		{StateInit, StateDown, 0, StateInit, DiagNone, false},
		{StateDown, StateDown, 0, StateInit, DiagNone, true},
	}
	for _, tt := range tests {
		t.Run(tt.local.String()+"+"+tt.remote.String(), func(t *testing.T) {
			m := NewMachine(7, Params{}, t0, half)
			m.state = tt.local
			if tt.local == StateAdminDown {
				m.localDiag = DiagAdministrativelyDown
			}
			out := m.Receive(ControlPacket{State: tt.remote, DetectMult: 3, MyDiscriminator: 99,
				YourDiscriminator: tt.yourDiscr, DesiredMinTxMicros: 1e6, RequiredMinRxMicros: 3e5}, t0)
			if m.State() != tt.want || m.LocalDiag() != tt.wantDiag {
				t.Fatalf("state %v diag %v, want %v %v", m.State(), m.LocalDiag(), tt.want, tt.wantDiag)
			}
			if (out.Transition != nil) != tt.wantChange {
				t.Fatalf("transition %+v, want change %v", out.Transition, tt.wantChange)
			}
			if out.Transition != nil {
				if out.Transition.Cause != CauseReceived || len(out.Send) == 0 || out.Send[0].State != tt.want {
					t.Fatalf("transition %+v send %+v", out.Transition, out.Send)
				}
			}
		})
	}
}

// pair runs two machines against each other on a virtual clock: packets
// are delivered at once unless the link is cut.
type pair struct {
	t    *testing.T
	now  time.Time
	a, b *Machine
	cut  bool
	// deaf, when set, loses every packet sent to it (a one-way break).
	deaf   *Machine
	sent   map[*Machine][]ControlPacket
	events []event
	lastRx map[*Machine]time.Time
}

type event struct {
	who *Machine
	at  time.Time
	tr  Transition
}

func newPair(t *testing.T, pa, pb Params) *pair {
	return &pair{t: t, now: t0, a: NewMachine(1, pa, t0, half), b: NewMachine(2, pb, t0, half),
		lastRx: map[*Machine]time.Time{}}
}

func (p *pair) other(m *Machine) *Machine {
	if m == p.a {
		return p.b
	}
	return p.a
}

func (p *pair) handle(m *Machine, out Output) {
	if out.Transition != nil {
		p.events = append(p.events, event{m, p.now, *out.Transition})
	}
	if p.cut {
		return
	}
	for _, pkt := range out.Send {
		if p.sent != nil {
			p.sent[m] = append(p.sent[m], pkt)
		}
		o := p.other(m)
		if o == p.deaf {
			continue
		}
		p.lastRx[o] = p.now
		p.handle(o, o.Receive(pkt, p.now))
	}
}

// run advances the clock deadline by deadline until until.
func (p *pair) run(until time.Time) {
	for {
		next := time.Time{}
		var who *Machine
		for _, m := range []*Machine{p.a, p.b} {
			if d := m.Deadline(); !d.IsZero() && (next.IsZero() || d.Before(next)) {
				next, who = d, m
			}
		}
		if next.IsZero() || next.After(until) {
			p.now = until
			return
		}
		if next.Before(p.now) {
			p.t.Fatalf("deadline %v before now %v", next, p.now)
		}
		p.now = next
		p.handle(who, who.Advance(p.now))
	}
}

func TestHandshakePollAndDetection(t *testing.T) {
	fast := Params{TransmitInterval: 100 * time.Millisecond, ReceiveInterval: 100 * time.Millisecond, DetectMultiplier: 3}
	p := newPair(t, fast, Params{TransmitInterval: 200 * time.Millisecond, ReceiveInterval: 50 * time.Millisecond, DetectMultiplier: 5})
	p.run(t0.Add(5 * time.Second))
	if p.a.State() != StateUp || p.b.State() != StateUp {
		t.Fatalf("states %v %v, want Up Up; events %+v", p.a.State(), p.b.State(), p.events)
	}
	if p.a.PollActive() || p.b.PollActive() {
		t.Fatal("poll sequence did not complete")
	}
	// Agreed intervals: a sends at max(100 ms, b's 50 ms) = 100 ms; b at
	// max(200, 100) = 200 ms. a detects after b's mult 5 × max(a's rx 100,
	// b's tx 200) = 1 s; b after 3 × max(50, 100) = 300 ms.
	if got := p.a.TxInterval(); got != 100*time.Millisecond {
		t.Errorf("a tx interval %v", got)
	}
	if got := p.b.TxInterval(); got != 200*time.Millisecond {
		t.Errorf("b tx interval %v", got)
	}
	if got := p.a.DetectionTime(); got != time.Second {
		t.Errorf("a detection time %v", got)
	}
	if got := p.b.DetectionTime(); got != 300*time.Millisecond {
		t.Errorf("b detection time %v", got)
	}
	// Both went Down -> Init -> Up (or Down -> Up) by received packets.
	for _, e := range p.events {
		if e.tr.Cause != CauseReceived {
			t.Errorf("unexpected event %+v", e)
		}
	}

	// Cut the link: each side goes Down by its detection timer, exactly one
	// detection time after its last received packet.
	p.events = nil
	p.cut = true
	p.run(p.now.Add(3 * time.Second))
	if len(p.events) != 2 {
		t.Fatalf("events after cut: %+v", p.events)
	}
	for _, e := range p.events {
		want := Transition{From: StateUp, To: StateDown, Diag: DiagControlDetectionTimeExpired, Cause: CauseDetectionTimer}
		if e.tr != want {
			t.Errorf("transition %+v, want %+v", e.tr, want)
		}
		if e.who.RemoteDiscriminator() != 0 {
			t.Error("bfd.RemoteDiscr not reset after detection time (§6.8.1)")
		}
	}
	if e := p.events[0]; e.who != p.b || e.at != p.lastRx[p.b].Add(300*time.Millisecond) {
		t.Errorf("first down %v at %v, want b at %v", e.who == p.a, e.at, p.lastRx[p.b].Add(300*time.Millisecond))
	}
	if e := p.events[1]; e.who != p.a || e.at != p.lastRx[p.a].Add(time.Second) {
		t.Errorf("second down at %v, want a at %v", e.at, p.lastRx[p.a].Add(time.Second))
	}
	// Down again: the slow rate (1 s) is back in force (§6.8.3).
	if got := p.a.TxInterval(); got != time.Second {
		t.Errorf("a tx interval while down %v", got)
	}

	// Mend the link: Up again.
	p.events = nil
	p.cut = false
	p.run(p.now.Add(5 * time.Second))
	if p.a.State() != StateUp || p.b.State() != StateUp {
		t.Fatalf("after mend %v %v; events %+v", p.a.State(), p.b.State(), p.events)
	}
}

// TestOneWayBreakTellsThePeer: when only one direction fails (b's packets
// no longer reach a), a detects it by its timer and tells b at once with a
// Down packet whose Your Discriminator is zero (bfd.RemoteDiscr reset,
// RFC 5880 §6.8.1) and Diag 1; b goes Down on that packet (Diag 3), in the
// same instant, not one detection time later. (FRR 8.4's bfdd drops that
// packet and waits for its own timer: docs/bgp.md, BFD.)
func TestOneWayBreakTellsThePeer(t *testing.T) {
	p := newPair(t, Params{}, Params{})
	p.run(t0.Add(5 * time.Second))
	if p.a.State() != StateUp || p.b.State() != StateUp {
		t.Fatalf("states %v %v, want Up Up", p.a.State(), p.b.State())
	}
	p.events, p.sent, p.deaf = nil, map[*Machine][]ControlPacket{}, p.a
	p.run(p.now.Add(3 * time.Second))
	if len(p.events) < 2 {
		t.Fatalf("events after the one-way break: %+v", p.events)
	}
	aDown, bDown := p.events[0], p.events[1]
	if want := (Transition{From: StateUp, To: StateDown, Diag: DiagControlDetectionTimeExpired, Cause: CauseDetectionTimer}); aDown.who != p.a || aDown.tr != want {
		t.Fatalf("first event %+v (a: %v), want a %+v", aDown.tr, aDown.who == p.a, want)
	}
	if want := (Transition{From: StateUp, To: StateDown, Diag: DiagNeighborSignaledSessionDown, Cause: CauseReceived}); bDown.who != p.b || bDown.tr != want || !bDown.at.Equal(aDown.at) {
		t.Fatalf("second event %+v at %v (b: %v), want b %+v at %v", bDown.tr, bDown.at, bDown.who == p.b, want, aDown.at)
	}
	var told *ControlPacket
	for i, pkt := range p.sent[p.a] {
		if pkt.State == StateDown {
			told = &p.sent[p.a][i]
			break
		}
	}
	if told == nil || told.YourDiscriminator != 0 || told.Diag != DiagControlDetectionTimeExpired || told.MyDiscriminator != p.a.LocalDiscriminator() {
		t.Fatalf("a's first Down packet %+v, want Your Discriminator 0, Diag 1, My Discriminator %d", told, p.a.LocalDiscriminator())
	}
}

func TestSetParamsPollSequence(t *testing.T) {
	p := newPair(t, Params{}, Params{})
	p.run(t0.Add(5 * time.Second))
	if p.a.State() != StateUp || p.a.TxInterval() != 300*time.Millisecond {
		t.Fatalf("a %v tx %v", p.a.State(), p.a.TxInterval())
	}
	// Change a's intervals with the link cut: the new values are sent with
	// Poll set, the old ones stay in force until the Final.
	p.cut = true
	out := p.a.SetParams(Params{TransmitInterval: 500 * time.Millisecond, ReceiveInterval: 400 * time.Millisecond}, p.now)
	if len(out.Send) != 1 || !out.Send[0].Poll || out.Send[0].DesiredMinTx() != 500*time.Millisecond ||
		out.Send[0].RequiredMinRx() != 400*time.Millisecond {
		t.Fatalf("send %+v", out.Send)
	}
	if p.a.TxInterval() != 300*time.Millisecond || !p.a.PollActive() {
		t.Fatalf("tx %v poll %v before Final", p.a.TxInterval(), p.a.PollActive())
	}
	// The answer: b answers the Poll with Final.
	p.cut = false
	ans := p.b.Receive(out.Send[0], p.now)
	if len(ans.Send) != 1 || !ans.Send[0].Final || ans.Send[0].Poll {
		t.Fatalf("answer %+v", ans.Send)
	}
	p.a.Receive(ans.Send[0], p.now)
	if p.a.PollActive() || p.a.TxInterval() != 500*time.Millisecond {
		t.Fatalf("after Final: poll %v tx %v", p.a.PollActive(), p.a.TxInterval())
	}
	// b learned a's new Required Min RX: it sends no faster than 400 ms.
	if p.b.TxInterval() != 400*time.Millisecond {
		t.Fatalf("b tx %v", p.b.TxInterval())
	}
}

func TestJitter(t *testing.T) {
	for _, tt := range []struct {
		mult uint8
		r    float64
		want time.Duration
	}{
		{3, 0, 750 * time.Millisecond},
		{3, 0.5, 875 * time.Millisecond},
		{3, 1, time.Second}, // the limit of [0,1)
		{1, 0, 750 * time.Millisecond},
		{1, 1, 900 * time.Millisecond},
	} {
		m := NewMachine(1, Params{DetectMultiplier: tt.mult}, t0, func() float64 { return tt.r })
		out := m.Advance(t0)
		if len(out.Send) != 1 {
			t.Fatalf("first packet not sent: %+v", out)
		}
		if got := m.Deadline().Sub(t0); got != tt.want {
			t.Errorf("mult %d rand %v: next packet after %v, want %v", tt.mult, tt.r, got, tt.want)
		}
	}
}

func TestPassive(t *testing.T) {
	m := NewMachine(1, Params{PassiveMode: true}, t0, half)
	if !m.Deadline().IsZero() {
		t.Fatalf("passive session has a deadline %v before hearing from the peer", m.Deadline())
	}
	if out := m.Advance(t0.Add(time.Hour)); len(out.Send) != 0 {
		t.Fatalf("passive session sent %+v", out.Send)
	}
	out := m.Receive(ControlPacket{State: StateDown, DetectMult: 3, MyDiscriminator: 9,
		DesiredMinTxMicros: 1e6, RequiredMinRxMicros: 1e6}, t0)
	if m.State() != StateInit || len(out.Send) != 1 || out.Send[0].YourDiscriminator != 9 {
		t.Fatalf("state %v send %+v", m.State(), out.Send)
	}
	if m.Deadline().IsZero() {
		t.Fatal("no periodic transmission after hearing from the peer")
	}
}

func TestAdminDown(t *testing.T) {
	p := newPair(t, Params{}, Params{})
	p.run(t0.Add(5 * time.Second))
	p.events = nil
	p.handle(p.a, p.a.AdminDown(p.now))
	want := []Transition{
		{From: StateUp, To: StateAdminDown, Diag: DiagAdministrativelyDown, Cause: CauseAdmin},
		{From: StateUp, To: StateDown, Diag: DiagNeighborSignaledSessionDown, Cause: CauseReceived},
	}
	if len(p.events) != 2 || p.events[0].tr != want[0] || p.events[1].tr != want[1] {
		t.Fatalf("events %+v", p.events)
	}
	// b stays Down while a is AdminDown (AdminDown never leads to Init).
	p.run(p.now.Add(10 * time.Second))
	if p.b.State() != StateDown {
		t.Fatalf("b %v", p.b.State())
	}
	p.handle(p.a, p.a.AdminUp(p.now))
	p.run(p.now.Add(10 * time.Second))
	if p.a.State() != StateUp || p.b.State() != StateUp {
		t.Fatalf("after AdminUp %v %v", p.a.State(), p.b.State())
	}
}

func TestValidate(t *testing.T) {
	for _, tt := range []struct {
		name string
		p    Params
		want string
	}{
		{"defaults", Params{}, ""},
		{"profile", Params{ReceiveInterval: 10 * time.Millisecond, TransmitInterval: 60 * time.Second, DetectMultiplier: 255, MinimumTTL: 1}, ""},
		{"rx too small", Params{ReceiveInterval: 9 * time.Millisecond}, "receiveInterval: 9ms is outside 10ms..60s"},
		{"tx too big", Params{TransmitInterval: 61 * time.Second}, "transmitInterval: 1m1s is outside 10ms..60s"},
		{"mult 1", Params{DetectMultiplier: 1}, "detectMultiplier: 1 is outside 2..255"},
		{"ttl 255", Params{MinimumTTL: 255}, "minimumTtl: 255 is outside 1..254"},
		{"echo", Params{EchoMode: true}, ErrEchoNotSupported.Error()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Fatalf("Validate = %q, want %q", got, tt.want)
			}
			if tt.p.EchoMode && !errors.Is(err, ErrEchoNotSupported) {
				t.Fatal("echo error not ErrEchoNotSupported")
			}
		})
	}
}

// FuzzMachine feeds a Machine arbitrary packet sequences at arbitrary
// times: it never panics, has nothing due right after Advance, never sends
// Poll and Final together, and is Up only after hearing from the peer.
func FuzzMachine(f *testing.F) {
	up, _ := (&ControlPacket{State: StateInit, DetectMult: 3, MyDiscriminator: 9, YourDiscriminator: 1,
		DesiredMinTxMicros: 1e5, RequiredMinRxMicros: 1e5}).MarshalBinary()
	f.Add(append([]byte{10, 0}, up...), false)
	f.Add([]byte{1, 2, 3}, true)
	f.Fuzz(func(t *testing.T, b []byte, passive bool) {
		now := t0
		m := NewMachine(1, Params{TransmitInterval: 50 * time.Millisecond, ReceiveInterval: 50 * time.Millisecond,
			PassiveMode: passive}, now, half)
		check := func(out Output) {
			for _, p := range out.Send {
				if p.Poll && p.Final {
					t.Fatalf("sent Poll and Final together: %+v", p)
				}
				if p.MyDiscriminator != 1 {
					t.Fatalf("sent My Discriminator %d", p.MyDiscriminator)
				}
			}
			if m.State() == StateUp && m.DetectionTime() == 0 && m.RemoteDiscriminator() == 0 {
				t.Fatal("Up without having heard from the peer")
			}
		}
		for len(b) >= 2 {
			// Two bytes: a time step in ms and an op; then maybe a packet.
			now = now.Add(time.Duration(b[0]) * time.Millisecond)
			op := b[1]
			b = b[2:]
			// The driver's loop: run what is due; afterwards nothing is.
			if d := m.Deadline(); !d.IsZero() && !now.Before(d) {
				check(m.Advance(now))
				if d := m.Deadline(); !d.IsZero() && !d.After(now) {
					t.Fatalf("after Advance(%v) the deadline is %v", now, d)
				}
			}
			switch op % 4 {
			case 0:
			case 1:
				if len(b) < PacketLen {
					return
				}
				p, err := Parse(b[:PacketLen])
				b = b[PacketLen:]
				if err == nil {
					check(m.Receive(p, now))
				}
			case 2:
				check(m.SetParams(Params{TransmitInterval: time.Duration(op) * time.Millisecond,
					ReceiveInterval: 10 * time.Millisecond, PassiveMode: passive}, now))
			case 3:
				if op&4 != 0 {
					check(m.AdminDown(now))
				} else {
					check(m.AdminUp(now))
				}
			}
		}
	})
}

package bfd

import (
	"math/rand/v2"
	"time"
)

// Cause says which event made a Machine change state.
type Cause string

// The causes of a state change.
const (
	// CauseDetectionTimer: no valid packet for a Detection Time while
	// Init or Up (RFC 5880 §6.8.4); Diag is Control Detection Time
	// Expired.
	CauseDetectionTimer Cause = "detection-timer"
	// CauseReceived: a received packet drove the state machine (§6.8.6).
	CauseReceived Cause = "received"
	// CauseAdmin: the local system disabled or enabled the session.
	CauseAdmin Cause = "admin"
)

// Transition is a change of a Machine's bfd.SessionState.
type Transition struct {
	From, To State
	// Diag is bfd.LocalDiag after the change (why this system changed
	// state; DiagNone on the way up).
	Diag  Diag
	Cause Cause
}

// Output is what a Machine asks its caller to do after an event: send the
// packets in Send (in order, now) and report Transition if not nil.
type Output struct {
	Send       []ControlPacket
	Transition *Transition
}

// Machine is one BFD session's state machine in asynchronous mode (RFC 5880
// §6.2, §6.8): the state variables of §6.8.1, the reception rules of
// §6.8.6, the timers of §6.8.2-§6.8.4 and §6.8.7, and the Poll Sequence of
// §6.5 for parameter changes. It does no I/O and reads no clock: the caller
// passes the current time to each method, calls Advance when Deadline is
// reached, and sends what the Output says. Demand mode and the Echo
// function are not implemented (this system never sets D; a peer's Demand
// mode is honoured by ceasing periodic packets, §6.8.7). A Machine is not
// safe for concurrent use.
type Machine struct {
	params Params
	rand   func() float64

	state       State
	remoteState State
	localDiscr  uint32
	remoteDiscr uint32
	localDiag   Diag

	// desiredMinTx and requiredMinRx are the values in force (used for the
	// timers); advDesiredMinTx and advRequiredMinRx are the values sent.
	// They differ during a Poll Sequence (§6.8.3).
	desiredMinTx, requiredMinRx       time.Duration
	advDesiredMinTx, advRequiredMinRx time.Duration
	pollActive                        bool

	remoteMinRx      time.Duration
	remoteDesiredTx  time.Duration
	remoteDetectMult uint8
	remoteDemand     bool
	heardFrom        bool // a valid packet arrived since the last Down

	nextTx         time.Time // zero: no periodic transmission scheduled
	detectDeadline time.Time // zero: detection timer not running
}

// NewMachine returns a session in state Down with local discriminator
// localDiscr (non-zero, unique on this system) and params p (zero fields
// take their defaults; call p.Validate first). rnd returns values in [0,1)
// for the transmit jitter of §6.8.7; nil means math/rand/v2.Float64. An
// active session schedules its first packet at now.
func NewMachine(localDiscr uint32, p Params, now time.Time, rnd func() float64) *Machine {
	if rnd == nil {
		rnd = rand.Float64
	}
	m := &Machine{
		params: p.WithDefaults(), rand: rnd,
		state: StateDown, remoteState: StateDown, localDiscr: localDiscr,
		// §6.8.1: bfd.RemoteMinRxInterval starts at 1 µs.
		remoteMinRx: time.Microsecond,
	}
	m.resetIntervals()
	if !m.params.PassiveMode {
		m.nextTx = now
	}
	return m
}

// resetIntervals puts the not-Up values in force: the configured receive
// interval and at least one second for transmission (§6.8.3).
func (m *Machine) resetIntervals() {
	m.desiredMinTx = max(m.params.TransmitInterval, slowTxInterval)
	m.requiredMinRx = m.params.ReceiveInterval
	m.advDesiredMinTx, m.advRequiredMinRx = m.desiredMinTx, m.requiredMinRx
	m.pollActive = false
}

// State returns bfd.SessionState.
func (m *Machine) State() State { return m.state }

// RemoteState returns bfd.RemoteSessionState.
func (m *Machine) RemoteState() State { return m.remoteState }

// LocalDiscriminator returns bfd.LocalDiscr.
func (m *Machine) LocalDiscriminator() uint32 { return m.localDiscr }

// RemoteDiscriminator returns bfd.RemoteDiscr (zero until a packet arrived
// and again after a Detection Time without one).
func (m *Machine) RemoteDiscriminator() uint32 { return m.remoteDiscr }

// LocalDiag returns bfd.LocalDiag.
func (m *Machine) LocalDiag() Diag { return m.localDiag }

// Params returns the session's parameters with defaults filled in.
func (m *Machine) Params() Params { return m.params }

// PollActive reports whether a Poll Sequence is in progress.
func (m *Machine) PollActive() bool { return m.pollActive }

// DetectionTime returns the time after which, without a valid packet, the
// session goes Down (§6.8.4, asynchronous mode): the remote Detect Mult
// times the agreed interval, the greater of this system's
// bfd.RequiredMinRxInterval and the remote Desired Min TX Interval. Zero
// before any packet was received.
func (m *Machine) DetectionTime() time.Duration {
	if !m.heardFrom {
		return 0
	}
	return time.Duration(m.remoteDetectMult) * max(m.requiredMinRx, m.remoteDesiredTx)
}

// TxInterval returns the agreed periodic transmit interval before jitter
// (§6.8.7): the greater of bfd.DesiredMinTxInterval and
// bfd.RemoteMinRxInterval.
func (m *Machine) TxInterval() time.Duration {
	return max(m.desiredMinTx, m.remoteMinRx)
}

// Deadline returns the earliest time at which Advance has work (the next
// periodic packet or the detection timer), or the zero time if none.
func (m *Machine) Deadline() time.Time {
	switch {
	case m.nextTx.IsZero():
		return m.detectDeadline
	case m.detectDeadline.IsZero():
		return m.nextTx
	case m.detectDeadline.Before(m.nextTx):
		return m.detectDeadline
	}
	return m.nextTx
}

// Advance runs the timers due at now: the detection timer (Init or Up to
// Down with Diag Control Detection Time Expired, §6.8.4; bfd.RemoteDiscr is
// reset to zero, §6.8.1) and the periodic transmission (§6.8.7).
func (m *Machine) Advance(now time.Time) Output {
	var out Output
	if !m.detectDeadline.IsZero() && !now.Before(m.detectDeadline) {
		m.detectDeadline = time.Time{}
		m.remoteDiscr = 0
		m.heardFrom = false
		m.remoteState = StateDown
		m.remoteDemand = false
		if m.state == StateInit || m.state == StateUp {
			out.Transition = m.setState(StateDown, DiagControlDetectionTimeExpired, CauseDetectionTimer)
			// Tell the peer at once.
			out.Send = append(out.Send, m.packet(false))
		}
		if m.params.PassiveMode {
			m.nextTx = time.Time{}
		} else if m.nextTx.IsZero() {
			m.nextTx = now
		}
	}
	if !m.nextTx.IsZero() && !now.Before(m.nextTx) {
		if m.mayTransmit() {
			out.Send = append(out.Send, m.packet(false))
		}
		m.scheduleTx(now)
	}
	return out
}

// mayTransmit applies the transmission rules of §6.8.7.
func (m *Machine) mayTransmit() bool {
	if m.state == StateAdminDown {
		return true // §6.8.16: keep telling the peer for a while
	}
	if m.params.PassiveMode && m.remoteDiscr == 0 {
		return false
	}
	if m.remoteMinRx == 0 {
		return false
	}
	if m.remoteDemand && m.state == StateUp && m.remoteState == StateUp && !m.pollActive {
		return false
	}
	return true
}

// scheduleTx sets the next periodic transmission after now: the agreed
// interval reduced by 0-25 % at random, or by 10-25 % with a Detect Mult of
// 1, so that it lies in 75-100 % (75-90 %) of the interval (§6.8.7).
func (m *Machine) scheduleTx(now time.Time) {
	if m.params.PassiveMode && m.remoteDiscr == 0 {
		m.nextTx = time.Time{}
		return
	}
	iv := m.TxInterval()
	frac := 0.75 + 0.25*m.rand()
	if m.params.DetectMultiplier == 1 {
		frac = 0.75 + 0.15*m.rand()
	}
	m.nextTx = now.Add(time.Duration(float64(iv) * frac))
}

// Receive applies a packet received for this session (already checked by
// Parse and demultiplexed to it) as RFC 5880 §6.8.6 says. A packet with
// Your Discriminator set must carry this session's discriminator; packets
// for an AdminDown session are discarded; Output.Send holds the answer to
// a Poll (Final set) and a packet announcing a state change.
func (m *Machine) Receive(p ControlPacket, now time.Time) Output {
	var out Output
	if p.YourDiscriminator != 0 && p.YourDiscriminator != m.localDiscr {
		return out
	}
	if p.YourDiscriminator == 0 && p.State != StateDown && p.State != StateAdminDown {
		return out
	}
	wasPassiveSilent := m.params.PassiveMode && m.remoteDiscr == 0
	m.remoteDiscr = p.MyDiscriminator
	m.remoteState = p.State
	m.remoteDemand = p.Demand
	m.remoteMinRx = p.RequiredMinRx()
	m.remoteDesiredTx = p.DesiredMinTx()
	m.remoteDetectMult = p.DetectMult
	m.heardFrom = true
	if p.Final && m.pollActive {
		// §6.5: the Poll Sequence is complete, the new values are in force.
		m.pollActive = false
		m.desiredMinTx, m.requiredMinRx = m.advDesiredMinTx, m.advRequiredMinRx
	}
	if m.state == StateAdminDown {
		return out
	}
	from := m.state
	if p.State == StateAdminDown {
		if m.state != StateDown {
			out.Transition = m.setState(StateDown, DiagNeighborSignaledSessionDown, CauseReceived)
		}
	} else {
		switch m.state {
		case StateDown:
			switch p.State {
			case StateDown:
				out.Transition = m.setState(StateInit, m.localDiag, CauseReceived)
			case StateInit:
				out.Transition = m.setState(StateUp, DiagNone, CauseReceived)
			}
		case StateInit:
			if p.State == StateInit || p.State == StateUp {
				out.Transition = m.setState(StateUp, DiagNone, CauseReceived)
			}
		case StateUp:
			if p.State == StateDown {
				out.Transition = m.setState(StateDown, DiagNeighborSignaledSessionDown, CauseReceived)
			}
		}
	}
	// The detection timer restarts with every valid packet (§6.8.4) and
	// uses the values just learned.
	m.detectDeadline = now.Add(m.DetectionTime())
	if p.Poll {
		// §6.8.6: answer a Poll with Final set, at once.
		out.Send = append(out.Send, m.packet(true))
	}
	switch {
	case out.Transition != nil && m.state != from:
		// Announce the new state at once; the periodic timer restarts.
		out.Send = append(out.Send, m.packet(false))
		m.scheduleTx(now)
	case wasPassiveSilent || m.nextTx.IsZero() || m.nextTx.After(now.Add(m.TxInterval())):
		// First packet of a passive session, or a faster agreed rate.
		m.scheduleTx(now)
	}
	return out
}

// setState changes bfd.SessionState and the intervals that depend on it:
// coming Up starts a Poll Sequence to the configured transmit interval if
// it is below the one-second floor, going Down restores the floor (§6.8.3).
func (m *Machine) setState(to State, diag Diag, cause Cause) *Transition {
	t := &Transition{From: m.state, To: to, Diag: diag, Cause: cause}
	m.state, m.localDiag = to, diag
	switch to {
	case StateUp:
		m.startPoll(m.params.TransmitInterval, m.params.ReceiveInterval)
	case StateDown, StateAdminDown:
		m.resetIntervals()
	}
	return t
}

// startPoll advertises new interval values in packets with Poll set until
// the peer answers with Final (§6.5, §6.8.3). Nothing changes if the values
// are the ones in force.
func (m *Machine) startPoll(desiredTx, requiredRx time.Duration) {
	m.advDesiredMinTx, m.advRequiredMinRx = desiredTx, requiredRx
	if desiredTx == m.desiredMinTx && requiredRx == m.requiredMinRx {
		m.pollActive = false
		return
	}
	m.pollActive = true
	// The peer uses advertised values at once: a faster transmission and a
	// longer receive interval (hence a longer detection time) are put in
	// force now; a slower transmission and a shorter receive interval only
	// when the Poll Sequence completes (§6.8.3).
	m.desiredMinTx = min(m.desiredMinTx, desiredTx)
	m.requiredMinRx = max(m.requiredMinRx, requiredRx)
}

// SetParams changes the session's parameters. Interval changes take effect
// through a Poll Sequence while the session is Up (§6.8.3) and at once
// otherwise; the first packet with Poll set is in Output.Send. A change of
// PassiveMode or DetectMultiplier applies from the next packet.
func (m *Machine) SetParams(p Params, now time.Time) Output {
	m.params = p.WithDefaults()
	var out Output
	if m.state == StateUp {
		m.startPoll(m.params.TransmitInterval, m.params.ReceiveInterval)
		if m.pollActive {
			out.Send = append(out.Send, m.packet(false))
			m.scheduleTx(now)
		}
	} else if m.state != StateAdminDown {
		m.resetIntervals()
	}
	if !m.params.PassiveMode && m.nextTx.IsZero() {
		m.nextTx = now
	}
	return out
}

// AdminDown puts the session in AdminDown with Diag Administratively Down
// (§6.8.16) and returns the packet that tells the peer; the peer then goes
// Down with Diag Neighbor Signaled Session Down.
func (m *Machine) AdminDown(now time.Time) Output {
	if m.state == StateAdminDown {
		return Output{}
	}
	out := Output{Transition: m.setState(StateAdminDown, DiagAdministrativelyDown, CauseAdmin)}
	m.detectDeadline = time.Time{}
	out.Send = append(out.Send, m.packet(false))
	m.scheduleTx(now)
	return out
}

// AdminUp leaves AdminDown for Down (§6.8.16).
func (m *Machine) AdminUp(now time.Time) Output {
	if m.state != StateAdminDown {
		return Output{}
	}
	out := Output{Transition: m.setState(StateDown, DiagAdministrativelyDown, CauseAdmin)}
	if !m.params.PassiveMode {
		m.nextTx = now
	}
	return out
}

// packet builds the Control packet this system sends now (§6.8.7).
func (m *Machine) packet(final bool) ControlPacket {
	return ControlPacket{
		Diag:                m.localDiag,
		State:               m.state,
		Poll:                m.pollActive && !final,
		Final:               final,
		DetectMult:          m.params.DetectMultiplier,
		MyDiscriminator:     m.localDiscr,
		YourDiscriminator:   m.remoteDiscr,
		DesiredMinTxMicros:  uint32(m.advDesiredMinTx / time.Microsecond),
		RequiredMinRxMicros: uint32(m.advRequiredMinRx / time.Microsecond),
		// The Echo function is not supported (§6.8.1,
		// bfd.RequiredMinEchoRxInterval 0).
	}
}

package members

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultBindPort is memberlist's default port, used for both TCP and UDP.
const DefaultBindPort = 7946

// ErrInvalidConfig is wrapped by every error [New] returns for a bad [Config].
var ErrInvalidConfig = errors.New("invalid memberlist config")

// ErrAlreadyRunning is returned by a second call of [List.Run].
var ErrAlreadyRunning = errors.New("memberlist already running")

// Config configures a [List].
type Config struct {
	// NodeName is this speaker's Kubernetes node name (spec.nodeName); it is
	// the memberlist member name and the key in [List.Live]. Required.
	NodeName string
	// BindAddr is the address to bind and advertise: the speaker pod's IP
	// (status.podIP, the node IP under hostNetwork). Required; an
	// unspecified address (0.0.0.0, ::) is rejected because memberlist would
	// then guess an advertise address from the interfaces.
	BindAddr netip.Addr
	// BindPort is the TCP and UDP port, 0..65535; 0 picks a free port
	// (tests). Peers are expected to use the same port.
	BindPort int
	// Secret is the raw content of the memberlist Secret's `secretkey` value
	// (as mounted, not base64-decoded). The gossip key is DeriveKey(Secret).
	// Empty means unencrypted gossip; Run logs a warning.
	Secret []byte
	// SecretFile, when set with a non-empty Secret, is the file Secret was
	// read from (<--ml-secret-key-path>/secretkey, a mounted Secret volume).
	// Run re-reads it when it changes and rotates to the new key without a
	// split (see [List.SetSecret]).
	SecretFile string
	// PreviousSecret is the raw content of the Secret's `previoussecretkey`
	// value when there is one (the controller keeps the key it replaced
	// there for a while after re-creating or re-keying the Secret; see
	// internal/k8s/mlsecret). A speaker that starts with it starts as if it
	// had been running with PreviousSecret and then learnt Secret: it
	// encrypts with the previous key, decrypts with both, and completes the
	// rotation with the others once it has joined them (see keyring.go,
	// "Starting during a rotation"). Empty, or equal to Secret: ignored.
	PreviousSecret []byte
	// KeyDerivation is how Secret becomes the gossip key: "" or
	// KeyDerivationHerald (DeriveKey), or KeyDerivationMetalLB for the
	// migration window only (migration.go).
	KeyDerivation KeyDerivation
	// Timings are the protocol timings; start from [DefaultTimings].
	Timings Timings
	// Registerer receives the package's metrics; nil registers none.
	Registerer prometheus.Registerer
	// OnReleased, when set, receives each layer 2 hand-over release another
	// member sent (see [List.Released]): its node name and the addresses it
	// no longer answers. It runs on memberlist's packet handler and must
	// not block.
	OnReleased func(node string, ips []netip.Addr)
	// SendsReleases advertises in this member's node metadata that it
	// sends a hand-over release ([List.Released]) whenever it stops
	// answering layer 2 addresses while it stays live: set it when the
	// layer 2 announcer is wired to Released. Takers wait for a release
	// only from members that advertise it ([List.ReleaseSenders]).
	SendsReleases bool
}

// Timings are the memberlist protocol timings plus this package's own join
// and leave timings. Zero values are invalid; start from [DefaultTimings] or
// [WANTimings].
type Timings struct {
	// ProbeInterval is how often each member probes one other member
	// (round robin over a shuffled member list).
	ProbeInterval time.Duration
	// ProbeTimeout is how long a direct UDP ping waits for its ack before
	// indirect pings and the TCP fallback are tried; must be < ProbeInterval.
	ProbeTimeout time.Duration
	// SuspicionMult scales how long a suspect member has to refute before it
	// is declared failed: SuspicionMult * max(1, log10(members)) *
	// ProbeInterval. With SuspicionMult >= 3, memberlist (Lifeguard) waits
	// for SuspicionMult-2 independent confirmations and otherwise for up to
	// SuspicionMaxTimeoutMult times that long.
	SuspicionMult int
	// SuspicionMaxTimeoutMult bounds the unconfirmed suspicion timeout (see
	// SuspicionMult).
	SuspicionMaxTimeoutMult int
	// IndirectChecks is how many other members ping a member on our behalf
	// when the direct ping fails.
	IndirectChecks int
	// AwarenessMaxMultiplier bounds how far a member that notices it is
	// itself unhealthy (missed acks/nacks) stretches its probe timings;
	// this is what keeps an overloaded prober from declaring healthy peers
	// dead.
	AwarenessMaxMultiplier int
	// GossipInterval is how often queued state changes are sent to
	// GossipNodes random members.
	GossipInterval time.Duration
	// GossipNodes is the gossip fan-out per GossipInterval.
	GossipNodes int
	// RetransmitMult: each state change is retransmitted RetransmitMult *
	// ceil(log10(members+1)) times.
	RetransmitMult int
	// PushPullInterval is how often full state is exchanged with one random
	// member over TCP (anti-entropy, heals partitions).
	PushPullInterval time.Duration
	// TCPTimeout bounds TCP operations: join, push/pull. It also bounds how
	// long a join attempt to an unreachable peer blocks.
	TCPTimeout time.Duration
	// RejoinInterval is how often missing peers from the last SetPeers are
	// joined again (MetalLB: 1 min). A peer is missing when its address is
	// not an alive or suspect member: not up yet, or declared failed (a
	// partition). It bounds how long a healed partition stays split: about
	// two intervals, since a member that was declared failed may first have
	// to refute with a higher incarnation. Cost per interval and missing
	// peer: one TCP connection with an encrypted push/pull (a few hundred
	// bytes per member) when the peer answers, a refused connection when its
	// port is closed, or a connection attempt blocking up to TCPTimeout when
	// its host is gone; nothing when every peer is a member.
	RejoinInterval time.Duration
	// AloneAfter bounds the start-up gate (see List.Joined): when no join
	// has succeeded for this long since Run first had another speaker's
	// address to join, the speaker elects as if it were alone.
	AloneAfter time.Duration
	// LeaveTimeout bounds the graceful leave broadcast on shutdown
	// (MetalLB: 1 s).
	LeaveTimeout time.Duration
}

// DefaultTimings returns timings tuned for fast failover on a LAN.
//
// Target (issue): a killed speaker or cut link is replaced within 1 s p50 and
// 2 s p99, including the announcer's reaction; a graceful stop within 300 ms
// (graceful stops do not depend on these timings: see leaving.go).
// Failure detection is probe wait + probe + suspicion + gossip:
//
//   - ProbeInterval 150 ms (memberlist LAN: 1 s): every member probes one
//     other member per interval, so a dead member is first probed within
//     about one interval, and the probe fails at its end.
//   - ProbeTimeout 75 ms (LAN: 500 ms): LAN RTTs are well under 1 ms, so
//     75 ms tolerates heavy scheduling delay and still leaves half the
//     interval for 3 indirect pings and the TCP fallback.
//   - SuspicionMult 3 (LAN: 4): the suspect has 3 * max(1, log10(n)) * 150 ms
//     = 450 ms (up to 10 nodes; 900 ms at 100) to refute, provided one other
//     member independently confirms the suspicion (SuspicionMult-2 = 1
//     confirmation; none in a 2-node cluster). That confirmation is what
//     keeps a single slow or partitioned prober from failing a healthy
//     member.
//   - SuspicionMaxTimeoutMult 3 (LAN: 6): without a confirmation the
//     timeout is 3 * 450 ms = 1.35 s, which bounds the worst case.
//   - GossipInterval 100 ms (LAN: 200 ms): the failure, and a refutation,
//     reach the other members within one or two gossip rounds.
//
// Measured on loopback with 3 members (TestFailureDetection, 20 trials):
// detection p50 ~0.75 s, p99 ~1.0 s. Raising SuspicionMult to 3 from 2 cost
// ~0.1 s but halved false failures under CPU starvation
// (TestNoFalseFailuresUnderLoad). Lifeguard also makes a prober that misses
// acks stretch its own probe timings up to AwarenessMaxMultiplier (8) times.
// A member that stalls for more than ~0.5 s can still be declared failed; it
// refutes when it resumes, rejoins, and the address moves back. If that is
// seen in practice (herald_memberlist_member_events_total{event="failed"}
// for nodes that were fine), raise SuspicionMult or ProbeInterval.
//
// Start-up and partitions (docs/reliability.md):
//
//   - RejoinInterval 1 s (MetalLB: 1 min): a partition longer than
//     memberlist's GossipToTheDeadTime (30 s) heals only by a join; with
//     1 s the two sides are one cluster again about 1-2 s after the link is
//     back, instead of up to a minute (TestRejoinAfterPartition). The cost is
//     one join attempt per second per missing speaker, see RejoinInterval.
//   - AloneAfter 10 s: two TCPTimeouts, so one join to every peer has had
//     time to fail even when the peers' hosts do not answer at all, plus
//     several 1 s retries for peers whose port was still closed.
func DefaultTimings() Timings {
	return Timings{
		ProbeInterval:           150 * time.Millisecond,
		ProbeTimeout:            75 * time.Millisecond,
		SuspicionMult:           3,
		SuspicionMaxTimeoutMult: 3,
		IndirectChecks:          3,
		AwarenessMaxMultiplier:  8,
		GossipInterval:          100 * time.Millisecond,
		GossipNodes:             3,
		RetransmitMult:          4,
		PushPullInterval:        30 * time.Second,
		TCPTimeout:              5 * time.Second,
		RejoinInterval:          time.Second,
		AloneAfter:              10 * time.Second,
		LeaveTimeout:            time.Second,
	}
}

// WANTimings returns memberlist's own WAN defaults (--ml-wan-config), which
// detect a failure in tens of seconds.
func WANTimings() Timings {
	return Timings{
		ProbeInterval:           5 * time.Second,
		ProbeTimeout:            3 * time.Second,
		SuspicionMult:           6,
		SuspicionMaxTimeoutMult: 6,
		IndirectChecks:          3,
		AwarenessMaxMultiplier:  8,
		GossipInterval:          500 * time.Millisecond,
		GossipNodes:             4,
		RetransmitMult:          4,
		PushPullInterval:        60 * time.Second,
		TCPTimeout:              30 * time.Second,
		RejoinInterval:          10 * time.Second,
		AloneAfter:              time.Minute,
		LeaveTimeout:            time.Second,
	}
}

// DeriveKey returns the 32-byte AES-256 gossip key for a memberlist secret:
//
//	key = SHA-256(secret bytes as stored in the Secret's `secretkey` value)
//
// The bytes are used exactly as mounted (the controller writes 22 characters
// of unpadded base64; they are not decoded and not trimmed).
//
// MetalLB computes sha256.New().Sum(secret)[:32]; hash.Hash.Sum appends the
// digest of the empty input to its argument, so MetalLB's key is the secret
// bytes followed by a prefix of SHA-256("") (metallb/metallb#3102), i.e. most
// of the key is public. Herald does not reproduce that defect, so Herald and
// MetalLB speakers cannot decrypt each other's gossip: during a mixed
// MetalLB -> Herald rollout the two groups do not see each other as members,
// and each treats the other's nodes as absent for layer 2 election.
func DeriveKey(secret []byte) []byte {
	sum := sha256.Sum256(secret)
	return sum[:]
}

func (c Config) validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("NodeName is empty"))
	}
	if !c.BindAddr.IsValid() || c.BindAddr.IsUnspecified() {
		errs = append(errs, fmt.Errorf("BindAddr %q must be a specific address (the pod IP)", c.BindAddr))
	}
	if c.BindPort < 0 || c.BindPort > 65535 {
		errs = append(errs, fmt.Errorf("BindPort %d out of range 0..65535", c.BindPort))
	}
	errs = append(errs, c.Timings.validate()...)
	if err := c.KeyDerivation.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

func (t Timings) validate() []error {
	var errs []error
	pos := func(name string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s %v must be > 0", name, d))
		}
	}
	pos("ProbeInterval", t.ProbeInterval)
	pos("ProbeTimeout", t.ProbeTimeout)
	pos("GossipInterval", t.GossipInterval)
	pos("PushPullInterval", t.PushPullInterval)
	pos("TCPTimeout", t.TCPTimeout)
	pos("RejoinInterval", t.RejoinInterval)
	pos("AloneAfter", t.AloneAfter)
	pos("LeaveTimeout", t.LeaveTimeout)
	if t.ProbeTimeout >= t.ProbeInterval {
		errs = append(errs, fmt.Errorf("ProbeTimeout %v must be < ProbeInterval %v", t.ProbeTimeout, t.ProbeInterval))
	}
	atLeast := func(name string, v, least int) {
		if v < least {
			errs = append(errs, fmt.Errorf("%s %d must be >= %d", name, v, least))
		}
	}
	atLeast("SuspicionMult", t.SuspicionMult, 1)
	atLeast("SuspicionMaxTimeoutMult", t.SuspicionMaxTimeoutMult, 1)
	atLeast("IndirectChecks", t.IndirectChecks, 0)
	atLeast("AwarenessMaxMultiplier", t.AwarenessMaxMultiplier, 1)
	atLeast("GossipNodes", t.GossipNodes, 1)
	atLeast("RetransmitMult", t.RetransmitMult, 1)
	return errs
}

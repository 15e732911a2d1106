package members

import (
	"flag"
	"time"
)

// TimingFlags are the speaker's memberlist timing flags. MetalLB has only
// --ml-wan-config and a JSON file; Herald exposes each timing as a flag
// (names prefixed ml-, like MetalLB's memberlist flags). The contract flags
// --ml-bindaddr, --ml-bindport, --ml-labels and --ml-secret-key-path, which
// have environment variables, are defined by the speaker itself.
type TimingFlags struct {
	fs  *flag.FlagSet
	t   Timings
	wan bool
}

type timingFlag struct {
	name, usage string
	dur         func(*Timings) *time.Duration // exactly one of dur, num
	num         func(*Timings) *int
}

func timingFlagTable() []timingFlag {
	return []timingFlag{
		{name: "ml-probe-interval", usage: "memberlist: probe one member every interval", dur: func(t *Timings) *time.Duration { return &t.ProbeInterval }},
		{name: "ml-probe-timeout", usage: "memberlist: direct ping ack timeout, < ml-probe-interval", dur: func(t *Timings) *time.Duration { return &t.ProbeTimeout }},
		{name: "ml-suspicion-mult", usage: "memberlist: suspicion timeout = mult * max(1, log10(members)) * probe interval; needs mult-2 confirmations", num: func(t *Timings) *int { return &t.SuspicionMult }},
		{name: "ml-suspicion-max-timeout-mult", usage: "memberlist: unconfirmed suspicion timeout multiplier", num: func(t *Timings) *int { return &t.SuspicionMaxTimeoutMult }},
		{name: "ml-indirect-checks", usage: "memberlist: members asked to ping on our behalf after a failed direct ping", num: func(t *Timings) *int { return &t.IndirectChecks }},
		{name: "ml-awareness-max-multiplier", usage: "memberlist: max stretch of own probe timings when this member is unhealthy", num: func(t *Timings) *int { return &t.AwarenessMaxMultiplier }},
		{name: "ml-gossip-interval", usage: "memberlist: gossip queued state changes every interval", dur: func(t *Timings) *time.Duration { return &t.GossipInterval }},
		{name: "ml-gossip-nodes", usage: "memberlist: gossip fan-out per interval", num: func(t *Timings) *int { return &t.GossipNodes }},
		{name: "ml-retransmit-mult", usage: "memberlist: retransmissions = mult * ceil(log10(members+1))", num: func(t *Timings) *int { return &t.RetransmitMult }},
		{name: "ml-push-pull-interval", usage: "memberlist: full state sync with one random member every interval", dur: func(t *Timings) *time.Duration { return &t.PushPullInterval }},
		{name: "ml-tcp-timeout", usage: "memberlist: timeout of TCP join and push/pull", dur: func(t *Timings) *time.Duration { return &t.TCPTimeout }},
		{name: "ml-rejoin-interval", usage: "memberlist: join missing speaker pods every interval", dur: func(t *Timings) *time.Duration { return &t.RejoinInterval }},
		{name: "ml-alone-after", usage: "memberlist: a starting speaker whose joins all fail for this long elects as if alone (layer 2 start-up gate)", dur: func(t *Timings) *time.Duration { return &t.AloneAfter }},
		{name: "ml-leave-timeout", usage: "memberlist: max wait for the leave broadcast on shutdown", dur: func(t *Timings) *time.Duration { return &t.LeaveTimeout }},
	}
}

// AddTimingFlags registers the timing flags and --ml-wan-config on fs with
// [DefaultTimings] as defaults. Call Timings after fs.Parse.
func AddTimingFlags(fs *flag.FlagSet) *TimingFlags {
	f := &TimingFlags{fs: fs, t: DefaultTimings()}
	for _, tf := range timingFlagTable() {
		if tf.dur != nil {
			fs.DurationVar(tf.dur(&f.t), tf.name, *tf.dur(&f.t), tf.usage)
		} else {
			fs.IntVar(tf.num(&f.t), tf.name, *tf.num(&f.t), tf.usage)
		}
	}
	fs.BoolVar(&f.wan, "ml-wan-config", false, "memberlist: start from memberlist's WAN timings (seconds-scale detection) instead of Herald's fast LAN defaults; explicitly set ml-* timing flags still apply")
	return f
}

// Timings returns the parsed timings: DefaultTimings, or WANTimings with
// --ml-wan-config, overridden by every timing flag set explicitly. They are
// validated by [New].
func (f *TimingFlags) Timings() Timings {
	if !f.wan {
		return f.t
	}
	t := WANTimings()
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	for _, tf := range timingFlagTable() {
		if !set[tf.name] {
			continue
		}
		if tf.dur != nil {
			*tf.dur(&t) = *tf.dur(&f.t)
		} else {
			*tf.num(&t) = *tf.num(&f.t)
		}
	}
	return t
}

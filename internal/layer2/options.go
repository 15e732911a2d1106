package layer2

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"time"

	"github.com/herald-lb/herald/internal/announce"
)

// Default option values. The gratuitous burst is tuned for fast failover: the
// first packet leaves as soon as the announcement is applied, and the repeats
// cover packet loss and an old announcer that answers for a few more
// milliseconds. MetalLB instead repeats every 1.1 s for 5 s.
const (
	// DefaultGratuitousCount is the number of gratuitous ARP packets (each a
	// request plus a reply) or unsolicited neighbor advertisements per burst.
	DefaultGratuitousCount = 5
	// DefaultGratuitousInterval is the pause between two packets of a burst.
	DefaultGratuitousInterval = 200 * time.Millisecond
	// DefaultBurstLength is how long one burst lasts with the defaults,
	// from its first packet (sent at once) to its last:
	// (DefaultGratuitousCount-1) × DefaultGratuitousInterval, 0.8 s. It is
	// the bound of "no two nodes answer for one address for longer than
	// one gratuitous burst" (docs/reliability.md).
	DefaultBurstLength = (DefaultGratuitousCount - 1) * DefaultGratuitousInterval
	// DefaultRescanInterval is how often the interfaces are listed again
	// (MetalLB: 10 s). Link changes are seen at the next scan (no netlink
	// subscription).
	DefaultRescanInterval = 10 * time.Second
	// DefaultConflictInterval is the least time between the starts of two
	// conflict re-announcements of one IP on one interface (see
	// Options.ConflictInterval): RFC 5227 §2.4 (c)'s DEFEND_INTERVAL, within
	// which a host defends its address at most once.
	DefaultConflictInterval = 10 * time.Second
)

// DefaultExcludeInterfaces returns MetalLB's interface name patterns that are
// never used for layer 2 announcements (container, CNI and virtual devices).
// Each call returns a new slice.
func DefaultExcludeInterfaces() []string {
	return []string{
		`^docker.*`, `^cbr.*`, `^dummy.*`, `^virbr.*`, `^lxcbr.*`, `^veth.*`, `^lo$`,
		`^cali.*`, `^tunl.*`, `^flannel.*`, `^kube-ipvs.*`, `^cni.*`,
		`^nodelocaldns.*`, `^lxc.*`,
	}
}

// Options configures an [Announcer]. The zero value selects the defaults.
type Options struct {
	// GratuitousCount is the number of packets per takeover burst; 0 selects
	// DefaultGratuitousCount, a negative value disables the burst.
	GratuitousCount int
	// GratuitousInterval is the pause between packets of a burst; 0 selects
	// DefaultGratuitousInterval.
	GratuitousInterval time.Duration
	// ExcludeInterfaces are regular expressions (RE2) matched against interface
	// names; a matching interface is never used. nil selects
	// DefaultExcludeInterfaces(); an empty non-nil slice excludes nothing.
	ExcludeInterfaces []string
	// RescanInterval is the period of the interface scan; 0 selects
	// DefaultRescanInterval.
	RescanInterval time.Duration
	// NetNSPath, when set, is the path of a network namespace (for example
	// /run/netns/name) in which the announcer lists interfaces and opens its
	// sockets. Empty means the namespace of the process.
	NetNSPath string
	// ConflictInterval rate-limits conflict re-announcements: when another
	// host claims an IP answered on an interface (an ARP packet with that
	// sender protocol address, or a Neighbor Advertisement for that target,
	// from a MAC address that is not one of this node's), one gratuitous
	// burst is sent there at once, and the next one for that IP and
	// interface no earlier than ConflictInterval after it. 0 selects
	// DefaultConflictInterval; negative values are an error.
	ConflictInterval time.Duration
	// OnConflict, when set, is called for each conflict re-announcement
	// (so at most once per ConflictInterval per IP and interface) with the
	// IP, the other host's MAC address and the interface name. It runs on
	// the goroutine reading that interface's packets and must not block.
	OnConflict func(ip netip.Addr, mac net.HardwareAddr, iface string)
	// OnInterfaces, when set, is called after an interface scan that
	// changed [Announcer.EligibleInterfaces] (the first scan always does),
	// with the new value, which the callee must not modify. It runs on
	// Run's goroutine and must not block.
	OnInterfaces func(*announce.NodeInterfaces)
	// OnReleased, when set, is called with the IPs this node stopped
	// answering because they were withdrawn (no owner announces them any
	// more; SetOwner), once the responders no longer answer them and every
	// gratuitous burst for them has ended, so that no packet claiming them
	// leaves this node afterwards. The speaker tells the other speakers (a
	// layer 2 hand-over release, see docs/l2-failover.md). It runs on Run's
	// goroutine, after the change is applied, and must not block; it is not
	// called for the withdrawals of Run's own shutdown.
	OnReleased func(ips []netip.Addr)
	// ProbeInterval is the time between two rounds of [Announcer.Probe]
	// and how long a round waits for answers; 0 selects
	// DefaultProbeInterval; negative values are an error.
	ProbeInterval time.Duration
	// ProbeCount is the number of consecutive unanswered rounds after
	// which [Announcer.Probe] reports the address silent; 0 selects
	// DefaultProbeCount; negative values are an error.
	ProbeCount int
}

// resolved is Options after defaults and regex compilation.
type resolved struct {
	count    int
	interval time.Duration
	exclude  []*regexp.Regexp
	rescan   time.Duration
	netns    string

	conflictInterval time.Duration
	onConflict       func(netip.Addr, net.HardwareAddr, string)
	onInterfaces     func(*announce.NodeInterfaces)
	onReleased       func([]netip.Addr)
	probeInterval    time.Duration
	probeCount       int
}

func (o Options) resolve() (resolved, error) {
	r := resolved{
		count:    o.GratuitousCount,
		interval: o.GratuitousInterval,
		rescan:   o.RescanInterval,
		netns:    o.NetNSPath,

		conflictInterval: o.ConflictInterval,
		onConflict:       o.OnConflict,
		onInterfaces:     o.OnInterfaces,
		onReleased:       o.OnReleased,
		probeInterval:    o.ProbeInterval,
		probeCount:       o.ProbeCount,
	}
	if r.count == 0 {
		r.count = DefaultGratuitousCount
	}
	if r.count < 0 {
		r.count = 0
	}
	if r.interval < 0 {
		return r, fmt.Errorf("layer2 options: GratuitousInterval %s is negative", r.interval)
	}
	if r.interval == 0 {
		r.interval = DefaultGratuitousInterval
	}
	if r.rescan < 0 {
		return r, fmt.Errorf("layer2 options: RescanInterval %s is negative", r.rescan)
	}
	if r.conflictInterval < 0 {
		return r, fmt.Errorf("layer2 options: ConflictInterval %s is negative", r.conflictInterval)
	}
	if r.conflictInterval == 0 {
		r.conflictInterval = DefaultConflictInterval
	}
	if r.rescan == 0 {
		r.rescan = DefaultRescanInterval
	}
	if r.probeInterval < 0 {
		return r, fmt.Errorf("layer2 options: ProbeInterval %s is negative", r.probeInterval)
	}
	if r.probeInterval == 0 {
		r.probeInterval = DefaultProbeInterval
	}
	if r.probeCount < 0 {
		return r, fmt.Errorf("layer2 options: ProbeCount %d is negative", r.probeCount)
	}
	if r.probeCount == 0 {
		r.probeCount = DefaultProbeCount
	}
	pats := o.ExcludeInterfaces
	if pats == nil {
		pats = DefaultExcludeInterfaces()
	}
	for i, p := range pats {
		re, err := regexp.Compile(p)
		if err != nil {
			return r, fmt.Errorf("layer2 options: ExcludeInterfaces[%d] %q: %w", i, p, err)
		}
		r.exclude = append(r.exclude, re)
	}
	return r, nil
}

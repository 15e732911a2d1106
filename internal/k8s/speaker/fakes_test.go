package speaker

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/herald-lb/herald/internal/announce"
)

// fakeL2 records the declarative layer 2 state, like layer2.Announcer
// without sockets: every announced IP is answered on "eth0".
type fakeL2 struct {
	mu sync.Mutex
	// ifaces is EligibleInterfaces; nil means eth0 for ARP and NDP (set
	// with setInterfaces).
	ifaces *announce.NodeInterfaces
	// lag: Interfaces reports nothing, as the real announcer does between
	// SetOwner and its goroutine applying it.
	lag    bool
	owners map[string][]announce.L2Target
	calls  int
	// reannounced: the owned IPs at each Reannounce call.
	reannounced [][]string
	// onReleased, when set, receives the IPs no owner holds any more after
	// a SetOwner (layer2.Options.OnReleased), outside the lock.
	onReleased func([]netip.Addr)
}

// Reannounce records which IPs were owned when it was called (the real
// announcer sends one gratuitous burst for each of them).
func (f *fakeL2) Reannounce() {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ips []string
	for _, ts := range f.owners {
		for _, t := range ts {
			ips = append(ips, t.IP.String())
		}
	}
	slices.Sort(ips)
	f.reannounced = append(f.reannounced, ips)
}

func (f *fakeL2) reannounces() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reannounced)
}

func (f *fakeL2) SetOwner(owner string, targets []announce.L2Target) error {
	f.mu.Lock()
	f.calls++
	if f.owners == nil {
		f.owners = map[string][]announce.L2Target{}
	}
	before := f.heldLocked()
	if len(targets) == 0 {
		delete(f.owners, owner)
	} else {
		f.owners[owner] = slices.Clone(targets)
	}
	after := f.heldLocked()
	onReleased := f.onReleased
	f.mu.Unlock()
	var released []netip.Addr
	for ip := range before {
		if !after[ip] {
			released = append(released, ip)
		}
	}
	if len(released) > 0 && onReleased != nil {
		onReleased(released)
	}
	return nil
}

// heldLocked returns every IP some owner holds. f.mu is held.
func (f *fakeL2) heldLocked() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, ts := range f.owners {
		for _, t := range ts {
			out[t.IP] = true
		}
	}
	return out
}

// setOnReleased sets onReleased.
func (f *fakeL2) setOnReleased(fn func([]netip.Addr)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onReleased = fn
}

// Interfaces returns where ip is answered: the eligible interfaces of its
// family that one of its targets names (all of them for a target naming
// none).
func (f *fakeL2) Interfaces(ip netip.Addr) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lag {
		return nil
	}
	have := f.eligible().For(ip)
	var out []string
	for _, ts := range f.owners {
		for _, t := range ts {
			if t.IP != ip {
				continue
			}
			for _, name := range have {
				if len(t.Interfaces) == 0 || slices.Contains(t.Interfaces, name) {
					out = append(out, name)
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (f *fakeL2) eligible() *announce.NodeInterfaces {
	if f.ifaces == nil {
		return &announce.NodeInterfaces{ARP: []string{"eth0"}, NDP: []string{"eth0"}}
	}
	return f.ifaces
}

// EligibleInterfaces is eth0 for both families unless setInterfaces said
// otherwise.
func (f *fakeL2) EligibleInterfaces() *announce.NodeInterfaces {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.eligible()
}

// setInterfaces replaces the eligible interfaces (the caller then tells the
// speaker, as layer2.Options.OnInterfaces does).
func (f *fakeL2) setInterfaces(n *announce.NodeInterfaces) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ifaces = n
}

// announced returns the IPs owner announces, as strings.
func (f *fakeL2) announced(owner string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, t := range f.owners[owner] {
		out = append(out, t.IP.String())
	}
	return out
}

// fakeMembers is a memberlist stand-in whose live set the test controls;
// every fakeMembers of a test shares one liveness. A member is Joined unless
// the liveness says otherwise (notJoined), counts the rejoins the test
// declares, and records Activate.
type fakeMembers struct {
	node      string
	live      *liveness
	changes   chan struct{}
	mu        sync.Mutex
	peers     []netip.AddrPort
	activated bool
}

type liveness struct {
	mu        sync.Mutex
	live      map[string]bool
	notJoined map[string]bool // node -> its speaker has not joined yet
	// noReleases are the nodes whose speakers do not advertise that they
	// send hand-over releases (MetalLB's, an older Herald); every other
	// node does.
	noReleases map[string]bool
	rejoins    uint64
	subs       []*fakeMembers
}

func (l *liveness) member(node string) *fakeMembers {
	m := &fakeMembers{node: node, live: l, changes: make(chan struct{}, 1)}
	l.mu.Lock()
	l.subs = append(l.subs, m)
	l.mu.Unlock()
	return m
}

func (l *liveness) set(node string, alive bool) {
	l.mu.Lock()
	l.live[node] = alive
	l.mu.Unlock()
	l.notify()
}

// setJoined opens (or, for a test's start, keeps closed) node's gate.
func (l *liveness) setJoined(node string, joined bool) {
	l.mu.Lock()
	if l.notJoined == nil {
		l.notJoined = map[string]bool{}
	}
	l.notJoined[node] = !joined
	l.mu.Unlock()
	l.notify()
}

// rejoin marks node live again after it had been declared failed, as
// memberlist does when a partition heals.
func (l *liveness) rejoin(node string) {
	l.mu.Lock()
	l.live[node] = true
	l.rejoins++
	l.mu.Unlock()
	l.notify()
}

func (l *liveness) notify() {
	l.mu.Lock()
	subs := slices.Clone(l.subs)
	l.mu.Unlock()
	for _, m := range subs {
		select {
		case m.changes <- struct{}{}:
		default:
		}
	}
}

func (m *fakeMembers) Joined() bool {
	m.live.mu.Lock()
	defer m.live.mu.Unlock()
	return !m.live.notJoined[m.node]
}

func (m *fakeMembers) Rejoins() uint64 {
	m.live.mu.Lock()
	defer m.live.mu.Unlock()
	return m.live.rejoins
}

func (m *fakeMembers) Activate() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.activated = true
}

func (m *fakeMembers) isActivated() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.activated
}

func (m *fakeMembers) Live() map[string]bool {
	m.live.mu.Lock()
	defer m.live.mu.Unlock()
	out := map[string]bool{}
	for k, v := range m.live.live {
		out[k] = v
	}
	return out
}

func (m *fakeMembers) Changes() <-chan struct{} { return m.changes }

// ReleaseSenders is every known node but this one and l.noReleases.
func (m *fakeMembers) ReleaseSenders() map[string]bool {
	m.live.mu.Lock()
	defer m.live.mu.Unlock()
	out := map[string]bool{}
	for n := range m.live.live {
		if n != m.node && !m.live.noReleases[n] {
			out[n] = true
		}
	}
	return out
}

func (m *fakeMembers) SetPeers(addrs []netip.AddrPort) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.peers = slices.Clone(addrs)
}

func (m *fakeMembers) getPeers() []netip.AddrPort {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.peers)
}

// fakeRecorder keeps "Kind/name reason: message" lines.
type fakeRecorder struct {
	mu     sync.Mutex
	events []string
}

func (r *fakeRecorder) Eventf(obj runtime.Object, eventtype, reason, format string, args ...any) {
	name := "?"
	if m, err := meta.Accessor(obj); err == nil {
		name = m.GetName()
	}
	kind := fmt.Sprintf("%T", obj)
	kind = kind[strings.LastIndex(kind, ".")+1:]
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf("%s/%s %s %s: %s", kind, name, eventtype, reason, fmt.Sprintf(format, args...)))
}

// all returns a copy of the events so far.
func (r *fakeRecorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

func (r *fakeRecorder) has(substr string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if strings.Contains(e, substr) {
			return true
		}
	}
	return false
}

// count returns how many events contain substr.
func (r *fakeRecorder) count(substr string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if strings.Contains(e, substr) {
			n++
		}
	}
	return n
}

// countingHandler counts log records by message (and forwards nothing).
type countingHandler struct {
	mu     *sync.Mutex
	counts map[string]int
}

func newCountingHandler() countingHandler {
	return countingHandler{mu: &sync.Mutex{}, counts: map[string]int{}}
}

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.counts[r.Message]++
	h.mu.Unlock()
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }
func (h countingHandler) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts[msg]
}

// fakeProber is Options.L2Probe for the tests: another host answers each
// address while answering says so; a probe returns once the address is
// silent (as layer2.Announcer.Probe after its silent rounds), or ctx's
// error.
type fakeProber struct {
	mu        sync.Mutex
	answering map[netip.Addr]bool
	calls     map[netip.Addr]int
	// changed is closed (and replaced) on every change of answering.
	changed chan struct{}
}

func newFakeProber() *fakeProber {
	return &fakeProber{answering: map[netip.Addr]bool{}, calls: map[netip.Addr]int{}, changed: make(chan struct{})}
}

// fakeProberMAC is the MAC address of the host that answers the probes.
const fakeProberMAC = "02:00:00:00:00:02"

func (p *fakeProber) set(ip netip.Addr, answering bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.answering[ip] = answering
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *fakeProber) callsOf(ip netip.Addr) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[ip]
}

func (p *fakeProber) probe(ctx context.Context, ip netip.Addr, _ []string) (int, string, error) {
	p.mu.Lock()
	p.calls[ip]++
	p.mu.Unlock()
	answers, by := 0, ""
	for {
		p.mu.Lock()
		ans, ch := p.answering[ip], p.changed
		p.mu.Unlock()
		if !ans {
			return answers, by, nil
		}
		answers, by = answers+1, fakeProberMAC
		select {
		case <-ctx.Done():
			return answers, by, ctx.Err()
		case <-ch:
		}
	}
}

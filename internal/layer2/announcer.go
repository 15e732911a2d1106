package layer2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/herald-lb/herald/internal/announce"
)

// ErrInvalidIP is returned for an IP that cannot be announced (invalid,
// unspecified, loopback or multicast).
var ErrInvalidIP = errors.New("IP cannot be announced")

// tentativeRetry is how soon the interfaces are scanned again when a link
// waits for duplicate address detection of its IPv6 link-local address.
const tentativeRetry = time.Second

// Announcer answers ARP and NDP for the IPs it is told to announce and sends
// the gratuitous burst on takeover. Create it with [New], start it with
// [Announcer.Run]; the announce methods may be called before and while Run
// runs, from any goroutine.
type Announcer struct {
	log  *slog.Logger
	opts resolved
	m    *metrics
	tbl  *table
	wake chan struct{}

	running atomic.Bool
	// wg tracks every goroutine Run starts (responders and bursts); Run
	// waits for it after closing the links.
	wg sync.WaitGroup

	mu    sync.Mutex // guards links, ownMACs and each link's active set
	links map[string]*link
	// ownMACs holds the MAC address of every interface of the node (eligible
	// or not), so that a frame from another of its interfaces on the same
	// segment is not taken for a conflict.
	ownMACs map[string]bool
	// ifaces are the interfaces with an open responder after the last
	// scan; nil before the first one.
	ifaces *announce.NodeInterfaces

	// probeMu guards probes: the running Probe calls of each IP.
	probeMu sync.Mutex
	probes  map[netip.Addr]map[*prober]struct{}

	// scans counts completed interface scans (the tests wait on it to know
	// that later scans changed nothing).
	scans atomic.Uint64
}

// link is one interface with its responders and the IPs active on it.
type link struct {
	info   linkInfo
	arp    *arpResponder // nil when not allowed or not open
	ndp    *ndpResponder // nil when not allowed or not open
	ctx    context.Context
	cancel context.CancelFunc
	// active holds each IP answered on this link.
	active map[netip.Addr]*activeIP
}

// activeIP is the state of one IP answered on one link: its gratuitous
// burst and the conflict rate limit.
type activeIP struct {
	// cancel stops the running (or last) burst; nil before the first one.
	cancel context.CancelFunc
	// done is closed when the last burst started has ended.
	done chan struct{}
	// conflict: the last burst started was a conflict re-announcement.
	conflict bool
	// lastConflict is when the last conflict re-announcement started.
	lastConflict time.Time
}

// bursting reports whether a burst is still sending.
func (st *activeIP) bursting() bool {
	if st.done == nil {
		return false
	}
	select {
	case <-st.done:
		return false
	default:
		return true
	}
}

// stop ends the running burst, if any.
func (st *activeIP) stop() {
	if st.cancel != nil {
		st.cancel()
	}
}

// New returns an Announcer. log receives the announcer's logs; reg, when not
// nil, receives the metallb_layer2_* counters (labelled by ip). It returns an
// error for invalid options or when the metrics cannot be registered.
func New(log *slog.Logger, reg prometheus.Registerer, opts Options) (*Announcer, error) {
	r, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Announcer{
		log:     log,
		opts:    r,
		m:       m,
		tbl:     newTable(),
		wake:    make(chan struct{}, 1),
		links:   map[string]*link{},
		ownMACs: map[string]bool{},
		probes:  map[netip.Addr]map[*prober]struct{}{},
	}, nil
}

func (a *Announcer) poke() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// SetOwner declares the complete set of owner's (a Service key's)
// announcements, idempotently. Each target is one IP to answer for on the
// interfaces it names (announce.L2Target; an empty list means every
// eligible interface, and a named interface is used only while it is
// eligible: up, not excluded, ...). Targets with the same IP are merged
// (union of interfaces; an empty list wins). IPs of owner not in targets
// are withdrawn for owner; an IP no longer announced by any owner is not
// answered from the next received request on. An empty targets withdraws
// everything of owner. When an IP was not answered on an interface before,
// the responder starts answering there and a gratuitous burst is sent. It
// returns ErrInvalidIP (and changes nothing) if a target's IP cannot be
// announced (invalid, unspecified, multicast or loopback).
func (a *Announcer) SetOwner(owner string, targets []announce.L2Target) error {
	want := make(map[netip.Addr][]string, len(targets))
	all := map[netip.Addr]bool{}
	for i, t := range targets {
		n, ok := normalize(t.IP)
		if !ok {
			return fmt.Errorf("set announcements of %s: targets[%d].IP %s: %w", owner, i, t.IP, ErrInvalidIP)
		}
		if len(t.Interfaces) == 0 {
			all[n] = true
		}
		want[n] = append(want[n], t.Interfaces...)
	}
	for ip := range all {
		want[ip] = nil
	}
	if a.tbl.setOwner(owner, want) {
		a.poke()
	}
	return nil
}

// Owners returns the sorted owners (Service keys) announcing ip; the speaker
// names them in its l2Conflict events.
func (a *Announcer) Owners(ip netip.Addr) []string {
	n, _ := normalize(ip)
	return a.tbl.owners(n)
}

// Interfaces returns the sorted names of the interfaces on which ip is
// currently answered (empty before Run has opened the responders, or when no
// eligible interface matches). Useful for status reporting.
func (a *Announcer) Interfaces(ip netip.Addr) []string {
	n, _ := normalize(ip)
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for name, l := range a.links {
		if _, ok := l.active[n]; ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// EligibleInterfaces returns the interfaces on which the announcer has an
// open responder, ARP (IPv4) and NDP (IPv6) apart, as of the last interface
// scan: the interfaces an IP can be answered on. It returns nil before Run
// has scanned the interfaces once (the speaker glue announces nothing in
// layer 2 until then). Options.OnInterfaces reports changes.
func (a *Announcer) EligibleInterfaces() *announce.NodeInterfaces {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ifaces
}

// responding lists the links with an open responder. Callers hold a.mu.
func (a *Announcer) responding() *announce.NodeInterfaces {
	out := &announce.NodeInterfaces{}
	for name, l := range a.links {
		if l.arp != nil {
			out.ARP = append(out.ARP, name)
		}
		if l.ndp != nil {
			out.NDP = append(out.NDP, name)
		}
	}
	slices.Sort(out.ARP)
	slices.Sort(out.NDP)
	return out
}

// Run scans the interfaces, runs one ARP and one NDP responder per eligible
// interface and applies announcement changes until ctx is cancelled. It then
// closes every socket, waits for its goroutines and returns nil. It returns
// an error if the network namespace or netlink cannot be opened, or if Run
// is called twice.
func (a *Announcer) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("layer2: Run called twice")
	}
	ns := netns.None()
	var (
		h   *netlink.Handle
		err error
	)
	if a.opts.netns != "" {
		ns, err = netns.GetFromPath(a.opts.netns)
		if err != nil {
			return fmt.Errorf("open network namespace %s: %w", a.opts.netns, err)
		}
		defer ns.Close()
		h, err = netlink.NewHandleAt(ns)
	} else {
		h, err = netlink.NewHandle()
	}
	if err != nil {
		return fmt.Errorf("open netlink: %w", err)
	}
	defer h.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		a.mu.Lock()
		for name, l := range a.links {
			a.closeLink(l)
			delete(a.links, name)
		}
		a.mu.Unlock()
		a.wg.Wait()
	}()

	ticker := time.NewTicker(a.opts.rescan)
	defer ticker.Stop()
	retry := time.NewTimer(0)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			if a.scan(ctx, h, ns) {
				retry.Reset(tentativeRetry)
			}
		case <-retry.C:
			if a.scan(ctx, h, ns) {
				retry.Reset(tentativeRetry)
			}
		case <-a.wake:
			a.mu.Lock()
			rel := a.reconcile(a.tbl.takeDirty())
			a.mu.Unlock()
			a.report(rel)
		}
	}
}

// scan lists the links, opens responders on new eligible links, adjusts them
// on links whose eligibility or link-local address changed, closes them on
// links that went away, and re-applies every announcement. It reports whether
// a link waits for its IPv6 link-local address.
func (a *Announcer) scan(ctx context.Context, h *netlink.Handle, ns netns.NsHandle) (pending bool) {
	infos, err := listLinks(h)
	if err != nil {
		a.log.Error("interface scan", "error", err)
		return false
	}
	defer a.scans.Add(1) // after the unlock below: the scan's effects are visible
	var rel released
	defer func() { a.report(rel) }() // after the unlock, like onInterfaces
	var changed *announce.NodeInterfaces
	defer func() { // after the unlock, so the callback may call back in
		if changed != nil && a.opts.onInterfaces != nil {
			a.opts.onInterfaces(changed)
		}
	}()
	a.mu.Lock()
	defer a.mu.Unlock()
	defer func() {
		now := a.responding()
		if !now.Equal(a.ifaces) {
			a.ifaces, changed = now, now
		}
	}()
	clear(a.ownMACs)
	for _, info := range infos {
		if len(info.MAC) != 0 {
			a.ownMACs[string(info.MAC)] = true
		}
	}
	seen := map[string]bool{}
	for _, info := range infos {
		e := eligible(info, a.opts.exclude)
		if e.ARP && info.TentativeLinkLocal {
			pending = true
		}
		if !e.ARP && !e.NDP {
			continue
		}
		seen[info.Name] = true
		l, ok := a.links[info.Name]
		if ok && (l.info.Index != info.Index || !bytes.Equal(l.info.MAC, info.MAC)) {
			a.closeLink(l)
			ok = false
		}
		if !ok {
			lctx, cancel := context.WithCancel(ctx)
			l = &link{info: info, ctx: lctx, cancel: cancel, active: map[netip.Addr]*activeIP{}}
			a.links[info.Name] = l
		}
		a.syncLink(ns, l, info, e)
	}
	for name, l := range a.links {
		if !seen[name] {
			a.log.Info("interface no longer used", "interface", name)
			a.closeLink(l)
			delete(a.links, name)
		}
	}
	ips := a.tbl.takeDirty()
	ips = append(ips, a.tbl.all()...)
	rel = a.reconcile(ips)
	return pending
}

// syncLink closes the responders e no longer allows (the NDP one also when
// the link-local address changed) and opens the missing allowed ones; a
// responder that fails to open is retried on the next scan. Responders that
// stay keep answering without a new gratuitous burst. Callers hold a.mu.
func (a *Announcer) syncLink(ns netns.NsHandle, l *link, info linkInfo, e eligibility) {
	log := a.log.With("interface", info.Name)
	if l.arp != nil && !e.ARP {
		a.closeARP(l)
	}
	if l.ndp != nil && (!e.NDP || l.info.LinkLocal != info.LinkLocal) {
		a.closeNDP(l)
	}
	l.info = info
	openARP, openNDP := e.ARP && l.arp == nil, e.NDP && l.ndp == nil
	if !openARP && !openNDP {
		return
	}
	view := ifaceView{Name: info.Name, MAC: info.MAC}
	ifi := info.netInterface()
	err := inNetNS(ns, func() error {
		var errs []error
		if openARP {
			c, err := listenARP(ifi)
			if err == nil {
				l.arp = &arpResponder{ifc: view, conn: c, log: log, lookup: a.tbl.lookup, m: a.m, claimed: a.claimed}
			}
			errs = append(errs, err)
		}
		if openNDP {
			c, err := listenNDP(ifi)
			if err == nil {
				pc, perr := listenNDPPacket(ifi)
				if perr != nil {
					c.Close()
					err = perr
				} else {
					l.ndp = &ndpResponder{ifc: view, conn: c, pc: pc, log: log, lookup: a.tbl.lookup, m: a.m, claimed: a.claimed, groups: map[netip.Addr]int{}}
				}
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
	if err != nil {
		log.Warn("open responders", "error", err)
	}
	if openARP && l.arp != nil {
		r := l.arp
		a.wg.Go(func() { r.run(l.ctx) })
	}
	if openNDP && l.ndp != nil {
		r := l.ndp
		a.wg.Go(func() { r.run(l.ctx) })
	}
	log.Info("interface used", "arp", l.arp != nil, "ndp", l.ndp != nil, "mac", info.MAC.String())
}

// closeARP stops the IPv4 announcements on l and closes its ARP socket.
func (a *Announcer) closeARP(l *link) {
	a.stopFamily(l, netip.Addr.Is4)
	if err := l.arp.conn.Close(); err != nil {
		a.log.Debug("close ARP responder", "interface", l.info.Name, "error", err)
	}
	l.arp = nil
}

// closeNDP stops the IPv6 announcements on l and closes its NDP sockets
// (which drops the multicast memberships).
func (a *Announcer) closeNDP(l *link) {
	a.stopFamily(l, netip.Addr.Is6)
	if err := errors.Join(l.ndp.conn.Close(), l.ndp.pc.Close()); err != nil {
		a.log.Debug("close NDP responder", "interface", l.info.Name, "error", err)
	}
	l.ndp = nil
}

func (a *Announcer) stopFamily(l *link, match func(netip.Addr) bool) {
	for ip, st := range l.active {
		if match(ip) {
			st.stop()
			delete(l.active, ip)
		}
	}
}

// closeLink stops the bursts and closes the sockets of l. Callers hold a.mu.
func (a *Announcer) closeLink(l *link) {
	l.cancel()
	if l.arp != nil {
		a.closeARP(l)
	}
	if l.ndp != nil {
		a.closeNDP(l)
	}
}

// released are the IPs a reconcile found withdrawn (no owner left), with
// the done channels of the bursts it stopped for them.
type released struct {
	ips    []netip.Addr
	bursts []chan struct{}
}

// report waits for the stopped bursts of rel to end, then calls
// Options.OnReleased with rel's IPs (if any). Call it without a.mu.
func (a *Announcer) report(rel released) {
	if len(rel.ips) == 0 || a.opts.onReleased == nil {
		return
	}
	for _, done := range rel.bursts {
		<-done // cancelled: ends after the packet being sent, if any
	}
	a.opts.onReleased(rel.ips)
}

// reconcile brings the active set of every link in line with the table for
// the given IPs: it starts answering (and a gratuitous burst) where an IP
// became announced and stops where it was withdrawn. It returns the IPs
// that no owner announces any more (see Options.OnReleased). Callers hold
// a.mu.
func (a *Announcer) reconcile(ips []netip.Addr) released {
	var rel released
	done := map[netip.Addr]bool{}
	for _, ip := range ips {
		if done[ip] {
			continue
		}
		done[ip] = true
		announced := false
		for _, l := range a.links {
			_, onIface := a.tbl.lookup(ip, l.info.Name)
			want := onIface && ((ip.Is4() && l.arp != nil) || (ip.Is6() && l.ndp != nil))
			st, active := l.active[ip]
			switch {
			case want && !active:
				a.activate(l, ip)
			case !want && active:
				if st.done != nil {
					rel.bursts = append(rel.bursts, st.done)
				}
				a.deactivate(l, ip)
			}
			announced = announced || want
		}
		if ok, _ := a.tbl.lookup(ip, ""); !ok && !announced {
			a.m.forget(ip)
			// Only a table change marks an IP not in the table dirty: a
			// withdrawal.
			rel.ips = append(rel.ips, ip)
		}
	}
	return rel
}

// activate starts answering ip on l and sends the gratuitous burst.
// Callers hold a.mu.
func (a *Announcer) activate(l *link, ip netip.Addr) {
	if ip.Is6() {
		if err := l.ndp.join(ip); err != nil {
			a.log.Warn("join solicited-node group", "interface", l.info.Name, "ip", ip, "error", err)
		}
	}
	st := &activeIP{}
	l.active[ip] = st
	a.log.Info("announcing", "interface", l.info.Name, "ip", ip)
	a.burst(l, ip, st, false)
}

// burst starts a gratuitous burst for ip on l (Options.GratuitousCount
// packets, Options.GratuitousInterval apart, the first at once), replacing
// a burst still running there. conflict marks a conflict re-announcement.
// Callers hold a.mu.
func (a *Announcer) burst(l *link, ip netip.Addr, st *activeIP, conflict bool) {
	st.stop()
	st.conflict = conflict
	if a.opts.count == 0 {
		return
	}
	// Bind the responder now: the burst goroutine must not read l, which
	// the Run goroutine changes under a.mu.
	send := l.arp.gratuitous
	if ip.Is6() {
		send = l.ndp.gratuitous
	}
	name := l.info.Name
	bctx, cancel := context.WithCancel(l.ctx)
	done := make(chan struct{})
	st.cancel, st.done = cancel, done
	a.wg.Go(func() {
		defer close(done)
		defer cancel()
		for i := range a.opts.count {
			if i > 0 && !sleepCtx(bctx, a.opts.interval) {
				return
			}
			if bctx.Err() != nil {
				return
			}
			if err := send(ip); err != nil && bctx.Err() == nil {
				a.log.Warn("gratuitous announcement", "interface", name, "ip", ip, "error", err)
			}
		}
	})
}

// Reannounce sends one gratuitous burst (gratuitous ARP for IPv4,
// unsolicited neighbor advertisements for IPv6; GratuitousCount packets,
// GratuitousInterval apart, as on takeover) for every IP currently answered,
// on every interface it is answered on. A burst still running for an IP on
// an interface is replaced by the new one. Use it when other nodes may have
// answered for this node's IPs meanwhile, for example after a network
// partition healed. It returns at once; before Run has opened the
// responders, and after Run returned, it does nothing.
func (a *Announcer) Reannounce() {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, l := range a.links {
		for ip, st := range l.active {
			a.burst(l, ip, st, false)
			n++
		}
	}
	a.log.Info("re-announcing every answered IP", "announcements", n)
}

// deactivate stops the burst of ip on l and leaves its NDP group.
func (a *Announcer) deactivate(l *link, ip netip.Addr) {
	l.active[ip].stop()
	delete(l.active, ip)
	if ip.Is6() && l.ndp != nil {
		if err := l.ndp.leave(ip); err != nil {
			a.log.Warn("leave solicited-node group", "interface", l.info.Name, "ip", ip, "error", err)
		}
	}
	a.log.Info("withdrawn", "interface", l.info.Name, "ip", ip)
}

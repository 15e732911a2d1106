package bfdnet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netns"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/herald-lb/herald/internal/bfd"
)

// UDP ports of BFD Control packets.
const (
	// PortSingleHop is the destination port of single-hop BFD (RFC 5881 §4).
	PortSingleHop = 3784
	// PortMultihop is the destination port of multihop BFD (RFC 5883 §5).
	PortMultihop = 4784
	// sourcePortMin and sourcePortMax bound the source port of sent
	// packets (RFC 5881 §4, RFC 5883 §5).
	sourcePortMin = 49152
	sourcePortMax = 65535
	// ttlMax is the TTL / hop limit sent, and the one required on received
	// single-hop packets (RFC 5881 §5, the GTSM of RFC 5082).
	ttlMax = 255
)

// Key identifies a session: the peer's address, the local address packets
// are sent from, and whether the session is multihop (RFC 5883, port 4784)
// or single hop (RFC 5881, port 3784). A Manager holds at most one session
// per peer address (the metrics are labelled by peer, as MetalLB's).
type Key struct {
	Peer netip.Addr
	// Local is the source address of sent packets, and the destination
	// address received packets must have. Required for multihop; for
	// single hop the zero Addr lets the kernel choose and accepts any.
	Local    netip.Addr
	Multihop bool
}

func (k Key) String() string {
	hop := "single-hop"
	if k.Multihop {
		hop = "multihop"
	}
	if k.Local.IsValid() {
		return fmt.Sprintf("%s (%s from %s)", k.Peer, hop, k.Local)
	}
	return fmt.Sprintf("%s (%s)", k.Peer, hop)
}

func (k Key) port() int {
	if k.Multihop {
		return PortMultihop
	}
	return PortSingleHop
}

// Change is a session's state change as reported to Options.OnChange.
type Change struct {
	Key Key
	bfd.Transition
	// Time is when the Manager applied the change.
	Time time.Time
}

// Options configure a Manager.
type Options struct {
	// OnChange, if set, is called for every state change of every session,
	// in order per session, from the session's goroutine: it must not
	// block for long and must not call back into the Manager.
	OnChange func(Change)
	// NetNSPath, when set, is a network namespace (e.g. /run/netns/x) in
	// which every socket is opened (used by tests).
	NetNSPath string
	// Rand, if set, returns values in [0,1) for the transmit jitter.
	Rand func() float64
}

// Manager runs BFD sessions over UDP (RFC 5881 single hop, RFC 5883
// multihop, IPv4 and IPv6). It listens on 3784/4784 once a session needs
// the port and family, demultiplexes received packets by Your
// Discriminator or, while that is zero, by peer and local address (RFC 5880
// §6.3), and runs each session's bfd.Machine on its own goroutine. Listening
// sockets stay open until Close.
type Manager struct {
	log  *slog.Logger
	met  *metrics
	opts Options
	ns   netns.NsHandle

	mu        sync.Mutex
	closed    bool
	byPeer    map[netip.Addr]*Session
	byDiscr   map[uint32]*Session
	listeners map[listenerKey]*listener
	wg        sync.WaitGroup
}

type listenerKey struct {
	port int
	v6   bool
}

// New returns a Manager that logs to log (nil: slog.Default()); its metrics
// go to reg (nil: none). It fails if the metrics are registered already or
// Options.NetNSPath cannot be opened.
func New(log *slog.Logger, reg prometheus.Registerer, opts Options) (*Manager, error) {
	if log == nil {
		log = slog.Default()
	}
	met, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	m := &Manager{log: log, met: met, opts: opts, ns: netns.None(),
		byPeer: map[netip.Addr]*Session{}, byDiscr: map[uint32]*Session{},
		listeners: map[listenerKey]*listener{}}
	if opts.NetNSPath != "" {
		m.ns, err = netns.GetFromPath(opts.NetNSPath)
		if err != nil {
			return nil, fmt.Errorf("bfd: open network namespace %s: %w", opts.NetNSPath, err)
		}
	}
	return m, nil
}

// Session is one running BFD session of a Manager.
type Session struct {
	key   Key
	m     *Manager
	conn  *net.UDPConn
	dst   *net.UDPAddr
	discr uint32

	state  atomic.Uint32
	minTTL atomic.Uint32
	in     chan bfd.ControlPacket
	params chan bfd.Params
	cancel context.CancelFunc
	done   chan struct{}
}

// Key returns the session's key.
func (s *Session) Key() Key { return s.key }

// State returns the session's current bfd.SessionState.
func (s *Session) State() bfd.State { return bfd.State(s.state.Load()) }

// LocalDiscriminator returns the session's bfd.LocalDiscr.
func (s *Session) LocalDiscriminator() uint32 { return s.discr }

// Update changes the session's parameters; interval changes of an Up
// session take effect through a Poll Sequence (RFC 5880 §6.8.3). The error
// is Validate's.
func (s *Session) Update(p bfd.Params) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("bfd session %s: %w", s.key, err)
	}
	select {
	case s.params <- p:
		s.minTTL.Store(uint32(p.WithDefaults().MinimumTTL))
	case <-s.done:
		return fmt.Errorf("bfd session %s: removed", s.key)
	}
	return nil
}

// Add starts a session with key k and parameters p. It fails if p is
// invalid (see bfd.Params.Validate), if the key is incomplete (no peer,
// multihop without a local address, families that differ), if a session
// to k.Peer exists, or if a socket cannot be opened (e.g. port 3784 taken
// by another BFD daemon).
func (m *Manager) Add(k Key, p bfd.Params) (*Session, error) {
	if err := m.checkKey(k); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("bfd session %s: %w", k, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errors.New("bfd: manager closed")
	}
	if old, ok := m.byPeer[k.Peer]; ok {
		return nil, fmt.Errorf("bfd session %s: a session to %s exists (%s)", k, k.Peer, old.key)
	}
	if err := m.listen(k.port(), k.Peer.Is6()); err != nil {
		return nil, fmt.Errorf("bfd session %s: %w", k, err)
	}
	conn, err := m.txConn(k)
	if err != nil {
		return nil, fmt.Errorf("bfd session %s: %w", k, err)
	}
	discr := rand.Uint32()
	for discr == 0 || m.byDiscr[discr] != nil {
		discr = rand.Uint32()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Session{key: k, m: m, conn: conn, discr: discr,
		dst: net.UDPAddrFromAddrPort(netip.AddrPortFrom(k.Peer, uint16(k.port()))),
		in:  make(chan bfd.ControlPacket, 16), params: make(chan bfd.Params),
		cancel: cancel, done: make(chan struct{})}
	s.state.Store(uint32(bfd.StateDown))
	s.minTTL.Store(uint32(p.WithDefaults().MinimumTTL))
	m.byPeer[k.Peer] = s
	m.byDiscr[discr] = s
	m.met.up.With(peerLabels(k.Peer)).Set(0)
	mach := bfd.NewMachine(discr, p, time.Now(), m.opts.Rand)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		s.run(ctx, mach)
	}()
	m.log.Info("bfd session added", "peer", k.Peer, "local", k.Local, "multihop", k.Multihop,
		"discriminator", discr, "params", mach.Params())
	return s, nil
}

func (m *Manager) checkKey(k Key) error {
	switch {
	case !k.Peer.IsValid():
		return errors.New("bfd session: no peer address")
	case k.Peer.Zone() != "":
		return fmt.Errorf("bfd session %s: peer address with a zone is not supported", k)
	case k.Multihop && !k.Local.IsValid():
		return fmt.Errorf("bfd session %s: multihop needs a local address (RFC 5883 §3)", k)
	case k.Local.IsValid() && k.Local.Is4() != k.Peer.Is4():
		return fmt.Errorf("bfd session %s: local and peer address families differ", k)
	case k.Peer.Is4In6() || k.Local.Is4In6():
		return fmt.Errorf("bfd session %s: use plain IPv4 addresses, not IPv4-mapped IPv6", k)
	}
	return nil
}

// Remove stops the session to peer: it sends one packet in AdminDown
// (Diag Administratively Down, RFC 5880 §6.8.16) so that the peer goes Down
// at once, reports that change (Up or Down to AdminDown, CauseAdmin) to
// Options.OnChange, closes the socket and drops the session's metrics.
// Removing an unknown peer is a no-op.
func (m *Manager) Remove(peer netip.Addr) {
	m.mu.Lock()
	s, ok := m.byPeer[peer]
	if ok {
		delete(m.byPeer, peer)
		delete(m.byDiscr, s.discr)
	}
	m.mu.Unlock()
	if !ok {
		return
	}
	s.cancel()
	<-s.done
	m.met.forget(peer)
	m.log.Info("bfd session removed", "peer", peer)
}

// Session returns the session to peer, if any.
func (m *Manager) Session(peer netip.Addr) (*Session, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.byPeer[peer]
	return s, ok
}

// Close removes every session (each sends AdminDown) and closes the
// listening sockets.
func (m *Manager) Close() error {
	m.mu.Lock()
	m.closed = true
	peers := make([]netip.Addr, 0, len(m.byPeer))
	for p := range m.byPeer {
		peers = append(peers, p)
	}
	m.mu.Unlock()
	for _, p := range peers {
		m.Remove(p)
	}
	m.mu.Lock()
	var errs []error
	for k, l := range m.listeners {
		errs = append(errs, l.conn.Close())
		delete(m.listeners, k)
	}
	m.mu.Unlock()
	m.wg.Wait()
	if m.ns.IsOpen() {
		m.ns.Close()
	}
	return errors.Join(errs...)
}

// run owns the session's bfd.Machine until ctx ends.
func (s *Session) run(ctx context.Context, mach *bfd.Machine) {
	defer close(s.done)
	defer s.conn.Close()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		timer.Stop()
		var tc <-chan time.Time
		if d := mach.Deadline(); !d.IsZero() {
			timer.Reset(time.Until(d))
			tc = timer.C
		}
		var out bfd.Output
		select {
		case <-ctx.Done():
			out = mach.AdminDown(time.Now())
			s.apply(out)
			return
		case p := <-s.in:
			out = mach.Receive(p, time.Now())
		case p := <-s.params:
			out = mach.SetParams(p, time.Now())
		case <-tc:
			out = mach.Advance(time.Now())
		}
		s.apply(out)
	}
}

// apply sends out's packets and reports its transition.
func (s *Session) apply(out bfd.Output) {
	m := s.m
	labels := peerLabels(s.key.Peer)
	for i := range out.Send {
		b, _ := out.Send[i].MarshalBinary()
		if _, err := s.conn.WriteToUDP(b, s.dst); err != nil {
			m.log.Debug("bfd send failed", "peer", s.key.Peer, "error", err)
			continue
		}
		m.met.out.With(labels).Inc()
	}
	t := out.Transition
	if t == nil {
		return
	}
	s.state.Store(uint32(t.To))
	switch {
	case t.To == bfd.StateUp:
		m.met.upEvents.With(labels).Inc()
		m.met.up.With(labels).Set(1)
	case t.From == bfd.StateUp:
		m.met.downEvent.With(labels).Inc()
		m.met.up.With(labels).Set(0)
	}
	lvl := slog.LevelInfo
	if t.From == bfd.StateUp {
		lvl = slog.LevelWarn
	}
	m.log.Log(context.Background(), lvl, "bfd session state changed", "peer", s.key.Peer,
		"from", t.From, "to", t.To, "diag", t.Diag, "cause", t.Cause)
	if m.opts.OnChange != nil {
		m.opts.OnChange(Change{Key: s.key, Transition: *t, Time: time.Now()})
	}
}

// listener is one receiving socket (port, family).
type listener struct {
	conn *net.UDPConn
	p4   *ipv4.PacketConn // IPv4 listeners
	p6   *ipv6.PacketConn // IPv6 listeners
	key  listenerKey
}

// listen opens the receiving socket for port and family if it is not open.
// Called with m.mu held.
func (m *Manager) listen(port int, v6 bool) error {
	lk := listenerKey{port, v6}
	if _, ok := m.listeners[lk]; ok {
		return nil
	}
	network, ip := "udp4", net.IPv4zero
	if v6 {
		network, ip = "udp6", net.IPv6unspecified
	}
	l := &listener{key: lk}
	err := m.inNetNS(func() error {
		c, err := net.ListenUDP(network, &net.UDPAddr{IP: ip, Port: port})
		if err != nil {
			return err
		}
		// The control messages carry the received TTL / hop limit and
		// destination address; the PacketConn that asked for them must
		// be the one that reads.
		if v6 {
			l.p6 = ipv6.NewPacketConn(c)
			err = l.p6.SetControlMessage(ipv6.FlagHopLimit|ipv6.FlagDst, true)
		} else {
			l.p4 = ipv4.NewPacketConn(c)
			err = l.p4.SetControlMessage(ipv4.FlagTTL|ipv4.FlagDst, true)
		}
		if err != nil {
			c.Close()
			return err
		}
		l.conn = c
		return nil
	})
	if err != nil {
		return fmt.Errorf("listen on %s port %d: %w", network, port, err)
	}
	m.listeners[lk] = l
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.readLoop(l)
	}()
	return nil
}

// readLoop receives packets on l until it is closed.
func (m *Manager) readLoop(l *listener) {
	buf := make([]byte, 1500)
	p4, p6 := l.p4, l.p6
	for {
		var (
			n   int
			ttl int
			dst net.IP
			src net.Addr
			err error
		)
		if p6 != nil {
			var cm *ipv6.ControlMessage
			n, cm, src, err = p6.ReadFrom(buf)
			if cm != nil {
				ttl, dst = cm.HopLimit, cm.Dst
			}
		} else {
			var cm *ipv4.ControlMessage
			n, cm, src, err = p4.ReadFrom(buf)
			if cm != nil {
				ttl, dst = cm.TTL, cm.Dst
			}
		}
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				m.log.Error("bfd receive failed, listener stops", "port", l.key.port, "error", err)
			}
			return
		}
		ua, _ := src.(*net.UDPAddr)
		if ua == nil {
			continue
		}
		from := ua.AddrPort()
		to, _ := netip.AddrFromSlice(dst)
		m.deliver(buf[:n], from.Addr().Unmap(), to.Unmap(), ttl, l.key.port == PortMultihop)
	}
}

// deliver checks and demultiplexes one received packet (RFC 5880 §6.3,
// §6.8.6; RFC 5881 §5 and RFC 5883 §5 for the TTL).
func (m *Manager) deliver(b []byte, from, to netip.Addr, ttl int, multihop bool) {
	p, err := bfd.Parse(b)
	if err != nil {
		reason := "malformed"
		if errors.Is(err, bfd.ErrAuthNotSupported) {
			reason = "auth"
		}
		m.drop(reason, from, err)
		return
	}
	m.mu.Lock()
	var s *Session
	if p.YourDiscriminator != 0 {
		s = m.byDiscr[p.YourDiscriminator]
	} else {
		s = m.byPeer[from]
	}
	m.mu.Unlock()
	switch {
	case s == nil:
		m.drop("no-session", from, fmt.Errorf("no session for discriminator %d", p.YourDiscriminator))
		return
	case s.key.Peer != from || s.key.Multihop != multihop ||
		(s.key.Local.IsValid() && to.IsValid() && s.key.Local != to):
		m.drop("source", from, fmt.Errorf("packet to %s for session %s", to, s.key))
		return
	}
	minTTL := ttlMax
	if multihop {
		minTTL = int(s.minTTL.Load())
	}
	if ttl < minTTL {
		m.drop("ttl", from, fmt.Errorf("TTL %d below %d", ttl, minTTL))
		return
	}
	m.met.in.With(peerLabels(s.key.Peer)).Inc()
	select {
	case s.in <- p:
	default:
		m.drop("overflow", from, errors.New("session queue full"))
	}
}

func (m *Manager) drop(reason string, from netip.Addr, err error) {
	m.met.dropped.WithLabelValues(reason).Inc()
	m.log.Debug("bfd packet dropped", "from", from, "reason", reason, "error", err)
}

// txConn opens a session's sending socket: bound to k.Local (or any) and a
// free source port in 49152-65535, TTL / hop limit 255.
func (m *Manager) txConn(k Key) (*net.UDPConn, error) {
	network := "udp4"
	if k.Peer.Is6() {
		network = "udp6"
	}
	var local net.IP
	if k.Local.IsValid() {
		local = k.Local.AsSlice()
	}
	var conn *net.UDPConn
	err := m.inNetNS(func() error {
		var lastErr error
		for range 64 {
			port := sourcePortMin + rand.IntN(sourcePortMax-sourcePortMin+1)
			c, err := net.ListenUDP(network, &net.UDPAddr{IP: local, Port: port})
			if err != nil {
				lastErr = err
				if errors.Is(err, syscall.EADDRINUSE) {
					continue
				}
				return err
			}
			if k.Peer.Is6() {
				err = ipv6.NewPacketConn(c).SetHopLimit(ttlMax)
			} else {
				err = ipv4.NewPacketConn(c).SetTTL(ttlMax)
			}
			if err != nil {
				c.Close()
				return fmt.Errorf("set TTL 255: %w", err)
			}
			conn = c
			return nil
		}
		return fmt.Errorf("no free source port in %d-%d: %w", sourcePortMin, sourcePortMax, lastErr)
	})
	if err != nil {
		return nil, fmt.Errorf("open %s socket: %w", network, err)
	}
	return conn, nil
}

// inNetNS runs fn on an OS thread in the Manager's network namespace (if
// any); sockets fn opens stay in that namespace.
func (m *Manager) inNetNS(fn func() error) error {
	if !m.ns.IsOpen() {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(m.ns); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter network namespace: %w", err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			// The thread stays locked and dies with the goroutine.
			errc <- errors.Join(ferr, fmt.Errorf("restore network namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

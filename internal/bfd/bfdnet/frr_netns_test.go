package bfdnet

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/herald-lb/herald/internal/bfd"
	"github.com/herald-lb/herald/internal/poll"
)

// The tests in this file run a Manager against FRR's bfdd across a real
// veth: namespace "h" (Herald, 198.51.100.1, 2001:db8::1) and namespace "f"
// (zebra + bfdd, 198.51.100.2, 2001:db8::2). They need root, iproute2 and
// FRR (hack/install-deps.sh); they are skipped only under -short.

var labSeq atomic.Int32

type frrLab struct {
	h, f string // namespace names; f is also the FRR instance name
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func newFRRLab(t *testing.T) *frrLab {
	t.Helper()
	if testing.Short() {
		t.Skip("needs root, network namespaces and FRR; skipped under -short")
	}
	if os.Geteuid() != 0 {
		t.Fatal("needs root (CAP_NET_ADMIN); run as root or with -short")
	}
	for _, p := range []string{"/usr/lib/frr/bfdd", "/usr/lib/frr/zebra"} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("FRR not installed (%v): run hack/install-deps.sh", err)
		}
	}
	l := &frrLab{h: newNS(t, "h"), f: newNS(t, "f")}
	run(t, "ip", "-n", l.h, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", l.f)
	for ns, last := range map[string]string{l.h: "1", l.f: "2"} {
		run(t, "ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.eth0.accept_dad=0")
		// The link cut sets eth0 down: keep its IPv6 address for the
		// way back (the kernel flushes it by default).
		run(t, "ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.eth0.keep_addr_on_down=1")
		run(t, "ip", "-n", ns, "addr", "add", "198.51.100."+last+"/24", "dev", "eth0")
		run(t, "ip", "-n", ns, "addr", "add", "2001:db8::"+last+"/64", "dev", "eth0", "nodad")
		run(t, "ip", "-n", ns, "link", "set", "eth0", "up")
	}
	return l
}

// newNS makes a network namespace named after the test process and role,
// deleted when the test ends.
func newNS(t *testing.T, role string) string {
	t.Helper()
	ns := fmt.Sprintf("hbfd-%d-%d-%s", os.Getpid(), labSeq.Add(1), role)
	run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	return ns
}

// newRoutedFRRLab puts a router namespace between h and f: h
// 198.51.100.1/26 - r .62/26 | r .65/26 - f .66/26, so that packets
// between h and f arrive with their TTL decremented once.
func newRoutedFRRLab(t *testing.T) *frrLab {
	t.Helper()
	l := newFRRLab(t) // checks, and h - f on eth0 (unused beyond this)
	r := newNS(t, "r")
	run(t, "ip", "-n", l.h, "link", "del", "eth0")
	run(t, "ip", "-n", l.h, "link", "add", "eth1", "type", "veth", "peer", "name", "eth1", "netns", r)
	run(t, "ip", "-n", l.f, "link", "add", "eth1", "type", "veth", "peer", "name", "eth2", "netns", r)
	for _, a := range [][3]string{{l.h, "eth1", "198.51.100.1/26"}, {r, "eth1", "198.51.100.62/26"},
		{r, "eth2", "198.51.100.65/26"}, {l.f, "eth1", "198.51.100.66/26"}} {
		run(t, "ip", "-n", a[0], "addr", "add", a[2], "dev", a[1])
		run(t, "ip", "-n", a[0], "link", "set", a[1], "up")
	}
	run(t, "ip", "-n", l.h, "route", "add", "198.51.100.64/26", "via", "198.51.100.62")
	run(t, "ip", "-n", l.f, "route", "add", "198.51.100.0/26", "via", "198.51.100.65")
	run(t, "ip", "netns", "exec", r, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	return l
}

// newManager runs a Manager in namespace ns until the test ends; its
// changes arrive on the returned channel.
func newManager(t *testing.T, ns string) (*Manager, chan Change) {
	t.Helper()
	changes := make(chan Change, 64)
	w := io.Writer(io.Discard)
	if testing.Verbose() {
		w = testLogger{t}
	}
	m, err := New(slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})), prometheus.NewRegistry(),
		Options{NetNSPath: "/run/netns/" + ns, OnChange: func(c Change) { changes <- c }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return m, changes
}

// startFRR runs zebra and bfdd in namespace f (FRR instance f) with conf
// until the test ends, and waits until bfdd answers vtysh.
func (l *frrLab) startFRR(t *testing.T, conf string) {
	t.Helper()
	etc, vrun := filepath.Join("/etc/frr", l.f), filepath.Join("/var/run/frr", l.f)
	u, err := user.Lookup("frr")
	if err != nil {
		t.Fatalf("user frr: %v (is FRR installed?)", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, d := range []string{etc, vrun} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		if err := os.Chown(d, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"frr.conf":   "frr defaults traditional\nhostname " + l.f + "\nlog stdout debugging\n" + conf,
		"zebra.conf": "hostname " + l.f + "\n",
		"daemons":    "zebra=yes\nbfdd=yes\n",
		"vtysh.conf": "service integrated-vtysh-config\n",
	}
	for name, body := range files {
		p := filepath.Join(etc, name)
		if err := os.WriteFile(p, []byte(body), 0o640); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"zebra", "bfdd"} {
		c := "frr.conf"
		if d == "zebra" {
			c = "zebra.conf"
		}
		logf, err := os.Create(filepath.Join(t.TempDir(), d+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("ip", "netns", "exec", l.f, filepath.Join("/usr/lib/frr", d), "-N", l.f,
			"-f", filepath.Join(etc, c), "-i", filepath.Join(vrun, d+".pid"), "-P", "0", "-u", "frr", "-g", "frr")
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			logf.Close()
			if t.Failed() {
				b, _ := os.ReadFile(logf.Name())
				t.Logf("%s log:\n%s", d, b)
			}
		})
	}
	poll.Until(t, 15*time.Second, "bfdd answers vtysh", func() error {
		_, err := l.vtysh("show bfd peers json")
		return err
	})
}

func (l *frrLab) vtysh(cmds ...string) (string, error) {
	args := []string{"-N", l.f}
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	out, err := exec.Command("vtysh", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("vtysh %q: %w: %s", cmds, err, out)
	}
	return string(out), nil
}

// frrPeer is one session in bfdd's `show bfd peers json` (intervals in
// milliseconds).
type frrPeer struct {
	Peer       string `json:"peer"`
	Status     string `json:"status"` // "up", "down", "init", "shutdown"
	RemoteRx   int    `json:"remote-receive-interval"`
	RemoteTx   int    `json:"remote-transmit-interval"`
	RemoteMult int    `json:"remote-detect-multiplier"`
}

// frrPeer returns bfdd's view of its session to peer (zero if none).
func (l *frrLab) frrPeer(peer netip.Addr) (frrPeer, error) {
	out, err := l.vtysh("show bfd peers json")
	if err != nil {
		return frrPeer{}, err
	}
	var peers []frrPeer
	if err := json.Unmarshal([]byte(out), &peers); err != nil {
		return frrPeer{}, fmt.Errorf("parse %q: %w", out, err)
	}
	for _, p := range peers {
		if p.Peer == peer.String() {
			return p, nil
		}
	}
	return frrPeer{}, nil
}

// frrPeerStatus returns bfdd's status of its session to peer, or "".
func (l *frrLab) frrPeerStatus(t *testing.T, peer netip.Addr) (string, error) {
	p, err := l.frrPeer(peer)
	return p.Status, err
}

// nextChange waits for the next state change of the session.
func nextChange(t *testing.T, ch <-chan Change, what string) Change {
	t.Helper()
	select {
	case c := <-ch:
		t.Logf("%s: %s -> %s (diag %v, cause %s)", what, c.From, c.To, c.Diag, c.Cause)
		return c
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no state change within 20 s", what)
	}
	return Change{}
}

// waitState waits until a change to state want arrives, and returns it.
func waitState(t *testing.T, ch <-chan Change, want bfd.State, what string) Change {
	t.Helper()
	for {
		if c := nextChange(t, ch, what); c.To == want {
			return c
		}
	}
}

type testLogger struct{ t testing.TB }

func (w testLogger) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func TestFRRSession(t *testing.T) {
	for _, tt := range []struct {
		name        string
		herald, frr string
		multihop    bool
		passive     bool
	}{
		{"ipv4 single hop", "198.51.100.1", "198.51.100.2", false, false},
		{"ipv6 single hop", "2001:db8::1", "2001:db8::2", false, false},
		{"ipv4 multihop", "198.51.100.1", "198.51.100.2", true, false},
		{"ipv6 multihop", "2001:db8::1", "2001:db8::2", true, false},
		{"ipv4 single hop passive", "198.51.100.1", "198.51.100.2", false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := newFRRLab(t)
			herald, frr := netip.MustParseAddr(tt.herald), netip.MustParseAddr(tt.frr)
			hop := ""
			if tt.multihop {
				hop = " multihop"
			}
			peerCmd := fmt.Sprintf("peer %s%s local-address %s", herald, hop, frr)
			l.startFRR(t, fmt.Sprintf("bfd\n %s\n  receive-interval 100\n  transmit-interval 100\n  detect-multiplier 3\n !\n!\n", peerCmd))

			m, changes := newManager(t, l.h)
			s, err := m.Add(Key{Peer: frr, Local: herald, Multihop: tt.multihop},
				bfd.Params{ReceiveInterval: 100 * time.Millisecond, TransmitInterval: 100 * time.Millisecond, DetectMultiplier: 3,
					PassiveMode: tt.passive})
			if err != nil {
				t.Fatal(err)
			}
			if port := s.conn.LocalAddr().(*net.UDPAddr).Port; port < sourcePortMin || port > sourcePortMax {
				t.Errorf("source port %d outside 49152-65535 (RFC 5881 §4)", port)
			}
			if _, err := m.Add(Key{Peer: frr, Local: herald, Multihop: !tt.multihop}, bfd.Params{}); err == nil ||
				!strings.Contains(err.Error(), "a session to "+frr.String()+" exists") {
				t.Errorf("second session to the peer: %v", err)
			}

			// 1. Up with FRR, on both sides.
			waitState(t, changes, bfd.StateUp, "session with bfdd")
			poll.Until(t, 10*time.Second, "bfdd sees the session up", func() error {
				st, err := l.frrPeerStatus(t, herald)
				if err == nil && st != "up" {
					err = fmt.Errorf("bfdd status %q", st)
				}
				return err
			})
			labels := peerLabels(frr)
			// Stable: 20 more packets from bfdd at the agreed rate and no
			// state change, so what follows the cut is the cut's doing.
			base := testutil.ToFloat64(m.met.in.With(labels))
			poll.Until(t, 20*time.Second, "20 packets from bfdd", func() error {
				if n := testutil.ToFloat64(m.met.in.With(labels)) - base; n < 20 {
					return fmt.Errorf("%v packets", n)
				}
				return nil
			})
			if len(changes) != 0 {
				t.Fatalf("session not stable after Up: %+v", <-changes)
			}
			// bfdd received the profile's values (the Poll Sequence after
			// Up replaced the one-second floor, RFC 5880 §6.8.3).
			fp, err := l.frrPeer(herald)
			if err != nil {
				t.Fatal(err)
			}
			if fp.RemoteRx != 100 || fp.RemoteTx != 100 || fp.RemoteMult != 3 {
				t.Errorf("bfdd sees remote rx %d tx %d mult %d, want 100 ms, 100 ms, 3", fp.RemoteRx, fp.RemoteTx, fp.RemoteMult)
			}

			// A parameter change of the Up session reaches bfdd through a
			// Poll Sequence and keeps the session Up.
			if err := s.Update(bfd.Params{ReceiveInterval: 150 * time.Millisecond, TransmitInterval: 200 * time.Millisecond,
				DetectMultiplier: 4, PassiveMode: tt.passive}); err != nil {
				t.Fatal(err)
			}
			poll.Until(t, 10*time.Second, "bfdd learns the new intervals", func() error {
				fp, err := l.frrPeer(herald)
				if err == nil && (fp.RemoteRx != 150 || fp.RemoteTx != 200 || fp.RemoteMult != 4) {
					err = fmt.Errorf("bfdd sees %+v", fp)
				}
				return err
			})
			if len(changes) != 0 || s.State() != bfd.StateUp {
				t.Fatalf("parameter change disturbed the session: %v", s.State())
			}
			if got := testutil.ToFloat64(m.met.up.With(labels)); got != 1 {
				t.Errorf("metallb_bfd_session_up = %v, want 1", got)
			}

			// 2. Cut the link at FRR's end: Down by the detection timer.
			run(t, "ip", "-n", l.f, "link", "set", "eth0", "down")
			c := nextChange(t, changes, "link cut")
			if c.From != bfd.StateUp || c.To != bfd.StateDown || c.Cause != bfd.CauseDetectionTimer || c.Diag != bfd.DiagControlDetectionTimeExpired {
				t.Fatalf("after link cut: %+v, want Up -> Down by the detection timer (diag 1)", c)
			}
			if s.State() != bfd.StateDown {
				t.Fatalf("State() = %v", s.State())
			}

			// 3. Link back: Up again.
			run(t, "ip", "-n", l.f, "link", "set", "eth0", "up")
			waitState(t, changes, bfd.StateUp, "link back")

			// 4. FRR shuts its peer down: it signals AdminDown, Herald
			// goes Down with Diag Neighbor Signaled Session Down.
			if _, err := l.vtysh("configure terminal", "bfd", peerCmd, "shutdown"); err != nil {
				t.Fatal(err)
			}
			c = nextChange(t, changes, "frr peer shutdown")
			if c.To != bfd.StateDown || c.Cause != bfd.CauseReceived || c.Diag != bfd.DiagNeighborSignaledSessionDown {
				t.Fatalf("after FRR shutdown: %+v, want Down by a received AdminDown (diag 3)", c)
			}
			if _, err := l.vtysh("configure terminal", "bfd", peerCmd, "no shutdown"); err != nil {
				t.Fatal(err)
			}
			waitState(t, changes, bfd.StateUp, "frr peer no shutdown")

			if got := testutil.ToFloat64(m.met.downEvent.With(labels)); got != 2 {
				t.Errorf("metallb_bfd_session_down_events = %v, want 2", got)
			}
			if got := testutil.ToFloat64(m.met.upEvents.With(labels)); got != 3 {
				t.Errorf("metallb_bfd_session_up_events = %v, want 3", got)
			}
			for _, c := range []*prometheus.CounterVec{m.met.in, m.met.out} {
				if got := testutil.ToFloat64(c.With(labels)); got == 0 {
					t.Error("no control packets counted")
				}
			}

			// 5. Remove: AdminDown to FRR, which goes down at once.
			m.Remove(frr)
			poll.Until(t, 10*time.Second, "bfdd sees the session down", func() error {
				st, err := l.frrPeerStatus(t, herald)
				if err == nil && st != "down" {
					err = fmt.Errorf("bfdd status %q", st)
				}
				return err
			})
			if n := testutil.CollectAndCount(m.met.up); n != 0 {
				t.Errorf("%d session_up series left after Remove", n)
			}
		})
	}
}

// TestFRRRoutedTTL puts a router between Herald and bfdd: a single-hop
// session must not come up (FRR's packets arrive with TTL 254 and are
// dropped, RFC 5881 §5), a multihop one must (RFC 5883).
func TestFRRRoutedTTL(t *testing.T) {
	l := newRoutedFRRLab(t)
	herald, frr := netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.66")
	l.startFRR(t, fmt.Sprintf("bfd\n peer %s local-address %s\n !\n peer %s multihop local-address %s\n !\n!\n",
		herald, frr, herald, frr))
	m, changes := newManager(t, l.h)

	s, err := m.Add(Key{Peer: frr, Local: herald}, bfd.Params{})
	if err != nil {
		t.Fatal(err)
	}
	ttlDrops := m.met.dropped.WithLabelValues("ttl")
	poll.Until(t, 20*time.Second, "3 single-hop packets from bfdd dropped for their TTL", func() error {
		if n := testutil.ToFloat64(ttlDrops); n < 3 {
			return fmt.Errorf("%v dropped", n)
		}
		return nil
	})
	if len(changes) != 0 || s.State() != bfd.StateDown {
		t.Fatalf("single-hop session across a router left Down: %v", s.State())
	}
	if n := testutil.ToFloat64(m.met.in.With(peerLabels(frr))); n != 0 {
		t.Fatalf("%v packets accepted", n)
	}
	m.Remove(frr)

	if _, err := m.Add(Key{Peer: frr, Local: herald, Multihop: true}, bfd.Params{MinimumTTL: 254}); err != nil {
		t.Fatal(err)
	}
	waitState(t, changes, bfd.StateUp, "multihop session across a router")
}

// TestReceivedTTL checks that single-hop packets not sent with TTL 255 are
// dropped (RFC 5881 §5) while multihop accepts them down to MinimumTTL.
func TestReceivedTTL(t *testing.T) {
	m, err := New(slog.New(slog.NewTextHandler(io.Discard, nil)), nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	peer := netip.MustParseAddr("198.51.100.2")
	s := &Session{key: Key{Peer: peer}, in: make(chan bfd.ControlPacket, 4)}
	s.minTTL.Store(bfd.DefaultMinimumTTL)
	m.byPeer[peer] = s
	pkt, _ := (&bfd.ControlPacket{State: bfd.StateDown, DetectMult: 3, MyDiscriminator: 5}).MarshalBinary()
	for _, tt := range []struct {
		ttl      int
		multihop bool
		accepted bool
	}{
		{255, false, true}, {254, false, false}, {1, false, false},
		{255, true, true}, {254, true, true}, {253, true, false},
	} {
		s.key.Multihop = tt.multihop
		m.deliver(pkt, peer, netip.Addr{}, tt.ttl, tt.multihop)
		got := len(s.in) == 1
		if got != tt.accepted {
			t.Errorf("ttl %d multihop %v: accepted %v, want %v", tt.ttl, tt.multihop, got, tt.accepted)
		}
		for len(s.in) > 0 {
			<-s.in
		}
	}
}

// TestAddRefuses checks the errors Add returns before it opens a socket.
func TestAddRefuses(t *testing.T) {
	m, err := New(slog.New(slog.NewTextHandler(io.Discard, nil)), nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	v4, v6 := netip.MustParseAddr("198.51.100.2"), netip.MustParseAddr("2001:db8::2")
	for _, tt := range []struct {
		k    Key
		p    bfd.Params
		want string
	}{
		{Key{}, bfd.Params{}, "bfd session: no peer address"},
		{Key{Peer: v4, Multihop: true}, bfd.Params{}, "bfd session 198.51.100.2 (multihop): multihop needs a local address (RFC 5883 §3)"},
		{Key{Peer: v4, Local: v6}, bfd.Params{}, "bfd session 198.51.100.2 (single-hop from 2001:db8::2): local and peer address families differ"},
		{Key{Peer: netip.MustParseAddr("fe80::1%eth0")}, bfd.Params{}, "bfd session fe80::1%eth0 (single-hop): peer address with a zone is not supported"},
		{Key{Peer: v4}, bfd.Params{EchoMode: true}, "bfd session 198.51.100.2 (single-hop): " + bfd.ErrEchoNotSupported.Error()},
		{Key{Peer: v6}, bfd.Params{DetectMultiplier: 1}, "bfd session 2001:db8::2 (single-hop): detectMultiplier: 1 is outside 2..255"},
	} {
		_, err := m.Add(tt.k, tt.p)
		if err == nil || err.Error() != tt.want {
			t.Errorf("Add(%v, %+v) = %v, want %q", tt.k, tt.p, err, tt.want)
		}
	}
	if len(m.listeners) != 0 {
		t.Errorf("a refused Add opened %d listeners", len(m.listeners))
	}
}

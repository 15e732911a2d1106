package members

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/herald-lb/herald/internal/poll"
)

func TestPlanKeys(t *testing.T) {
	t.Parallel()
	const o, n, x = "old", "new", "other"
	holds := func(primary string, keys ...string) nodeMeta { return nodeMeta{Keys: keys, Primary: primary} }
	for _, tc := range []struct {
		name      string
		installed []string
		desired   string
		peers     map[string]nodeMeta
		want      keyStep
	}{
		{name: "steady", installed: []string{o}, desired: o,
			peers: map[string]nodeMeta{"b": holds(o, o)}},
		{name: "unencrypted", installed: nil, desired: ""},
		{name: "alone: use and remove at once", installed: []string{o, n}, desired: n,
			want: keyStep{Use: n, Remove: []string{o}}},
		{name: "a peer lacks the new key: keep encrypting with the old", installed: []string{o, n}, desired: n,
			peers: map[string]nodeMeta{"b": holds(o, o, n), "c": holds(o, o)},
			want:  keyStep{Waiting: []string{"c"}, Phase: "use"}},
		{name: "a peer without metadata (older Herald) holds it up", installed: []string{o, n}, desired: n,
			peers: map[string]nodeMeta{"b": {}},
			want:  keyStep{Waiting: []string{"b"}, Phase: "use"}},
		{name: "every peer holds it: use it, keep the old one for the others", installed: []string{o, n}, desired: n,
			peers: map[string]nodeMeta{"b": holds(o, o, n), "c": holds(n, n, o)},
			want:  keyStep{Use: n, Waiting: []string{"b"}, Phase: "remove"}},
		{name: "using it, one peer still encrypts with the old key", installed: []string{n, o}, desired: n,
			peers: map[string]nodeMeta{"b": holds(o, o, n), "c": holds(n, n, o)},
			want:  keyStep{Waiting: []string{"b"}, Phase: "remove"}},
		{name: "every peer uses it: remove the rest", installed: []string{n, o, x}, desired: n,
			peers: map[string]nodeMeta{"b": holds(n, n, o), "c": holds(n, n)},
			want:  keyStep{Remove: []string{o, x}}},
		{name: "a peer that already removed the old key", installed: []string{n}, desired: n,
			peers: map[string]nodeMeta{"b": holds(n, n, o)}},
		{name: "encrypting with a key a peer lacks: back to one every peer holds", installed: []string{n, o}, desired: n,
			peers: map[string]nodeMeta{"b": holds(o, o), "c": holds(o, o, n)},
			want:  keyStep{Use: o, Waiting: []string{"b"}, Phase: "fallback"}},
		{name: "a peer lacks the primary but no key is held by all: no fallback", installed: []string{n, o}, desired: n,
			peers: map[string]nodeMeta{"b": holds(o, o), "c": holds(n, n)},
			want:  keyStep{Waiting: []string{"b"}, Phase: "remove"}},
		{name: "a peer without metadata causes no fallback", installed: []string{n, o}, desired: n,
			peers: map[string]nodeMeta{"b": {}, "c": holds(o, o, n)},
			want:  keyStep{Waiting: []string{"b", "c"}, Phase: "remove"}},
		{name: "second rotation before the first completed", installed: []string{n, o, x}, desired: x,
			peers: map[string]nodeMeta{"b": holds(n, n, o)},
			want:  keyStep{Waiting: []string{"b"}, Phase: "use"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := planKeys(tc.installed, tc.desired, tc.peers)
			if got.Use != tc.want.Use || !slices.Equal(got.Remove, tc.want.Remove) ||
				!slices.Equal(got.Waiting, tc.want.Waiting) || got.Phase != tc.want.Phase {
				t.Errorf("planKeys(%v, %s, %v) = %+v, want %+v", tc.installed, tc.desired, tc.peers, got, tc.want)
			}
		})
	}
}

func TestNodeMeta(t *testing.T) {
	t.Parallel()
	l, err := New(testConfig("meta", []byte("x")), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range maxKeys + 3 {
		l.SetSecret(fmt.Appendf(nil, "secret-%d", i))
	}
	b := keyDelegate{l: l}.NodeMeta(512)
	if len(b) == 0 || len(b) > 512 {
		t.Fatalf("NodeMeta with a full keyring: %d bytes, want 1..512", len(b))
	}
	got := decodeMeta(b)
	if len(got.Keys) != maxKeys || got.Primary != SecretID([]byte("x")) {
		t.Errorf("full keyring advertises %d keys, primary %s; want %d, the first secret's", len(got.Keys), got.Primary, maxKeys)
	}
	if d := decodeMeta(nil); d.Primary != "" || d.Keys != nil {
		t.Errorf("no metadata decodes to %+v", d)
	}
	if d := decodeMeta([]byte("not json")); d.Primary != "" {
		t.Errorf("garbage decodes to %+v", d)
	}
}

// kubeletWrite updates dir as the kubelet's atomic writer updates a Secret
// volume: the file's content goes into a fresh directory, the "..data"
// symlink is swapped onto it by a rename, and "secretkey" is a symlink
// through "..data".
func kubeletWrite(t *testing.T, dir string, secret []byte) {
	t.Helper()
	ts, err := os.MkdirTemp(dir, "..time_")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ts, "secretkey"), secret, 0o444); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "secretkey")
	if _, err := os.Lstat(link); os.IsNotExist(err) {
		if err := os.Symlink(filepath.Join("..data", "secretkey"), link); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWatchFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	kubeletWrite(t, dir, []byte("one"))
	got := make(chan string, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		// A poll interval longer than the test: only notifications count.
		watchFile(ctx, filepath.Join(dir, "secretkey"), []byte("one"), time.Hour, slog.New(slog.DiscardHandler), func(b []byte) { got <- string(b) })
	}()
	defer func() { cancel(); <-done }()
	// The watch may start after a write; write until it is seen (the same
	// content again is a new event but no new value).
	for _, want := range []string{"two", "three"} {
		deadline := time.After(sanityLimit)
		kubeletWrite(t, dir, []byte(want))
		for seen := ""; seen != want; {
			select {
			case seen = <-got:
			case <-time.After(50 * time.Millisecond):
				kubeletWrite(t, dir, []byte(want))
			case <-deadline:
				t.Fatalf("watchFile did not report %q", want)
			}
		}
	}
	select {
	case s := <-got:
		t.Errorf("unexpected extra report %q", s)
	default:
	}
}

// TestKeyRotationNeverSplits rotates the memberlist secret of four running
// members one at a time, through their secret files as the kubelet updates
// mounted Secrets (one node after the other, at different moments), and
// checks on every observation that no member loses sight of another
// (no failed or left member, everyone live everywhere, every pair can
// exchange a ping and its ack); it ends with the new key alone on every
// member.
func TestKeyRotationNeverSplits(t *testing.T) {
	t.Parallel()
	oldSecret, newSecret := []byte("NvKGPsR2n7TlqVlGrA6ekw"), []byte("q3HjVfN0c0pH1mXw7Yc2Ag")
	oldID, newID := SecretID(oldSecret), SecretID(newSecret)
	const n = 4
	var nodes []*testNode
	var regs []*prometheus.Registry
	var dirs, names []string
	for i := range n {
		dir := t.TempDir()
		kubeletWrite(t, dir, oldSecret)
		cfg := testConfig(fmt.Sprintf("rot-%d", i), oldSecret)
		cfg.SecretFile = filepath.Join(dir, "secretkey")
		reg := prometheus.NewPedanticRegistry()
		cfg.Registerer = reg
		nodes = append(nodes, start(t, cfg))
		regs, dirs, names = append(regs, reg), append(dirs, dir), append(names, cfg.NodeName)
	}
	var addrs []netip.AddrPort
	for _, nd := range nodes {
		addrs = append(addrs, nd.Addr())
	}
	for _, nd := range nodes {
		nd.SetPeers(addrs)
	}
	for _, nd := range nodes {
		poll.Until(t, sanityLimit, nd.cfg.NodeName+" sees all", sees(nd.List, names...))
	}

	var observations atomic.Int64
	// intact fails the test unless every member sees every other one live
	// and none was ever seen failing or leaving.
	intact := func(stage string) {
		t.Helper()
		observations.Add(1)
		for i, nd := range nodes {
			if got := liveSet(nd.List); !slices.Equal(got, names) {
				t.Fatalf("%s: %s sees %v live, want %v: the cluster split", stage, names[i], got, names)
			}
			for _, ev := range []string{"failed", "leave"} {
				if c := testutil.ToFloat64(nd.metrics.events.WithLabelValues(ev)); c != 0 {
					t.Fatalf("%s: %s counted %v %q events: the cluster split", stage, names[i], c, ev)
				}
			}
		}
	}
	// observe waits for cond, checking intact on every observation.
	observe := func(stage string, cond func() bool) {
		t.Helper()
		poll.Until(t, sanityLimit, stage, func() bool {
			intact(stage)
			return cond()
		})
	}
	// pingAll: every member pings every other one directly (encrypted with
	// its primary key; the ack with the other's). A member that cannot
	// decrypt fails every attempt; a few attempts absorb scheduling delays.
	pingAll := func(stage string) {
		t.Helper()
		for i, a := range nodes {
			for j, b := range nodes {
				if i == j {
					continue
				}
				addr := net.UDPAddrFromAddrPort(b.Addr())
				var err error
				for range 5 {
					if _, err = a.ml.Ping(names[j], addr); err == nil {
						break
					}
				}
				if err != nil {
					t.Fatalf("%s: %s cannot ping %s: %v", stage, names[i], names[j], err)
				}
			}
		}
		intact(stage)
	}
	peerKeys := func(observer *testNode, of string) nodeMeta {
		observer.keys.mu.Lock()
		defer observer.keys.mu.Unlock()
		return observer.keys.peers[of]
	}
	installed := func(nd *testNode) []string { ids, _ := nd.keyStatus(); return ids }

	pingAll("before the rotation")
	for _, nd := range nodes {
		if got := installed(nd); !slices.Equal(got, []string{oldID}) {
			t.Fatalf("%s starts with keys %v, want [%s]", nd.cfg.NodeName, got, oldID)
		}
	}

	for i := range n {
		stage := fmt.Sprintf("secret file of %s updated (%d of %d)", names[i], i+1, n)
		kubeletWrite(t, dirs[i], newSecret)
		observe(stage+": every other member sees it hold the new key", func() bool {
			for j, o := range nodes {
				if j != i && !slices.Contains(peerKeys(o, names[i]).Keys, newID) {
					return false
				}
			}
			return true
		})
		pingAll(stage)
		if i == 0 {
			// Alone with the new key, it keeps encrypting with the old
			// one, and advertises both.
			if got := installed(nodes[0]); !slices.Equal(got, []string{oldID, newID}) {
				t.Errorf("%s: %s keys %v, want [%s %s] (old primary)", stage, names[0], got, oldID, newID)
			}
			if err := testutil.GatherAndCompare(regs[0], strings.NewReader(`
# HELP herald_memberlist_keys Gossip keys installed in this speaker's memberlist keyring: 1 normally, 2 or more while a key rotation is in progress, 0 when gossip is unencrypted.
# TYPE herald_memberlist_keys gauge
herald_memberlist_keys 2
`), "herald_memberlist_keys"); err != nil {
				t.Error(err)
			}
		}
	}

	observe("every member ends with only the new key, and every other member sees that", func() bool {
		for i, nd := range nodes {
			if !slices.Equal(installed(nd), []string{newID}) {
				return false
			}
			for j, o := range nodes {
				if m := peerKeys(o, names[i]); j != i && (m.Primary != newID || !slices.Equal(m.Keys, []string{newID})) {
					return false
				}
			}
		}
		return true
	})
	pingAll("after the rotation")
	for i := range n {
		if err := testutil.GatherAndCompare(regs[i], strings.NewReader(`
# HELP herald_memberlist_key_rotation_waiting_members Members whose advertisement holds up this speaker's key rotation (they lack the new key, or do not encrypt with it yet); 0 when no rotation is pending.
# TYPE herald_memberlist_key_rotation_waiting_members gauge
herald_memberlist_key_rotation_waiting_members 0
# HELP herald_memberlist_keys Gossip keys installed in this speaker's memberlist keyring: 1 normally, 2 or more while a key rotation is in progress, 0 when gossip is unencrypted.
# TYPE herald_memberlist_keys gauge
herald_memberlist_keys 1
`), "herald_memberlist_keys", "herald_memberlist_key_rotation_waiting_members"); err != nil {
			t.Errorf("%s: %v", names[i], err)
		}
	}
	t.Logf("%d observations, cluster intact in each", observations.Load())

	// A speaker restarted after the rotation (its pod mounts the new
	// secret) joins at once.
	late := start(t, testConfig("rot-late", newSecret))
	late.SetPeers(addrs[:1])
	poll.Until(t, sanityLimit, "restarted speaker with the new secret joins", sees(late.List, append(slices.Clone(names), "rot-late")...))
}

// The key ID is the documented SHA-256(SHA-256(secret)) prefix
// (docs/troubleshooting.md computes it with sha256sum).
func TestSecretID(t *testing.T) {
	t.Parallel()
	// printf %s NvKGPsR2n7TlqVlGrA6ekw | sha256sum | cut -d' ' -f1 | xxd -r -p | sha256sum | cut -c1-16
	if got := SecretID([]byte("NvKGPsR2n7TlqVlGrA6ekw")); got != "52abcb58a888c4a7" {
		t.Errorf("SecretID = %s, want 52abcb58a888c4a7", got)
	}
}

// TestRestartDuringKeyRotation starts a speaker with the Secret's new key
// and, as the controller keeps it there, the key it replaced
// (Config.PreviousSecret), while the others still encrypt with the previous
// key only (the kubelet has not updated their mounted files yet), or after
// they completed the rotation and removed it. In both cases it must join
// them, with every member seeing every other one, and the rotation end with
// the new key alone everywhere. Before the previous key was carried, the
// restarted speaker held only the new key: it could not join the first
// group at all and, after AloneAfter, elected as if alone (two answerers
// for one address; seen once in the chaos run that deleted the Secret).
func TestRestartDuringKeyRotation(t *testing.T) {
	t.Parallel()
	oldSecret, newSecret := []byte("V3ZQ2ItDmoVw3rEbCh9uTw"), []byte("kq9Y6lZ1JuvQ0SdlF0Jx8g")
	oldID, newID := SecretID(oldSecret), SecretID(newSecret)
	installed := func(nd *testNode) []string { ids, _ := nd.keyStatus(); return ids }
	onlyKey := func(id string, nodes ...*testNode) func() bool {
		return func() bool {
			for _, nd := range nodes {
				if !slices.Equal(installed(nd), []string{id}) {
					return false
				}
			}
			return true
		}
	}
	for _, tc := range []struct {
		name string
		// othersRotated: the running speakers completed the rotation to
		// the new key (and removed the previous one) before the restart.
		othersRotated bool
	}{
		{name: "others still on the previous key", othersRotated: false},
		{name: "others already rotated", othersRotated: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			prefix := map[bool]string{false: "mid", true: "done"}[tc.othersRotated]
			a := start(t, testConfig(prefix+"-a", oldSecret))
			b := start(t, testConfig(prefix+"-b", oldSecret))
			a.SetPeers([]netip.AddrPort{a.Addr(), b.Addr()})
			poll.Until(t, sanityLimit, "a and b form a cluster", sees(a.List, prefix+"-a", prefix+"-b"))
			if tc.othersRotated {
				a.SetSecret(newSecret)
				b.SetSecret(newSecret)
				poll.Until(t, sanityLimit, "a and b rotate to the new key", onlyKey(newID, a, b))
			}

			cfg := testConfig(prefix+"-c", newSecret)
			cfg.PreviousSecret = oldSecret
			// No rescue by the "alone" fallback (which, with nobody's
			// advertisement known, rotates at once) within the test.
			cfg.Timings.AloneAfter = time.Minute
			c := start(t, cfg)
			if got := installed(c); !slices.Equal(got, []string{oldID, newID}) {
				t.Errorf("restarted speaker starts with keys %v, want [%s %s] (previous primary)", got, oldID, newID)
			}
			c.SetPeers([]netip.AddrPort{a.Addr(), b.Addr(), c.Addr()})
			all := []string{prefix + "-a", prefix + "-b", prefix + "-c"}
			for _, nd := range []*testNode{a, b, c} {
				poll.Until(t, sanityLimit, nd.cfg.NodeName+" sees all three", sees(nd.List, all...))
			}
			if !tc.othersRotated {
				// The kubelet updates the others' files.
				a.SetSecret(newSecret)
				b.SetSecret(newSecret)
			}
			poll.Until(t, sanityLimit, "every member ends with only the new key", onlyKey(newID, a, b, c))
			for _, nd := range []*testNode{a, b, c} {
				if !sees(nd.List, all...)() {
					t.Errorf("%s sees %v after the rotation, want %v", nd.cfg.NodeName, liveSet(nd.List), all)
				}
			}
		})
	}
}

// TestJoinedWithNewKeyFallsBack: a speaker that started during a rotation
// (new key, previous key kept) and joined with the new key as primary
// through a member that holds both, while another member still holds only
// the previous key, must go back to encrypting with the previous key once it
// sees that member's advertisement: otherwise that member cannot read its
// gossip and probes, and the two views of who is live can diverge (one
// chaos run counted unanswered addresses after a join like this). Without
// the fallback the speaker kept encrypting with the new key.
func TestJoinedWithNewKeyFallsBack(t *testing.T) {
	t.Parallel()
	oldSecret, newSecret := []byte("Q0bm9mS4rV2yT1uX7wZ3cA"), []byte("H5jK8lN2pR4tV6xZ9bD1fG")
	oldID := SecretID(oldSecret)
	both := start(t, testConfig("fb-both", oldSecret))
	both.SetSecret(newSecret) // holds both, encrypts with the old key
	oldOnly := start(t, testConfig("fb-old", oldSecret))
	both.SetPeers([]netip.AddrPort{both.Addr(), oldOnly.Addr()})
	poll.Until(t, sanityLimit, "fb-both and fb-old form a cluster", sees(both.List, "fb-both", "fb-old"))

	cfg := testConfig("fb-restarted", newSecret)
	cfg.PreviousSecret = oldSecret
	cfg.Timings.AloneAfter = time.Minute
	c := start(t, cfg)
	// As after a failed join round: the new key is primary.
	if id := c.tryNextPrimary(); id != SecretID(newSecret) {
		t.Fatalf("tryNextPrimary = %s, want the new key %s", id, SecretID(newSecret))
	}
	c.SetPeers([]netip.AddrPort{both.Addr()}) // joins through the member holding both
	all := []string{"fb-both", "fb-old", "fb-restarted"}
	for _, nd := range []*testNode{both, oldOnly, c} {
		poll.Until(t, sanityLimit, nd.cfg.NodeName+" sees all three", sees(nd.List, all...))
	}
	// The key loop acts on fb-old's advertisement shortly after the join.
	poll.Until(t, sanityLimit, "restarted speaker back on the previous key", func() error {
		if ids, _ := c.keyStatus(); len(ids) == 0 || ids[0] != oldID {
			return fmt.Errorf("it encrypts with %v, want the previous key %s first", ids, oldID)
		}
		return nil
	})
	for _, nd := range []*testNode{both, oldOnly, c} {
		poll.Until(t, sanityLimit, nd.cfg.NodeName+" still sees all three", sees(nd.List, all...))
	}
}

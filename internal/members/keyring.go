package members

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
)

// Key rotation without a split.
//
// memberlist encrypts every message with its keyring's primary key and
// decrypts with any installed key. A speaker that learns a new secret
// ([List.SetSecret], or Config.SecretFile changing) rotates in three phases,
// each advertised to the others in its memberlist node metadata
// ([nodeMeta]: the IDs of the keys it holds and of its primary):
//
//  1. install: add the new key for decryption only; keep encrypting with
//     the old one.
//  2. use: make the new key primary once every member it knows (alive or
//     suspect) advertises that it holds the new key. Everything it now
//     sends can be read by all of them.
//  3. remove: drop every other key once every member it knows advertises
//     the new key as its primary, i.e. nobody encrypts with an old key any
//     more.
//
// A member without metadata (an older Herald) never advertises the new key,
// so the rotation waits for it rather than cut it off. Each phase is applied
// before it is advertised, so another member's view is never ahead of what
// a speaker actually does. The one sequence this cannot make safe is a
// secret going back to a key that a member removed moments ago (within one
// gossip round): a member may then switch to it on the strength of an old
// advertisement. New secrets (the controller re-creates the Secret with a
// fresh random value) never do that.
//
// Starting during a rotation. A speaker that (re)starts after the Secret
// got a new key, while the kubelet has not yet updated the other speakers'
// mounted files (up to a minute or two), would hold only the new key: it
// could neither read the others' gossip nor be read, never join them, and
// after AloneAfter elect as if alone — two speakers answering for one
// address. The controller therefore keeps the replaced key in the Secret
// (Config.PreviousSecret) for a while, and a starting speaker installs both
// keys with the previous one primary and the new one desired: the state of
// a speaker that had been running when the key changed, so the rotation
// above carries on with it. Until it has joined, it plans no rotation step
// (it knows no other member's advertisement yet, which is not the same as
// every member agreeing), and after each join round that did not succeed it
// makes the next installed key primary: the other speakers may still all
// encrypt with the previous key (mid-rotation, the first key tried), or
// have completed the rotation and removed it (then only the new key lets
// it in). Nobody reads its metadata before it has joined, so switching the
// primary then advertises nothing that is not true.
// A join with the new key can succeed through a member that already holds
// both while others hold only the previous one; once joined, planKeys sees
// their advertisements and goes back to a key every member holds
// ("fallback").
//
// When gossip started unencrypted (no secret), a secret learnt later is not
// applied (switching between plain and encrypted gossip needs a restart of
// every speaker); an empty secret never removes the keys in use.

// keyIDBytes is the length of a key ID before hex encoding.
const keyIDBytes = 8

// maxKeys bounds the keys installed at once so that the metadata stays far
// below memberlist.MetaMaxSize (512 bytes): each ID costs 19 bytes of JSON.
// It is reached only by a dozen rotations none of which completed.
const maxKeys = 12

// keyID returns the public identifier of a gossip key: the first 8 bytes of
// SHA-256(key), hex (16 characters). key is DeriveKey's output; the ID
// reveals nothing usable about it and names it in logs and metadata.
func keyID(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:keyIDBytes])
}

// SecretID returns the ID Herald logs for a memberlist secret (the raw
// `secretkey` bytes): the key ID of DeriveKey(secret), 16 hex characters.
// An operator can compare it with the "key" attribute of the speakers'
// rotation log lines.
func SecretID(secret []byte) string { return keyID(DeriveKey(secret)) }

// nodeMeta is a speaker's memberlist node metadata, JSON encoded, e.g.
// {"keys":["<id>"],"primary":"<id>","l2Releases":true}. Fields are only
// ever added: a member ignores fields it does not know (an older Herald
// reads the keys of a newer one). MetalLB's speakers set no metadata and
// never read any (their memberlist has no Delegate), so the metadata does
// not affect a group mixed with them.
type nodeMeta struct {
	// Keys are the IDs of the keys it can decrypt with.
	Keys []string `json:"keys,omitempty"`
	// Primary is the ID of the key it encrypts with.
	Primary string `json:"primary,omitempty"`
	// Releases: it sends layer 2 hand-over releases (Config.SendsReleases,
	// release.go). Absent (false) for MetalLB and Heralds before it.
	Releases bool `json:"l2Releases,omitempty"`
}

// decodeMeta parses another member's metadata; anything unparsable (a
// member that advertises no metadata) is the zero nodeMeta, which holds no
// key.
func decodeMeta(b []byte) nodeMeta {
	var m nodeMeta
	if len(b) == 0 || json.Unmarshal(b, &m) != nil {
		return nodeMeta{}
	}
	return m
}

// keyStep is the next action of the rotation: make Use primary (when not
// ""), then remove Remove. Waiting lists the members whose advertisement
// holds up the next phase, sorted; Phase names it ("use" or "remove", ""
// when nothing is pending; "fallback" when Use is an older key, see
// planKeys).
type keyStep struct {
	Use     string
	Remove  []string
	Waiting []string
	Phase   string
}

// planKeys decides the rotation step of a member that holds installed (key
// IDs, primary first; desired among them) and wants desired, given the
// metadata of every other member it knows (alive or suspect). It is pure.
func planKeys(installed []string, desired string, peers map[string]nodeMeta) keyStep {
	var st keyStep
	if len(installed) == 0 || desired == "" {
		return st
	}
	blocked := func(ok func(nodeMeta) bool) []string {
		var out []string
		for name, m := range peers {
			if !ok(m) {
				out = append(out, name)
			}
		}
		slices.Sort(out)
		return out
	}
	// Never encrypt with a key that a known member lacks while another
	// installed key is held by every member: a speaker that started during
	// a rotation may have joined with the new key (its join with the
	// previous one failed, see tryNextPrimary) through a member that holds
	// both, while others still hold only the previous key and could not
	// read it. Members without metadata hold no key as far as this is
	// concerned, so they never cause a fallback.
	if lacking := blocked(func(m nodeMeta) bool { return slices.Contains(m.Keys, installed[0]) }); len(lacking) > 0 {
		for _, id := range installed[1:] {
			if len(blocked(func(m nodeMeta) bool { return slices.Contains(m.Keys, id) })) == 0 {
				return keyStep{Use: id, Waiting: lacking, Phase: "fallback"}
			}
		}
	}
	if installed[0] != desired {
		st.Waiting = blocked(func(m nodeMeta) bool { return slices.Contains(m.Keys, desired) })
		if len(st.Waiting) > 0 {
			st.Phase = "use"
			return st
		}
		st.Use = desired
	}
	if len(installed) == 1 {
		return st
	}
	st.Waiting = blocked(func(m nodeMeta) bool { return m.Primary == desired })
	if len(st.Waiting) > 0 {
		st.Phase = "remove"
		return st
	}
	for _, id := range installed {
		if id != desired {
			st.Remove = append(st.Remove, id)
		}
	}
	return st
}

// keys is a List's keyring state.
type keys struct {
	mu sync.Mutex
	// ring is memberlist's keyring; nil when gossip is unencrypted.
	ring *memberlist.Keyring
	// desired is the key of the latest secret (deriveKey).
	desired []byte
	// derivation is Config.KeyDerivation (migration.go).
	derivation KeyDerivation
	// sendsReleases is Config.SendsReleases, advertised in the metadata.
	sendsReleases bool
	// peers is the metadata of every other member memberlist knows, from
	// the events delegate (copied there: memberlist's Node is not safe to
	// read later).
	peers map[string]nodeMeta
	// waiting is the last logged (phase, members) that hold up the
	// rotation, to log each change once.
	waiting string
	// blocked is len(Waiting) of the last plan (metric).
	blocked int
	// advertised is the metadata last handed to memberlist (NodeMeta).
	advertised nodeMeta
	wake       chan struct{} // capacity 1
	// candidates are the keys a speaker that has not joined yet tries as
	// primary in turn (previous first, then desired); nil with one key.
	candidates [][]byte
}

// init sets up the keyring from the secret and, when it is set and
// differs, the previous secret (see "Starting during a rotation").
func (k *keys) init(secret, previous []byte) {
	k.peers = map[string]nodeMeta{}
	k.wake = make(chan struct{}, 1)
	if len(secret) == 0 {
		return
	}
	k.desired = k.deriveKey(secret)
	// A 32-byte key is always valid.
	if len(previous) == 0 || bytes.Equal(k.deriveKey(previous), k.desired) {
		k.ring, _ = memberlist.NewKeyring(nil, k.desired)
		return
	}
	prev := k.deriveKey(previous)
	k.ring, _ = memberlist.NewKeyring([][]byte{k.desired}, prev)
	k.candidates = [][]byte{prev, k.desired}
}

// tryNextPrimary makes the next candidate key primary, for a speaker whose
// join round did not succeed and that has not joined yet. It reports the
// key ID now primary, or "" when there is no other key to try.
func (l *List) tryNextPrimary() string {
	k := &l.keys
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ring == nil || len(k.candidates) < 2 {
		return ""
	}
	primary := k.ring.GetPrimaryKey()
	cur := slices.IndexFunc(k.candidates, func(c []byte) bool { return bytes.Equal(c, primary) })
	for i := 1; i <= len(k.candidates); i++ {
		key := k.candidates[(cur+i+len(k.candidates))%len(k.candidates)]
		if k.keyByIDLocked(keyID(key)) != nil && !bytes.Equal(key, primary) {
			_ = k.ring.UseKey(key) // installed: cannot fail
			return keyID(key)
		}
	}
	return ""
}

func (k *keys) poke() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// installedLocked returns the key IDs in the keyring, primary first.
func (k *keys) installedLocked() []string {
	var ids []string
	for _, key := range k.ring.GetKeys() {
		ids = append(ids, keyID(key))
	}
	return ids
}

// keyByIDLocked returns the installed key with ID id, or nil.
func (k *keys) keyByIDLocked(id string) []byte {
	for _, key := range k.ring.GetKeys() {
		if keyID(key) == id {
			return key
		}
	}
	return nil
}

// SetSecret hands the List the current content of the memberlist Secret's
// `secretkey` (raw bytes, as mounted). A new value starts a rotation (see
// the package's keyring.go: install, use once every member holds it, remove
// the old key once every member uses the new one). It never blocks; the
// same value again, an empty value, or any value when gossip is unencrypted
// is ignored (the last two with a warning).
func (l *List) SetSecret(secret []byte) {
	k := &l.keys
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case k.ring == nil:
		if len(secret) > 0 {
			l.log.Warn("memberlist secret appeared, but gossip started unencrypted: restart the speakers to encrypt")
		}
		return
	case len(secret) == 0:
		l.log.Warn("memberlist secret is empty; keeping the current key", "key", keyID(k.desired))
		return
	}
	key := k.deriveKey(secret)
	if bytes.Equal(key, k.desired) {
		return
	}
	if len(k.ring.GetKeys()) >= maxKeys {
		// Drop the oldest key that is neither primary nor wanted.
		ring := k.ring.GetKeys()
		for _, old := range ring[1:] {
			if !bytes.Equal(old, k.desired) {
				l.log.Warn("memberlist keyring full; dropping the oldest unused key", "key", keyID(old))
				_ = k.ring.RemoveKey(old)
				break
			}
		}
	}
	if err := k.ring.AddKey(key); err != nil { // 32 bytes: cannot fail
		l.log.Error("memberlist key not installed", "error", err)
		return
	}
	k.desired = key
	k.waiting = ""
	l.log.Info("memberlist key rotation: new key installed for decryption; encrypting with it once every member holds it",
		"key", keyID(key), "primary", keyID(k.ring.GetPrimaryKey()))
	k.poke()
}

// keyStatus returns the installed key IDs (primary first) and the desired
// key ID; nil and "" when gossip is unencrypted.
func (l *List) keyStatus() (installed []string, desired string) {
	k := &l.keys
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ring == nil {
		return nil, ""
	}
	return k.installedLocked(), keyID(k.desired)
}

// configureKeys sets the encryption of c from the keyring and wraps c's
// delegates so that the keyring sees the other members' metadata.
func (l *List) configureKeys(c *memberlist.Config) {
	if l.keys.ring != nil {
		c.Keyring = l.keys.ring
		c.GossipVerifyIncoming = true
		c.GossipVerifyOutgoing = true
	}
	c.Events = keyEvents{c.Events, l}
	c.Delegate = keyDelegate{c.Delegate, l}
}

// keyLoop advances the rotation whenever the secret or another member's
// metadata changes, and re-reads Config.SecretFile when it is set, until ctx
// ends.
func (l *List) keyLoop(ctx context.Context, ml *memberlist.Memberlist) {
	var wg sync.WaitGroup
	defer wg.Wait()
	if l.cfg.SecretFile != "" && l.keys.ring != nil {
		wg.Go(func() { watchFile(ctx, l.cfg.SecretFile, l.cfg.Secret, secretFilePoll, l.log, l.SetSecret) })
	}
	if installed, desired := l.keyStatus(); desired != "" {
		// key: the Secret's current key; primary: the one it encrypts with
		// (the previous key when it started during a rotation).
		l.log.Info("memberlist gossip encrypted", "key", desired, "primary", installed[0], "installed", installed)
	}
	for {
		if l.stepKeys() {
			// Advertise the new state; the timeout only bounds the wait
			// for the broadcast, the update stays queued.
			if err := ml.UpdateNode(l.cfg.Timings.TCPTimeout); err != nil {
				l.log.Debug("memberlist metadata update not yet broadcast", "error", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-l.keys.wake:
		}
	}
}

// secretFilePoll is how often Config.SecretFile is re-read besides file
// system notifications.
const secretFilePoll = 10 * time.Second

// stepKeys applies the next rotation step and reports whether the
// metadata differs from what was last advertised. It does not call
// memberlist.
func (l *List) stepKeys() bool {
	joined := l.Joined()
	k := &l.keys
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ring == nil {
		return false
	}
	before := k.installedLocked()
	desired := keyID(k.desired)
	var st keyStep
	if joined {
		// Before joining, no other member's advertisement is known: that
		// is not every member agreeing (see "Starting during a rotation").
		st = planKeys(before, desired, k.peers)
	}
	switch {
	case st.Use != "" && st.Phase == "fallback":
		_ = k.ring.UseKey(k.keyByIDLocked(st.Use)) // installed: cannot fail
		l.log.Info("memberlist key rotation: members lack the key this speaker encrypts with; encrypting with a key every member holds",
			"key", st.Use, "members", st.Waiting)
	case st.Use != "":
		_ = k.ring.UseKey(k.desired) // installed: cannot fail
		l.log.Info("memberlist key rotation: every member holds the new key; encrypting with it", "key", st.Use)
	}
	// Remove from the end of the ring: memberlist's RemoveKey shifts the
	// slice it hands to concurrent decryptions in place, except at the end.
	for _, id := range slices.Backward(st.Remove) {
		_ = k.ring.RemoveKey(k.keyByIDLocked(id))
	}
	if len(st.Remove) > 0 {
		l.log.Info("memberlist key rotation complete: every member encrypts with the new key; old keys removed", "key", desired, "removed", st.Remove)
	}
	k.blocked = len(st.Waiting)
	if w := st.Phase + ":" + strings.Join(st.Waiting, ","); len(st.Waiting) > 0 && w != k.waiting && st.Phase != "fallback" {
		k.waiting = w
		what := map[string]string{"use": "to install the new key", "remove": "to encrypt with the new key"}[st.Phase]
		l.log.Info("memberlist key rotation waiting for members "+what, "key", desired, "members", st.Waiting)
	}
	m := k.metaLocked()
	return m.Primary != k.advertised.Primary || !slices.Equal(m.Keys, k.advertised.Keys) || m.Releases != k.advertised.Releases
}

// metaLocked is this member's metadata.
func (k *keys) metaLocked() nodeMeta {
	m := nodeMeta{Releases: k.sendsReleases}
	if k.ring == nil {
		return m
	}
	m.Keys = k.installedLocked()
	m.Primary = m.Keys[0]
	return m
}

// notePeer records another member's metadata (gone: it left or failed) and
// wakes the key loop when that changed.
func (l *List) notePeer(name string, meta []byte, gone bool) {
	if name == l.cfg.NodeName {
		return
	}
	k := &l.keys
	k.mu.Lock()
	old, known := k.peers[name]
	var m nodeMeta
	if gone {
		delete(k.peers, name)
	} else {
		m = decodeMeta(meta)
		k.peers[name] = m
	}
	k.mu.Unlock()
	joinedOrLeft := gone == known
	if joinedOrLeft || !slices.Equal(old.Keys, m.Keys) || old.Primary != m.Primary || old.Releases != m.Releases {
		k.poke()
	}
}

// keyEvents passes memberlist's membership events on and records each
// member's metadata. Like the events it wraps, it runs under memberlist's
// node lock and only copies and signals.
type keyEvents struct {
	memberlist.EventDelegate
	l *List
}

func (e keyEvents) NotifyJoin(n *memberlist.Node) {
	e.l.notePeer(n.Name, n.Meta, false)
	e.EventDelegate.NotifyJoin(n)
}

func (e keyEvents) NotifyUpdate(n *memberlist.Node) {
	e.l.notePeer(n.Name, n.Meta, false)
	e.EventDelegate.NotifyUpdate(n)
}

func (e keyEvents) NotifyLeave(n *memberlist.Node) {
	e.l.notePeer(n.Name, nil, true)
	e.EventDelegate.NotifyLeave(n)
}

// keyDelegate advertises the keyring and Config.SendsReleases in the node
// metadata.
type keyDelegate struct {
	memberlist.Delegate
	l *List
}

// NodeMeta implements memberlist.Delegate. It returns nothing when the
// metadata would not fit limit (it always fits: see maxKeys).
func (d keyDelegate) NodeMeta(limit int) []byte {
	k := &d.l.keys
	k.mu.Lock()
	m := k.metaLocked()
	k.advertised = m
	k.mu.Unlock()
	if m.Primary == "" && !m.Releases {
		return nil
	}
	b, err := json.Marshal(m)
	if err != nil || len(b) > limit {
		return nil
	}
	return b
}

// keyMetrics are the rotation's gauges.
func keyMetrics(l *List) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "herald_memberlist_keys",
			Help: "Gossip keys installed in this speaker's memberlist keyring: 1 normally, 2 or more while a key rotation is in progress, 0 when gossip is unencrypted.",
		}, func() float64 {
			installed, _ := l.keyStatus()
			return float64(len(installed))
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "herald_memberlist_key_rotation_waiting_members",
			Help: "Members whose advertisement holds up this speaker's key rotation (they lack the new key, or do not encrypt with it yet); 0 when no rotation is pending.",
		}, func() float64 {
			l.keys.mu.Lock()
			defer l.keys.mu.Unlock()
			return float64(l.keys.blocked)
		}),
	}
}

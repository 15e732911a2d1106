package members

import (
	"bytes"
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"

	"github.com/herald-lb/herald/internal/poll"
)

func TestDeriveMetalLBKey(t *testing.T) {
	t.Parallel()
	empty := sha256.Sum256(nil)
	for _, secret := range [][]byte{
		nil,
		[]byte("short"),
		[]byte("Zm9vYmFyYmF6cXV4cXV1eA"), // 22 characters, as generated secrets are
		bytes.Repeat([]byte{7}, 32),
		bytes.Repeat([]byte{9}, 128),
	} {
		// MetalLB's key: the first 32 bytes of secret || SHA-256("").
		want := append(bytes.Clone(secret), empty[:]...)[:32]
		if got := DeriveMetalLBKey(secret); !bytes.Equal(got, want) {
			t.Errorf("DeriveMetalLBKey(%q) = %x, want %x", secret, got, want)
		}
		if got := KeyDerivationMetalLB.key(secret); !bytes.Equal(got, want) {
			t.Errorf("KeyDerivationMetalLB.key(%q) = %x, want %x", secret, got, want)
		}
		if d := DeriveKey(secret); len(secret) > 0 && bytes.Equal(d, want) {
			t.Errorf("DeriveKey(%q) equals MetalLB's key; the default must not be MetalLB's", secret)
		}
	}
	// The caller's array beyond len is not written (hash.Hash.Sum appends).
	buf := make([]byte, 5, 64)
	copy(buf, "abcde")
	DeriveMetalLBKey(buf)
	if !bytes.Equal(buf[:64], append([]byte("abcde"), make([]byte, 59)...)) {
		t.Errorf("DeriveMetalLBKey wrote past the secret's length: %x", buf[:64])
	}
	if err := (Config{KeyDerivation: "sha1"}).KeyDerivation.validate(); err == nil || !strings.Contains(err.Error(), `"sha1"`) {
		t.Errorf("unknown derivation: err = %v", err)
	}
}

// metallbSpeaker starts a memberlist configured as MetalLB's speaker
// configures its own (internal/speakerlist.New: memberlist's LAN defaults,
// the node name, and SecretKey = sha256.New().Sum(secret)[:32], written here
// as MetalLB writes it), on 127.0.0.1.
func metallbSpeaker(t *testing.T, name string, secret string) *memberlist.Memberlist {
	t.Helper()
	c := memberlist.DefaultLANConfig()
	c.Name = name
	c.BindAddr, c.AdvertiseAddr = "127.0.0.1", "127.0.0.1"
	c.BindPort, c.AdvertisePort = 0, 0
	c.LogOutput = &strings.Builder{}
	sha := sha256.New()
	c.SecretKey = sha.Sum([]byte(secret))[:32]
	ml, err := memberlist.Create(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ml.Shutdown() })
	return ml
}

// With KeyDerivationMetalLB a Herald speaker and a MetalLB speaker that
// share the memberlist secret form one group: each counts the other's node
// as a member (so both elect among the same nodes). With Herald's default
// derivation the MetalLB speaker cannot join (the push/pull does not
// decrypt).
func TestMetalLBKeyDerivationJoinsMetalLB(t *testing.T) {
	t.Parallel()
	const secret = "Zm9vYmFyYmF6cXV4cXV1eA"
	cfg := testConfig("herald-node", []byte(secret))
	cfg.KeyDerivation = KeyDerivationMetalLB
	h := start(t, cfg)
	m := metallbSpeaker(t, "metallb-node", secret)
	if n, err := m.Join([]string{h.Addr().String()}); err != nil || n != 1 {
		t.Fatalf("MetalLB speaker joins the Herald speaker in migration mode: %d, %v", n, err)
	}
	poll.Until(t, sanityLimit, "Herald counts the MetalLB node", sees(h.List, "herald-node", "metallb-node"))
	poll.Until(t, sanityLimit, "MetalLB counts the Herald node", func() bool { return m.NumMembers() == 2 })

	plain := start(t, testConfig("herald-default", []byte(secret)))
	m2 := metallbSpeaker(t, "metallb-node-2", secret)
	if n, err := m2.Join([]string{plain.Addr().String()}); err == nil || n != 0 {
		t.Errorf("MetalLB speaker joined a Herald speaker with Herald's key derivation: %d, %v", n, err)
	}
}

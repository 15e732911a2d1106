package members

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"slices"
)

// KeyDerivation selects how a memberlist secret (the Secret's `secretkey`
// bytes) becomes the 32-byte AES-256 gossip key.
type KeyDerivation string

const (
	// KeyDerivationHerald is the default: [DeriveKey], SHA-256 of the
	// secret.
	KeyDerivationHerald KeyDerivation = "herald"
	// KeyDerivationMetalLB is MetalLB's derivation, [DeriveMetalLBKey], for
	// the migration window only: with it (and MetalLB's memberlist Secret)
	// Herald's speakers and MetalLB's speakers decrypt each other's gossip
	// and form one memberlist group while a DaemonSet is swapped node by
	// node, so each side counts the other's nodes as alive for the layer 2
	// election. It keeps MetalLB's weak key (mostly public: see
	// [DeriveMetalLBKey]); switch back to KeyDerivationHerald once no
	// MetalLB speaker is left (docs/migrating-from-metallb.md, "Node by
	// node").
	KeyDerivationMetalLB KeyDerivation = "metallb"
)

// DeriveMetalLBKey returns the gossip key MetalLB's speaker derives from a
// memberlist secret (internal/speakerlist: sha256.New().Sum(secret)[:32]):
// hash.Hash.Sum appends the digest of the empty input to its argument, so
// the key is the first 32 bytes of secret || SHA-256(""): the secret itself
// when it has 32 bytes or more, else the secret followed by a public
// constant (metallb/metallb#3102). secret is not modified.
func DeriveMetalLBKey(secret []byte) []byte {
	return sha256.New().Sum(slices.Clip(bytes.Clone(secret)))[:32]
}

// key derives the gossip key for secret; the zero value is
// KeyDerivationHerald.
func (d KeyDerivation) key(secret []byte) []byte {
	if d == KeyDerivationMetalLB {
		return DeriveMetalLBKey(secret)
	}
	return DeriveKey(secret)
}

// validate reports an unknown derivation.
func (d KeyDerivation) validate() error {
	switch d {
	case "", KeyDerivationHerald, KeyDerivationMetalLB:
		return nil
	}
	return fmt.Errorf("KeyDerivation %q: want %q or %q", d, KeyDerivationHerald, KeyDerivationMetalLB)
}

// deriveKey is the keyring's derivation (Config.KeyDerivation).
func (k *keys) deriveKey(secret []byte) []byte { return k.derivation.key(secret) }

package members

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestDeriveKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		secret string
		want   string // sha256sum of the bytes, computed outside Go
	}{
		// A secret as the controller writes it: 22 chars of unpadded base64.
		{"NvKGPsR2n7TlqVlGrA6ekw", "1197da2879341238e7e4d0cbdcb0fc5873bc18968cc01cf7f5fe22805bd8e49e"},
		{"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
	} {
		got := DeriveKey([]byte(tc.secret))
		if hex.EncodeToString(got) != tc.want {
			t.Errorf("DeriveKey(%q) = %x, want %s", tc.secret, got, tc.want)
		}
		if len(got) != 32 {
			t.Errorf("DeriveKey(%q) has %d bytes, want 32 (AES-256)", tc.secret, len(got))
		}
	}
	// MetalLB's key for the same secret is the secret followed by a prefix
	// of SHA-256(""); ours must not be.
	secret := []byte("NvKGPsR2n7TlqVlGrA6ekw")
	metallb := sha256.New().Sum(bytes.Clone(secret))[:32]
	if !bytes.HasPrefix(metallb, secret) {
		t.Fatalf("test premise: MetalLB key %x does not start with the secret", metallb)
	}
	if bytes.Equal(DeriveKey(secret), metallb) {
		t.Error("DeriveKey reproduces MetalLB's defective derivation")
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	good := Config{NodeName: "n1", BindAddr: netip.MustParseAddr("198.51.100.1"), BindPort: DefaultBindPort, Timings: DefaultTimings()}
	for _, tc := range []struct {
		name    string
		mutate  func(*Config)
		wantErr string // substring; "" = valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"WAN timings", func(c *Config) { c.Timings = WANTimings() }, ""},
		{"IPv6", func(c *Config) { c.BindAddr = netip.MustParseAddr("2001:db8::1") }, ""},
		{"free port", func(c *Config) { c.BindPort = 0 }, ""},
		{"no node name", func(c *Config) { c.NodeName = "" }, "NodeName"},
		{"no bind address", func(c *Config) { c.BindAddr = netip.Addr{} }, "BindAddr"},
		{"unspecified bind address", func(c *Config) { c.BindAddr = netip.IPv4Unspecified() }, "BindAddr"},
		{"port too big", func(c *Config) { c.BindPort = 65536 }, "BindPort"},
		{"probe timeout not below interval", func(c *Config) { c.Timings.ProbeTimeout = c.Timings.ProbeInterval }, "ProbeTimeout"},
		{"zero gossip interval", func(c *Config) { c.Timings.GossipInterval = 0 }, "GossipInterval"},
		{"zero timings", func(c *Config) { c.Timings = Timings{} }, "SuspicionMult"},
		{"negative indirect checks", func(c *Config) { c.Timings.IndirectChecks = -1 }, "IndirectChecks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.mutate(&c)
			_, err := New(c, nil)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("New error = %v, want ErrInvalidConfig mentioning %q", err, tc.wantErr)
			}
		})
	}
}

func TestTimingFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want func() Timings
	}{
		{"defaults", nil, DefaultTimings},
		{"override", []string{"--ml-probe-interval=300ms", "--ml-suspicion-mult=4"}, func() Timings {
			t := DefaultTimings()
			t.ProbeInterval, t.SuspicionMult = 300*time.Millisecond, 4
			return t
		}},
		{"wan", []string{"--ml-wan-config"}, WANTimings},
		{"wan with override", []string{"--ml-wan-config", "--ml-gossip-nodes=2", "--ml-leave-timeout=3s"}, func() Timings {
			t := WANTimings()
			t.GossipNodes, t.LeaveTimeout = 2, 3*time.Second
			return t
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("speaker", flag.ContinueOnError)
			f := AddTimingFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if got, want := f.Timings(), tc.want(); got != want {
				t.Errorf("Timings() = %+v\nwant %+v", got, want)
			}
		})
	}
}

package bgp

import (
	"context"
	"errors"
	"net/netip"
	"testing"
)

func TestFake(t *testing.T) {
	var f Fake
	ctx := context.Background()
	a := PeerConfig{Name: "a", Address: netip.MustParseAddr("198.51.100.1"), MyASN: 1, PeerASN: 2}
	if err := f.SetPeers(ctx, []PeerConfig{a, a}); !errors.Is(err, ErrDuplicatePeer) {
		t.Fatalf("duplicate peers: %v", err)
	}
	if err := f.SetPeers(ctx, []PeerConfig{a}); err != nil {
		t.Fatal(err)
	}
	err := f.SetPaths(ctx, []Path{
		{Prefix: pfx("203.0.113.1/32"), Peers: []string{"b"}},
		{Prefix: pfx("203.0.113.1/32"), Peers: []string{"c"}},
		{Prefix: pfx("203.0.113.2/32")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(f.Paths()); got != 2 {
		t.Fatalf("merged paths = %d", got)
	}
	if st := f.PeerStates(); len(st) != 1 || st[0].Advertised != 1 {
		t.Fatalf("states %+v", st)
	}
	boom := errors.New("boom")
	f.Err = boom
	if err := f.SetPaths(ctx, nil); !errors.Is(err, boom) || len(f.Paths()) != 2 {
		t.Fatalf("injected error: %v, paths %d", err, len(f.Paths()))
	}
	f.Close()
	if err := f.SetPaths(ctx, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
}

package gobgp

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	apb "google.golang.org/protobuf/types/known/anypb"

	"github.com/herald-lb/herald/internal/bgp"
)

// fullTablePrefixes is how many IPv6 /64s (in 2001:db8::/32) the router of
// TestPrefixLimit sends: a fifth of a full Internet table.
const fullTablePrefixes = 200_000

// loadRouterTable adds n IPv6 /64s 2001:db8:X:Y::/64 to the router's global
// RIB, which it sends to every neighbor.
func loadRouterTable(t testing.TB, r *router, n int) {
	t.Helper()
	origin, _ := apb.New(&api.OriginAttribute{Origin: 0})
	for j := range n {
		nlri, _ := apb.New(&api.IPAddressPrefix{Prefix: fmt.Sprintf("2001:db8:%x:%x::", j>>16, j&0xffff), PrefixLen: 64})
		mp, _ := apb.New(&api.MpReachNLRIAttribute{Family: familyV6, NextHops: []string{"2001:db8::1"}, Nlris: []*apb.Any{nlri}})
		p := &api.Path{Family: familyV6, Nlri: nlri, Pattrs: []*apb.Any{origin, mp}}
		if _, err := r.srv.AddPath(context.Background(), &api.AddPathRequest{TableType: api.TableType_GLOBAL, Path: p}); err != nil {
			t.Fatalf("router AddPath: %v", err)
		}
	}
}

// heapInUse returns the process's live heap after a full GC, in bytes.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestPrefixLimit has a second gobgp (the router, over loopback) send
// fullTablePrefixes IPv6 paths to the speaker, with and without the
// received-prefix limit. With the limit (bgp.DefaultMaxReceivedPrefixes)
// the speaker must close the session at the limit (Cease, RFC 4486
// subcode 1, which the router records as a received NOTIFICATION), report
// it once in PeerState.PrefixLimitFamily/PrefixLimit, and stay small: its
// heap grows by a fraction of what the same table costs without a limit.
// The heap figures are logged (go test -v) for docs/bgp.md.
func TestPrefixLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 200k prefixes")
	}
	r := newRouter(t, routerASN, "198.51.100.254", "127.0.0.1")
	r.addPeer(t, "127.0.0.1", ourASN)
	loadRouterTable(t, r, fullTablePrefixes)
	base := heapInUse()

	run := func(t *testing.T, limit uint32) (grown uint64, states []bgp.PeerState) {
		ch := make(chan bgp.PeerState, 256)
		s := newSpeaker(t, Options{MaxReceivedPrefixes: limit, OnPeerState: func(st bgp.PeerState) {
			select {
			case ch <- st:
			default:
			}
		}})
		pc := r.peerConfig("rtr", ourASN)
		pc.DualStack = true // IPv6 unicast over the IPv4 session (RFC 4760)
		if err := s.SetPeers(context.Background(), []bgp.PeerConfig{pc}); err != nil {
			t.Fatal(err)
		}
		deadline := time.After(2 * time.Minute)
		if limit > 0 {
			for {
				select {
				case st := <-ch:
					states = append(states, st)
					if st.PrefixLimitFamily != "" {
						grown = heapInUse() - base
						s.Close()
						return grown, states
					}
				case <-deadline:
					t.Fatalf("no prefix-limit report; states %+v", states)
				}
			}
		}
		eventually(t, 2*time.Minute, "all prefixes received", func() bool {
			var n uint64
			_ = s.srv.ListPeer(context.Background(), &api.ListPeerRequest{}, func(p *api.Peer) {
				for _, a := range p.GetAfiSafis() {
					n += a.GetState().GetReceived()
				}
			})
			return n >= fullTablePrefixes
		})
		grown = heapInUse() - base
		s.Close()
		return grown, nil
	}

	var unlimited uint64
	t.Run("NoLimit", func(t *testing.T) {
		unlimited, _ = run(t, 0)
		t.Logf("speaker heap with %d received prefixes, no limit: +%.1f MiB", fullTablePrefixes, float64(unlimited)/(1<<20))
	})
	t.Run("DefaultLimit", func(t *testing.T) {
		before := r.peerInfo(t, "127.0.0.1").GetState().GetMessages().GetReceived().GetNotification()
		grown, states := run(t, bgp.DefaultMaxReceivedPrefixes)
		t.Logf("speaker heap at the limit of %d (router sending %d): +%.1f MiB", bgp.DefaultMaxReceivedPrefixes, fullTablePrefixes, float64(grown)/(1<<20))
		last := states[len(states)-1]
		if last.PrefixLimitFamily != "ipv6-unicast" || last.PrefixLimit != bgp.DefaultMaxReceivedPrefixes || last.State == bgp.StateEstablished {
			t.Errorf("prefix-limit report %+v, want ipv6-unicast, limit %d, not Established", last, bgp.DefaultMaxReceivedPrefixes)
		}
		eventually(t, 10*time.Second, "the router to record our NOTIFICATION", func() bool {
			return r.peerInfo(t, "127.0.0.1").GetState().GetMessages().GetReceived().GetNotification() > before
		})
		if unlimited > 0 && grown > unlimited/4 {
			t.Errorf("heap grew by %d bytes at the limit, %d without it: not bounded", grown, unlimited)
		}
	})
}

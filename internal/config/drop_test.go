package config

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/herald-lb/herald/api/v1beta2"
)

// TestDropTransient: with Options.DropTransient a transient reference costs
// only the object that makes it; anything else still fails the build.
func TestDropTransient(t *testing.T) {
	t.Parallel()
	withPeer := func(r *Resources) {
		p := peer("peer-b", 64500, 64502, "198.51.100.253")
		p.Spec.PasswordSecret = &corev1.SecretReference{Name: "missing"}
		r.Peers = append(r.Peers, p)
	}
	for _, tc := range []struct {
		name        string
		opts        Options
		mutate      func(*Resources)
		wantErr     string // substring; "" = a snapshot
		wantPeers   []string
		wantBGPAds  []string
		wantDropped []string
	}{
		{name: "nothing to drop", opts: Options{Namespace: ns, DropTransient: true}, mutate: func(*Resources) {},
			wantPeers: []string{"peer-a"}, wantBGPAds: []string{"bgp-b"}},
		{name: "peer with missing Secret is left out", opts: Options{Namespace: ns, DropTransient: true}, mutate: withPeer,
			wantPeers: []string{"peer-a"}, wantBGPAds: []string{"bgp-b"},
			wantDropped: []string{`BGPPeer herald-system/peer-b: spec.passwordSecret "herald-system/missing": Secret not found`}},
		{name: "same, per node", opts: Options{Namespace: ns, DropTransient: true, NodeName: "node-1"}, mutate: withPeer,
			wantPeers: []string{"peer-a"}, wantBGPAds: []string{"bgp-b"},
			wantDropped: []string{`BGPPeer herald-system/peer-b: spec.passwordSecret "herald-system/missing": Secret not found`}},
		{name: "without the option the build fails", opts: Options{Namespace: ns}, mutate: withPeer,
			wantErr: "Secret not found"},
		{name: "advertisement with an undefined alias is left out", opts: Options{Namespace: ns, DropTransient: true},
			mutate: func(r *Resources) {
				ad := bgpad("bgp-c", "pool-a")
				ad.Spec.Communities = []string{"undefined-alias"}
				r.BGPAdvertisements = append(r.BGPAdvertisements, ad)
			},
			wantPeers: []string{"peer-a"}, wantBGPAds: []string{"bgp-b"},
			wantDropped: []string{`BGPAdvertisement herald-system/bgp-c: spec.communities[0] "undefined-alias"`}},
		{name: "a validation error still fails", opts: Options{Namespace: ns, DropTransient: true},
			mutate: func(r *Resources) {
				withPeer(r)
				r.Pools = append(r.Pools, pool("pool-bad", "not-a-cidr"))
			}, wantErr: "pool-bad"},
		{name: "the speaker's own Node missing still fails", opts: Options{Namespace: ns, DropTransient: true, NodeName: "node-9"},
			mutate: withPeer, wantErr: "the speaker's own Node was not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := base()
			tc.mutate(&r)
			snap, err := Build(r, tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Build error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			var peers, ads, dropped []string
			for _, p := range snap.PeersForNode(labels.Set{"zone": "a", "kubernetes.io/hostname": "node-1"}) {
				peers = append(peers, p.Name)
			}
			for _, a := range snap.BGPAdvertisements() {
				ads = append(ads, a.Name)
			}
			for _, e := range snap.Dropped() {
				dropped = append(dropped, e.Error())
			}
			if !slices.Equal(peers, tc.wantPeers) || !slices.Equal(ads, tc.wantBGPAds) {
				t.Errorf("peers %v, BGP advertisements %v; want %v, %v", peers, ads, tc.wantPeers, tc.wantBGPAds)
			}
			if len(dropped) != len(tc.wantDropped) {
				t.Fatalf("Dropped %q, want %q", dropped, tc.wantDropped)
			}
			for i := range dropped {
				if !strings.HasPrefix(dropped[i], tc.wantDropped[i]) {
					t.Errorf("Dropped[%d] = %q, want prefix %q", i, dropped[i], tc.wantDropped[i])
				}
			}
			if d := snap.DroppedError(); (d != nil) != (len(dropped) > 0) || (d != nil && !IsTransient(d)) {
				t.Errorf("DroppedError() = %v", d)
			}
		})
	}
}

// The left-out objects are not part of the snapshot's identity: once the
// Secret exists the snapshot differs (the peer is in), and two builds
// leaving out the same peer are Equal.
func TestDropTransientEqual(t *testing.T) {
	t.Parallel()
	opts := Options{Namespace: ns, DropTransient: true}
	r := base()
	r.Peers = append(r.Peers, v1beta2.BGPPeer{ObjectMeta: meta("peer-b"), Spec: v1beta2.BGPPeerSpec{
		MyASN: 64500, PeerASN: 64502, PeerAddress: "198.51.100.253", PasswordSecret: &corev1.SecretReference{Name: "pw-b"}}})
	a, err := Build(r, opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Build(r, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Equal(b) {
		t.Error("two builds leaving out the same peer are not Equal")
	}
	r.Secrets = append(r.Secrets, basicAuth("pw-b", "x"))
	full, err := Build(r, opts)
	if err != nil {
		t.Fatal(err)
	}
	if full.Equal(a) || len(full.Dropped()) != 0 || len(full.Peers()) != 2 {
		t.Errorf("with the Secret: Equal %v, Dropped %v, peers %d", full.Equal(a), full.Dropped(), len(full.Peers()))
	}
}

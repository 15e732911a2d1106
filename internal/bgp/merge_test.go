package bgp

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"
	"time"
)

func u32(v uint32) *uint32 { return &v }

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func TestMergePaths(t *testing.T) {
	tests := []struct {
		name      string
		in        []Path
		want      []Path
		conflicts []netip.Prefix
	}{
		{name: "empty", in: nil, want: nil},
		{
			name: "distinct prefixes sorted v4 before v6, masked",
			in: []Path{
				{Prefix: pfx("2001:db8::1/128")},
				{Prefix: pfx("203.0.113.77/24")},
				{Prefix: pfx("198.51.100.1/32")},
			},
			want: []Path{
				{Prefix: pfx("198.51.100.1/32")},
				{Prefix: pfx("203.0.113.0/24")},
				{Prefix: pfx("2001:db8::1/128")},
			},
		},
		{
			name: "same prefix: communities unioned sorted deduplicated",
			in: []Path{
				{Prefix: pfx("203.0.113.5/32"), Communities: []uint32{30, 10}, LargeCommunities: [][3]uint32{{1, 2, 3}}},
				{Prefix: pfx("203.0.113.5/32"), Communities: []uint32{20, 10}, LargeCommunities: [][3]uint32{{1, 1, 9}, {1, 2, 3}}},
			},
			want: []Path{{Prefix: pfx("203.0.113.5/32"), Communities: []uint32{10, 20, 30}, LargeCommunities: [][3]uint32{{1, 1, 9}, {1, 2, 3}}}},
		},
		{
			name: "aggregation: two IPs roll up into one /24",
			in: []Path{
				{Prefix: pfx("203.0.113.5/24"), Communities: []uint32{1}},
				{Prefix: pfx("203.0.113.9/24"), Communities: []uint32{2}},
			},
			want: []Path{{Prefix: pfx("203.0.113.0/24"), Communities: []uint32{1, 2}}},
		},
		{
			name: "local pref equal kept, unset ignored",
			in: []Path{
				{Prefix: pfx("203.0.113.5/32")},
				{Prefix: pfx("203.0.113.5/32"), LocalPref: u32(200)},
				{Prefix: pfx("203.0.113.5/32"), LocalPref: u32(200)},
			},
			want: []Path{{Prefix: pfx("203.0.113.5/32"), LocalPref: u32(200)}},
		},
		{
			name: "local pref conflict: highest wins, reported",
			in: []Path{
				{Prefix: pfx("203.0.113.5/32"), LocalPref: u32(300)},
				{Prefix: pfx("203.0.113.5/32"), LocalPref: u32(100)},
				{Prefix: pfx("203.0.113.6/32"), LocalPref: u32(100)},
				{Prefix: pfx("203.0.113.6/32"), LocalPref: u32(300)},
			},
			want: []Path{
				{Prefix: pfx("203.0.113.5/32"), LocalPref: u32(300)},
				{Prefix: pfx("203.0.113.6/32"), LocalPref: u32(300)},
			},
			conflicts: []netip.Prefix{pfx("203.0.113.5/32"), pfx("203.0.113.6/32")},
		},
		{
			name: "peers unioned",
			in: []Path{
				{Prefix: pfx("203.0.113.5/32"), Peers: []string{"b", "a"}},
				{Prefix: pfx("203.0.113.5/32"), Peers: []string{"c", "a"}},
			},
			want: []Path{{Prefix: pfx("203.0.113.5/32"), Peers: []string{"a", "b", "c"}}},
		},
		{
			name: "unrestricted reason makes the prefix go to all peers",
			in: []Path{
				{Prefix: pfx("203.0.113.5/32"), Peers: []string{"a"}},
				{Prefix: pfx("203.0.113.5/32")},
				{Prefix: pfx("203.0.113.5/32"), Peers: []string{"b"}},
			},
			want: []Path{{Prefix: pfx("203.0.113.5/32")}},
		},
		{
			name: "weight of one reason kept, source dropped",
			in:   []Path{{Prefix: pfx("203.0.113.5/32"), Weight: 3, WeightSource: "ns/a"}},
			want: []Path{{Prefix: pfx("203.0.113.5/32"), Weight: 3}},
		},
		{
			name: "weights of different Services add up, one Service through two advertisements counts once",
			in: []Path{
				{Prefix: pfx("203.0.113.5/24"), Weight: 3, WeightSource: "ns/a"},
				{Prefix: pfx("203.0.113.9/24"), Weight: 2, WeightSource: "ns/b"},
				{Prefix: pfx("203.0.113.5/24"), Weight: 3, WeightSource: "ns/a", Communities: []uint32{1}},
				{Prefix: pfx("203.0.113.7/24"), Weight: 1, WeightSource: "ns/c"},
			},
			want: []Path{{Prefix: pfx("203.0.113.0/24"), Communities: []uint32{1}, Weight: 6}},
		},
		{
			name: "one reason without weight: no community on the prefix, in any order",
			in: []Path{
				{Prefix: pfx("203.0.113.5/32"), Weight: 3, WeightSource: "ns/a"},
				{Prefix: pfx("203.0.113.5/32"), WeightSource: "ns/b"},
				{Prefix: pfx("203.0.113.5/32"), Weight: 2, WeightSource: "ns/c"},
				{Prefix: pfx("203.0.113.6/32")},
				{Prefix: pfx("203.0.113.6/32"), Weight: 2, WeightSource: "ns/c"},
			},
			want: []Path{{Prefix: pfx("203.0.113.5/32")}, {Prefix: pfx("203.0.113.6/32")}},
		},
		{
			name: "sum capped at MaxWeight",
			in: []Path{
				{Prefix: pfx("203.0.113.0/24"), Weight: MaxWeight, WeightSource: "ns/a"},
				{Prefix: pfx("203.0.113.0/24"), Weight: MaxWeight, WeightSource: "ns/b"},
			},
			want: []Path{{Prefix: pfx("203.0.113.0/24"), Weight: MaxWeight}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, conflicts := MergePaths(tc.in)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("MergePaths:\n got %+v\nwant %+v", got, tc.want)
			}
			if !reflect.DeepEqual(conflicts, tc.conflicts) {
				t.Errorf("conflicts: got %v want %v", conflicts, tc.conflicts)
			}
		})
	}
}

func TestMergePathsDoesNotAliasInput(t *testing.T) {
	in := []Path{
		{Prefix: pfx("203.0.113.5/32"), Communities: []uint32{2, 1}, Peers: []string{"b"}},
		{Prefix: pfx("203.0.113.5/32"), Communities: []uint32{3}, Peers: []string{"a"}},
	}
	out, _ := MergePaths(in)
	out[0].Communities[0] = 99
	if in[0].Communities[0] != 2 || in[0].Communities[1] != 1 || in[0].Peers[0] != "b" {
		t.Fatalf("input modified: %+v", in[0])
	}
}

func TestLastReasonWithdraws(t *testing.T) {
	a := Path{Prefix: pfx("203.0.113.5/32"), Communities: []uint32{1}}
	b := Path{Prefix: pfx("203.0.113.5/32"), Communities: []uint32{2}}
	applied, _ := MergePaths([]Path{a, b})
	// Service b goes away: the prefix stays, only its community changes.
	d := DiffPaths([]Path{a}, applied)
	if len(d.Delete) != 0 || len(d.Add) != 0 || len(d.Update) != 1 || !reflect.DeepEqual(d.Update[0].Communities, []uint32{1}) {
		t.Fatalf("after first reason gone: %+v", d)
	}
	// The last reason goes: withdrawn.
	applied, _ = MergePaths([]Path{a})
	d = DiffPaths(nil, applied)
	if len(d.Delete) != 1 || d.Delete[0].Prefix != a.Prefix || len(d.Add)+len(d.Update) != 0 {
		t.Fatalf("after last reason gone: %+v", d)
	}
}

// TestWeightChangeIsAnUpdate: an endpoint more or less changes the weight
// of a prefix in place (an UPDATE of the same prefix), never a withdrawal
// and a new announcement.
func TestWeightChangeIsAnUpdate(t *testing.T) {
	applied, _ := MergePaths([]Path{{Prefix: pfx("203.0.113.5/32"), Weight: 1, WeightSource: "ns/a"}})
	d := DiffPaths([]Path{{Prefix: pfx("203.0.113.5/32"), Weight: 3, WeightSource: "ns/a"}}, applied)
	if len(d.Delete)+len(d.Add) != 0 || len(d.Update) != 1 || d.Update[0].Weight != 3 {
		t.Fatalf("weight 1 -> 3: %+v", d)
	}
	d = DiffPaths([]Path{{Prefix: pfx("203.0.113.5/32"), Weight: 1, WeightSource: "ns/a"}}, applied)
	if !d.Empty() {
		t.Fatalf("same weight: %+v", d)
	}
	if err := (Path{Prefix: pfx("203.0.113.5/32"), Weight: MaxWeight + 1}).Validate(); !errors.Is(err, ErrInvalidPath) {
		t.Fatalf("weight above MaxWeight: %v", err)
	}
}

func TestDiffPaths(t *testing.T) {
	p1 := Path{Prefix: pfx("203.0.113.1/32")}
	p2 := Path{Prefix: pfx("203.0.113.2/32"), Communities: []uint32{1}}
	p2b := Path{Prefix: pfx("203.0.113.2/32"), Communities: []uint32{1, 2}}
	p3 := Path{Prefix: pfx("2001:db8::3/128"), Peers: []string{"a"}}
	p3b := Path{Prefix: pfx("2001:db8::3/128"), Peers: []string{"a", "b"}}
	p4 := Path{Prefix: pfx("203.0.113.4/32"), LocalPref: u32(100)}
	p4b := Path{Prefix: pfx("203.0.113.4/32"), LocalPref: u32(200)}
	p4c := Path{Prefix: pfx("203.0.113.4/32")}
	tests := []struct {
		name             string
		desired, applied []Path
		want             PathDiff
	}{
		{name: "nothing", want: PathDiff{}},
		{name: "all new", desired: []Path{p2, p1}, want: PathDiff{Add: []Path{p1, p2}}},
		{name: "unchanged in different order", desired: []Path{p2, p1}, applied: []Path{p1, p2}, want: PathDiff{}},
		{name: "unchanged modulo community order", desired: []Path{{Prefix: p2b.Prefix, Communities: []uint32{2, 1, 2}}}, applied: []Path{p2b}, want: PathDiff{}},
		{name: "delete", applied: []Path{p1, p2}, want: PathDiff{Delete: []Path{p1, p2}}},
		{name: "community change", desired: []Path{p1, p2b}, applied: []Path{p1, p2}, want: PathDiff{Update: []Path{p2b}}},
		{name: "peer change", desired: []Path{p3b}, applied: []Path{p3}, want: PathDiff{Update: []Path{p3b}}},
		{name: "local pref change", desired: []Path{p4b}, applied: []Path{p4}, want: PathDiff{Update: []Path{p4b}}},
		{name: "local pref removed", desired: []Path{p4c}, applied: []Path{p4}, want: PathDiff{Update: []Path{p4c}}},
		{name: "mixed", desired: []Path{p1, p3, p4}, applied: []Path{p2, p3, p4b}, want: PathDiff{Add: []Path{p1}, Update: []Path{p4}, Delete: []Path{p2}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := DiffPaths(tc.desired, tc.applied)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("DiffPaths:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestDiffPeers(t *testing.T) {
	a := PeerConfig{Name: "a", Address: netip.MustParseAddr("198.51.100.1"), MyASN: 64500, PeerASN: 64501}
	b := PeerConfig{Name: "b", Address: netip.MustParseAddr("198.51.100.2"), MyASN: 64500, PeerASN: 64501}
	b2 := b
	b2.HoldTime = 9 * time.Second
	c := PeerConfig{Name: "c", Address: netip.MustParseAddr("2001:db8::2"), MyASN: 64500, PeerASN: 64500}
	tests := []struct {
		name             string
		desired, applied []PeerConfig
		want             PeerDiff
	}{
		{name: "nothing", want: PeerDiff{}},
		{name: "add sorted", desired: []PeerConfig{c, a}, want: PeerDiff{Add: []PeerConfig{a, c}}},
		{name: "unchanged", desired: []PeerConfig{a, b}, applied: []PeerConfig{b, a}, want: PeerDiff{}},
		{name: "hold time change touches only b", desired: []PeerConfig{a, b2}, applied: []PeerConfig{a, b}, want: PeerDiff{Update: []PeerUpdate{{Old: b, New: b2}}}},
		{name: "delete", desired: []PeerConfig{a}, applied: []PeerConfig{a, c}, want: PeerDiff{Delete: []PeerConfig{c}}},
		{name: "mixed", desired: []PeerConfig{b2, c}, applied: []PeerConfig{a, b}, want: PeerDiff{Add: []PeerConfig{c}, Update: []PeerUpdate{{Old: b, New: b2}}, Delete: []PeerConfig{a}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := DiffPeers(tc.desired, tc.applied)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("DiffPeers:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestValidatePeers(t *testing.T) {
	ok := PeerConfig{Name: "a", Address: netip.MustParseAddr("198.51.100.1"), MyASN: 64500, PeerASN: 64501}
	mod := func(f func(*PeerConfig)) PeerConfig { p := ok; f(&p); return p }
	tests := []struct {
		name    string
		peers   []PeerConfig
		wantErr error
	}{
		{name: "ok", peers: []PeerConfig{ok, mod(func(p *PeerConfig) { p.Name = "u"; p.Address = netip.Addr{}; p.Interface = "eth0" })}},
		{name: "no name", peers: []PeerConfig{mod(func(p *PeerConfig) { p.Name = "" })}, wantErr: ErrInvalidPeer},
		{name: "no address", peers: []PeerConfig{mod(func(p *PeerConfig) { p.Address = netip.Addr{} })}, wantErr: ErrInvalidPeer},
		{name: "address and interface", peers: []PeerConfig{mod(func(p *PeerConfig) { p.Interface = "eth0" })}, wantErr: ErrInvalidPeer},
		{name: "zero ASN", peers: []PeerConfig{mod(func(p *PeerConfig) { p.MyASN = 0 })}, wantErr: ErrInvalidPeer},
		{name: "hold time 2s", peers: []PeerConfig{mod(func(p *PeerConfig) { p.HoldTime = 2 * time.Second })}, wantErr: ErrInvalidPeer},
		{name: "hold time fractional", peers: []PeerConfig{mod(func(p *PeerConfig) { p.HoldTime = 3500 * time.Millisecond })}, wantErr: ErrInvalidPeer},
		{name: "keepalive > hold", peers: []PeerConfig{mod(func(p *PeerConfig) { p.HoldTime = 3 * time.Second; p.KeepaliveTime = 6 * time.Second })}, wantErr: ErrInvalidPeer},
		{name: "ipv6 router id", peers: []PeerConfig{mod(func(p *PeerConfig) { p.RouterID = netip.MustParseAddr("2001:db8::1") })}, wantErr: ErrInvalidPeer},
		{name: "multihop on iBGP", peers: []PeerConfig{mod(func(p *PeerConfig) { p.PeerASN = p.MyASN; p.EBGPMultiHop = 3 })}, wantErr: ErrInvalidPeer},
		{name: "duplicate name", peers: []PeerConfig{ok, mod(func(p *PeerConfig) { p.Address = netip.MustParseAddr("198.51.100.9") })}, wantErr: ErrDuplicatePeer},
		{name: "duplicate address", peers: []PeerConfig{ok, mod(func(p *PeerConfig) { p.Name = "b" })}, wantErr: ErrDuplicatePeer},
		{name: "same address other vrf", peers: []PeerConfig{ok, mod(func(p *PeerConfig) { p.Name = "b"; p.VRF = "red" })}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidatePeers(tc.peers)
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("got %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestPathValidate(t *testing.T) {
	if err := (Path{Prefix: pfx("203.0.113.1/32"), LargeCommunities: [][3]uint32{{ReservedLargeCommunityASN, 1, 2}}}).Validate(); !errors.Is(err, ErrReservedCommunity) {
		t.Errorf("reserved large community: %v", err)
	}
	if err := (Path{}).Validate(); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("zero prefix: %v", err)
	}
	if err := (Path{Prefix: pfx("203.0.113.1/32"), Peers: []string{"a"}}).Validate(); err != nil {
		t.Errorf("valid: %v", err)
	}
}

func TestMetricLabel(t *testing.T) {
	p := PeerConfig{Address: netip.MustParseAddr("2001:db8::1")}
	if got := p.MetricLabel(); got != "[2001:db8::1]:179" {
		t.Errorf("v6: %s", got)
	}
	p = PeerConfig{Address: netip.MustParseAddr("198.51.100.1"), Port: 1179}
	if got := p.MetricLabel(); got != "198.51.100.1:1179" {
		t.Errorf("v4: %s", got)
	}
}

// TestPeerReceives: the one rule for who gets a path (the speaker's
// per-peer counts, ServiceBGPStatus).
func TestPeerReceives(t *testing.T) {
	v4 := PeerConfig{Name: "v4", Address: netip.MustParseAddr("198.51.100.1")}
	v6 := PeerConfig{Name: "v6", Address: netip.MustParseAddr("2001:db8::1")}
	ds := PeerConfig{Name: "ds", Address: netip.MustParseAddr("198.51.100.2"), DualStack: true}
	un := PeerConfig{Name: "un", Interface: "eth1"}
	p4 := Path{Prefix: netip.MustParsePrefix("203.0.113.1/32")}
	p6 := Path{Prefix: netip.MustParsePrefix("2001:db8:1::1/128")}
	only := func(p Path, peers ...string) Path { p.Peers = peers; return p }
	for _, tc := range []struct {
		peer PeerConfig
		path Path
		want bool
	}{
		{v4, p4, true}, {v4, p6, false}, {v6, p6, true}, {v6, p4, false},
		// Dual-stack negotiates both families but announces its own only.
		{ds, p4, true}, {ds, p6, false},
		// Unnumbered: both families, unrestricted paths only.
		{un, p4, true}, {un, p6, true}, {un, only(p4, "un"), false},
		{v4, only(p4, "v4"), true}, {v4, only(p4, "v6"), false},
	} {
		if got := tc.peer.Receives(tc.path); got != tc.want {
			t.Errorf("%s receives %v (peers %v) = %v, want %v", tc.peer.Name, tc.path.Prefix, tc.path.Peers, got, tc.want)
		}
	}
}

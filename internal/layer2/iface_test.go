package layer2

import (
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

func TestEligible(t *testing.T) {
	r, err := Options{}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	ll := netip.MustParseAddr("fe80::1")
	base := linkInfo{Name: "eth0", Index: 2, MAC: ourMAC, Flags: net.FlagUp | net.FlagBroadcast | net.FlagMulticast, LinkLocal: ll}
	with := func(f func(*linkInfo)) linkInfo { l := base; f(&l); return l }
	tests := []struct {
		name     string
		link     linkInfo
		arp, ndp bool
	}{
		{"ethernet up", base, true, true},
		{"no link-local yet", with(func(l *linkInfo) { l.LinkLocal = netip.Addr{} }), true, false},
		{"not broadcast", with(func(l *linkInfo) { l.Flags &^= net.FlagBroadcast }), false, true},
		{"down", with(func(l *linkInfo) { l.Flags &^= net.FlagUp }), false, false},
		{"bond slave", with(func(l *linkInfo) { l.MasterIndex = 7 }), false, false},
		{"NOARP", with(func(l *linkInfo) { l.RawFlags = unix.IFF_NOARP }), false, false},
		{"no MAC (tun)", with(func(l *linkInfo) { l.MAC = nil }), false, false},
		{"loopback", with(func(l *linkInfo) { l.Name = "lo" }), false, false},
		{"lo prefix is not lo", with(func(l *linkInfo) { l.Name = "lonely0" }), true, true},
		{"docker bridge", with(func(l *linkInfo) { l.Name = "docker0" }), false, false},
		{"veth", with(func(l *linkInfo) { l.Name = "veth1234" }), false, false},
		{"calico", with(func(l *linkInfo) { l.Name = "cali12ab" }), false, false},
		{"kube-ipvs", with(func(l *linkInfo) { l.Name = "kube-ipvs0" }), false, false},
		{"nodelocaldns", with(func(l *linkInfo) { l.Name = "nodelocaldns" }), false, false},
		{"bond master", with(func(l *linkInfo) { l.Name = "bond0" }), true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := eligible(tt.link, r.exclude)
			if e.ARP != tt.arp || e.NDP != tt.ndp {
				t.Fatalf("eligible = %+v, want arp=%v ndp=%v", e, tt.arp, tt.ndp)
			}
			if (e.Reason == "") != (e.ARP || e.NDP) {
				t.Fatalf("reason %q inconsistent with %+v", e.Reason, e)
			}
		})
	}
}

func TestOptionsResolve(t *testing.T) {
	r, err := Options{}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if r.count != DefaultGratuitousCount || r.interval != DefaultGratuitousInterval || r.rescan != DefaultRescanInterval || len(r.exclude) != len(DefaultExcludeInterfaces()) {
		t.Fatalf("defaults not applied: %+v", r)
	}
	if r, _ := (Options{GratuitousCount: -1, ExcludeInterfaces: []string{}}).resolve(); r.count != 0 || len(r.exclude) != 0 {
		t.Fatalf("negative count / empty excludes: %+v", r)
	}
	if _, err := (Options{ExcludeInterfaces: []string{"("}}).resolve(); err == nil {
		t.Fatal("bad regex accepted")
	}
	if _, err := (Options{ConflictInterval: -1}).resolve(); err == nil {
		t.Fatal("negative conflict interval accepted")
	}
	if r.conflictInterval != DefaultConflictInterval {
		t.Fatalf("default conflict interval %s", r.conflictInterval)
	}
	if _, err := (Options{GratuitousInterval: -1}).resolve(); err == nil {
		t.Fatal("negative interval accepted")
	}
}

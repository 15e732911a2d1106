package layer2

import (
	"net/netip"
	"slices"
	"testing"
)

func TestTableRefcount(t *testing.T) {
	tb := newTable()
	ip := netip.MustParseAddr("198.51.100.20")
	if !tb.setOwner("ns/a", map[netip.Addr][]string{ip: nil}) {
		t.Fatal("first announcement reported no change")
	}
	if tb.setOwner("ns/a", map[netip.Addr][]string{ip: nil}) {
		t.Fatal("repeated announcement reported a change")
	}
	tb.setOwner("ns/b", map[netip.Addr][]string{ip: {"eth1"}})
	if got := tb.owners(ip); !slices.Equal(got, []string{"ns/a", "ns/b"}) {
		t.Fatalf("owners = %v", got)
	}
	tb.setOwner("ns/a", nil)
	if ok, on := tb.lookup(ip, "eth0"); !ok || on {
		t.Fatalf("after ns/a withdrew: announced=%v on eth0=%v; want true,false (ns/b is eth1 only)", ok, on)
	}
	if _, on := tb.lookup(ip, "eth1"); !on {
		t.Fatal("ns/b's interface eth1 lost")
	}
	if tb.setOwner("ns/a", nil) {
		t.Fatal("second withdrawal reported a change")
	}
	tb.setOwner("ns/b", nil)
	if ok, _ := tb.lookup(ip, "eth1"); ok {
		t.Fatal("IP still announced after the last owner withdrew")
	}
	if len(tb.all()) != 0 || len(tb.byOwner) != 0 {
		t.Fatalf("state left behind: %v %v", tb.ips, tb.byOwner)
	}
}

func TestTableInterfaces(t *testing.T) {
	tb := newTable()
	ip := netip.MustParseAddr("2001:db8::20")
	tb.setOwner("a", map[netip.Addr][]string{ip: {"eth1", "eth0", "eth1"}})
	for _, tc := range []struct {
		ifname string
		on     bool
	}{{"eth0", true}, {"eth1", true}, {"eth2", false}} {
		if _, on := tb.lookup(ip, tc.ifname); on != tc.on {
			t.Errorf("lookup(%s) on=%v, want %v", tc.ifname, on, tc.on)
		}
	}
	// A second owner with no list opens every interface.
	tb.setOwner("b", map[netip.Addr][]string{ip: nil})
	if _, on := tb.lookup(ip, "eth2"); !on {
		t.Error("owner without interface list did not open eth2")
	}
	// Replacing a's list is idempotent when equal after sorting/dedup.
	if tb.setOwner("a", map[netip.Addr][]string{ip: {"eth0", "eth1"}}) {
		t.Error("same interface list in another order reported a change")
	}
}

func TestTableSetOwner(t *testing.T) {
	tb := newTable()
	ip1 := netip.MustParseAddr("198.51.100.21")
	ip2 := netip.MustParseAddr("198.51.100.22")
	tb.setOwner("a", map[netip.Addr][]string{ip1: nil, ip2: {"eth0"}})
	tb.takeDirty()
	if tb.setOwner("a", map[netip.Addr][]string{ip1: nil, ip2: {"eth0"}}) {
		t.Fatal("same declaration reported a change")
	}
	tb.setOwner("b", map[netip.Addr][]string{ip2: nil})
	tb.setOwner("a", map[netip.Addr][]string{ip1: nil})
	if got := tb.owners(ip2); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("owners of %s = %v, want [b]", ip2, got)
	}
	dirty := tb.takeDirty()
	slices.SortFunc(dirty, netip.Addr.Compare)
	if !slices.Equal(dirty, []netip.Addr{ip2}) {
		t.Fatalf("dirty = %v, want [%s]", dirty, ip2)
	}
	tb.setOwner("a", nil)
	if ok, _ := tb.lookup(ip1, "eth0"); ok {
		t.Fatal("empty declaration left ip1 announced")
	}
}

func TestNormalize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		ok   bool
	}{
		{"198.51.100.1", "198.51.100.1", true},
		{"::ffff:198.51.100.1", "198.51.100.1", true},
		{"fe80::1%eth0", "fe80::1", true},
		{"0.0.0.0", "0.0.0.0", false},
		{"ff02::1", "ff02::1", false},
		{"127.0.0.1", "127.0.0.1", false},
	} {
		got, ok := normalize(netip.MustParseAddr(tc.in))
		if got.String() != tc.want || ok != tc.ok {
			t.Errorf("normalize(%s) = %s,%v; want %s,%v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	if _, ok := normalize(netip.Addr{}); ok {
		t.Error("zero Addr accepted")
	}
}

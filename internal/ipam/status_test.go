package ipam

import (
	"net/netip"
	"slices"
	"testing"
)

// An address a Service lost stays out of every other Service's reach until
// the status showing it has changed (issue 11: "an address freed from one
// Service can be given to another before the clearing write has
// succeeded").
func TestSetStatusParksFreedAddresses(t *testing.T) {
	one := []Pool{mkPool("a", "198.51.100.0/32")}
	two := []Pool{mkPool("a", "198.51.100.0/31")}
	runScenarios(t, []scenario{
		{name: "released address parked until the clearing write", pools: one, steps: []step{
			{req: svc("n/a"), want: "a:198.51.100.0"},
			{req: svc("n/a"), shows: []string{"198.51.100.0"}, want: "kept"},
			{release: "n/a"},
			{req: svc("n/b"), want: "ErrPoolExhausted", msg: "198.51.100.0 stays reserved for Service n/a"},
			{req: svc("n/b").want("198.51.100.0"), want: "ErrIPInUse", msg: "n/a"},
			{cleared: "n/a", want: "freed"},
			{req: svc("n/b"), want: "a:198.51.100.0"},
		}},
		{name: "address replaced by a request change parked until the new status", pools: two, steps: []step{
			{req: svc("n/a"), want: "a:198.51.100.0"},
			{req: svc("n/a"), shows: []string{"198.51.100.0"}, want: "kept"},
			{req: svc("n/a").want("198.51.100.1"), want: "a:198.51.100.1"},
			{req: svc("n/b"), want: "ErrPoolExhausted"},
			{req: svc("n/a").want("198.51.100.1"), shows: []string{"198.51.100.1"}, want: "freed"},
			{req: svc("n/b"), want: "a:198.51.100.0"},
		}},
		{name: "failed allocation parks what the status shows", pools: one, steps: []step{
			{req: svc("n/a"), want: "a:198.51.100.0"},
			{req: svc("n/a"), shows: []string{"198.51.100.0"}, want: "kept"},
			{req: svc("n/a").inPool("missing"), want: "ErrUnknownPool"},
			{req: svc("n/b"), want: "ErrPoolExhausted"},
			{cleared: "n/a", want: "freed"},
			{req: svc("n/b"), want: "a:198.51.100.0"},
		}},
		{name: "the Service showing a parked address may take it back", pools: one, steps: []step{
			{req: svc("n/a"), want: "a:198.51.100.0"},
			{req: svc("n/a"), shows: []string{"198.51.100.0"}, want: "kept"},
			{release: "n/a"},
			{req: svc("n/a"), want: "a:198.51.100.0"},
			{release: "n/a"},
			{req: svc("n/a"), imp: []string{"198.51.100.0"}, want: "a:198.51.100.0"},
		}},
		{name: "a status showing a free address parks it", pools: one, steps: []step{
			{req: svc("n/a"), shows: []string{"198.51.100.0"}, want: "kept"},
			{req: svc("n/b"), want: "ErrPoolExhausted"},
			{req: svc("n/b"), imp: []string{"198.51.100.0"}, want: "ErrIPInUse", msg: "n/a"},
			{cleared: "n/a", want: "freed"},
			{req: svc("n/b"), want: "a:198.51.100.0"},
		}},
		{name: "held address: clearing another status frees nothing", pools: one, steps: []step{
			{req: svc("n/a"), want: "a:198.51.100.0"},
			{req: svc("n/b"), shows: []string{"198.51.100.0"}, want: "kept"},
			{cleared: "n/b", want: "kept"},
			{req: svc("n/c"), want: "ErrPoolExhausted"},
		}},
		{name: "a holder keeps its address while another status shows it", pools: one, steps: []step{
			{req: svc("n/a"), want: "a:198.51.100.0"},
			{req: svc("n/a"), shows: []string{"198.51.100.0"}, want: "kept"},
			{req: svc("n/b"), shows: []string{"198.51.100.0"}, want: "kept"},
			{req: svc("n/a"), want: "a:198.51.100.0"},
			{req: svc("n/b"), imp: []string{"198.51.100.0"}, want: "ErrIPInUse", msg: "n/a"},
		}},
		{name: "two statuses showing one address: free after both change", pools: one, steps: []step{
			{req: svc("n/a"), shows: []string{"198.51.100.0"}, want: "kept"},
			{req: svc("n/b"), shows: []string{"198.51.100.0"}, want: "kept"},
			{cleared: "n/a", want: "kept"},
			{req: svc("n/c"), want: "ErrPoolExhausted"},
			{cleared: "n/b", want: "freed"},
			{req: svc("n/c"), want: "a:198.51.100.0"},
		}},
		{name: "sharing Services may not join a parked address", pools: one, steps: []step{
			{req: svc("n/a").share("k", "TCP/80"), want: "a:198.51.100.0"},
			{req: svc("n/a"), shows: []string{"198.51.100.0"}, want: "kept"},
			{release: "n/a"},
			{req: svc("n/b").share("k", "TCP/81"), want: "ErrPoolExhausted"},
			{cleared: "n/a", want: "freed"},
			{req: svc("n/b").share("k", "TCP/81"), want: "a:198.51.100.0"},
		}},
		{name: "parked addresses survive a configuration change", pools: one, steps: []step{
			{req: svc("n/a"), want: "a:198.51.100.0"},
			{req: svc("n/a"), shows: []string{"198.51.100.0"}, want: "kept"},
			{setPools: []Pool{mkPool("a", "198.51.100.0/32").sa(ServiceAllocation{Namespaces: []string{"other"}})}, want: "n/a"},
			{req: svc("n/a"), want: "ErrNoPoolMatches"},
			{setPools: one, want: ""},
			{req: svc("n/b"), want: "ErrPoolExhausted"},
			{cleared: "n/a", want: "freed"},
			{req: svc("n/b"), want: "a:198.51.100.0"},
		}},
		{name: "an address outside every pool is parked once a pool covers it", pools: one, steps: []step{
			{req: svc("n/a"), shows: []string{"203.0.113.7"}, want: "kept"},
			{setPools: []Pool{mkPool("a", "198.51.100.0/32"), mkPool("b", "203.0.113.7/32")}, want: ""},
			{req: svc("n/b").inPool("b"), want: "ErrPoolExhausted"},
			{cleared: "n/a", want: "freed"},
			{req: svc("n/b").inPool("b"), want: "b:203.0.113.7"},
		}},
	})
}

func TestSetStatusReports(t *testing.T) {
	a := newAlloc(t, mkPool("a", "198.51.100.0/30"))
	mustAlloc(t, a, svc("n/a"))
	a.SetStatus("n/a", addrs("198.51.100.0", "198.51.100.0"))
	if got := a.Shown("n/a"); !slices.Equal(got, addrs("198.51.100.0")) {
		t.Errorf("Shown = %v, want the address once", got)
	}
	if len(a.Parked()) != 0 {
		t.Errorf("Parked = %v while the Service holds its address", a.Parked())
	}
	a.Release("n/a")
	want := map[netip.Addr][]string{netip.MustParseAddr("198.51.100.0"): {"n/a"}}
	if got := a.Parked(); len(got) != 1 || !slices.Equal(got[netip.MustParseAddr("198.51.100.0")], want[netip.MustParseAddr("198.51.100.0")]) {
		t.Errorf("Parked = %v, want %v", got, want)
	}
	if s := a.Stats()[0]; s.AssignedIPv4 != 1 || s.AvailableIPv4 != 3 {
		t.Errorf("a parked address counts as assigned: %+v", s)
	}
	if err := a.verify(); err != nil {
		t.Fatal(err)
	}
}

package ipam

import (
	"errors"
	"math"
	"net/netip"
	"slices"
	"testing"
)

func TestImport(t *testing.T) {
	pools := []Pool{mkPool("a", "198.51.100.0/29", "2001:db8:a::/125"), mkPool("b", "203.0.113.0/29").manual()}
	runScenarios(t, []scenario{
		{name: "import reserves before allocation (metallb#1774, #2443)", pools: pools, steps: []step{
			{req: svc("n/old"), imp: []string{"198.51.100.0"}, want: "a:198.51.100.0"},
			{req: svc("n/new"), want: "a:198.51.100.1"},
			{req: svc("n/old"), want: "a:198.51.100.0"},
		}},
		{name: "import from an autoAssign=false pool is kept", pools: pools, steps: []step{
			{req: svc("n/1"), imp: []string{"203.0.113.5"}, want: "b:203.0.113.5"},
			{req: svc("n/1"), want: "b:203.0.113.5"},
		}},
		{name: "conflicting import records nothing", pools: pools, steps: []step{
			{req: svc("n/1"), imp: []string{"198.51.100.3"}, want: "a:198.51.100.3"},
			{req: svc("n/2"), imp: []string{"198.51.100.3"}, want: "ErrIPInUse", msg: "n/1"},
			{req: svc("n/2").share("k", "TCP/1"), imp: []string{"198.51.100.3"}, want: "ErrIPInUse"},
			{req: svc("n/2"), want: "a:198.51.100.0"},
			{req: svc("n/1"), want: "a:198.51.100.3"},
		}},
		{name: "dual-stack import with one conflicting family records nothing", pools: pools, steps: []step{
			{req: svc("n/1").fam(SingleStack, IPv6), imp: []string{"2001:db8:a::1"}, want: "a:2001:db8:a::1"},
			{req: svc("n/2").fam(RequireDualStack, IPv4, IPv6), imp: []string{"198.51.100.1", "2001:db8:a::1"}, want: "ErrIPInUse"},
			{req: svc("n/3"), want: "a:198.51.100.0"},
		}},
		{name: "compatible shared import", pools: pools, steps: []step{
			{req: svc("n/1").share("k", "TCP/80"), imp: []string{"198.51.100.3"}, want: "a:198.51.100.3"},
			{req: svc("n/2").share("k", "TCP/81"), imp: []string{"198.51.100.3"}, want: "a:198.51.100.3"},
			{req: svc("n/3").share("k", "TCP/81"), imp: []string{"198.51.100.3"}, want: "ErrSharingConflict", msg: "n/2"},
		}},
		{name: "IP outside every pool is dropped and explained", pools: pools, steps: []step{
			{req: svc("n/1"), imp: []string{"192.0.2.10"}, want: "ErrRequestedIPNotInPool", msg: "192.0.2.10"},
			{req: svc("n/1"), want: "a:198.51.100.0"},
		}},
		{name: "partial import keeps the valid IP", pools: pools, steps: []step{
			{req: svc("n/1").fam(PreferDualStack, IPv4, IPv6), imp: []string{"198.51.100.5", "2001:db8:ffff::1"}, want: "ErrRequestedIPNotInPool"},
			{req: svc("n/2").fam(SingleStack, IPv6), want: "a:2001:db8:a::"},
			{req: svc("n/1").fam(PreferDualStack, IPv4, IPv6), want: "a:198.51.100.5,2001:db8:a::1"},
		}},
		{name: "IP of a family the Service no longer has is dropped", pools: pools, steps: []step{
			{req: svc("n/1"), imp: []string{"198.51.100.4", "2001:db8:a::4"}, want: "ErrFamilyUnavailable", msg: "2001:db8:a::4"},
			{req: svc("n/2").fam(SingleStack, IPv6), want: "a:2001:db8:a::"},
			{req: svc("n/1"), want: "a:198.51.100.4"},
		}},
		{name: "import honours the pool annotation", pools: pools, steps: []step{
			{req: svc("n/1").inPool("b"), imp: []string{"198.51.100.5"}, want: "ErrRequestedIPNotInPool", msg: `"b"`},
			{req: svc("n/1").inPool("b"), want: "b:203.0.113.0"},
		}},
		{name: "invalid import input", pools: pools, steps: []step{
			{req: svc("n/1").fam(PreferDualStack, IPv4, IPv6), imp: []string{"198.51.100.1", "198.51.100.2"}, want: "ErrInvalidRequest"},
		}},
	})
}

func TestImportKeyMismatch(t *testing.T) {
	a := newAlloc(t, mkPool("a", "198.51.100.0/29"))
	if _, err := a.Import("n/other", addrs("198.51.100.1"), svc("n/1")); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("got %v", err)
	}
	r := svc("n/1")
	r.Key = ""
	if asg, err := a.Import("n/1", addrs("198.51.100.1"), r); err != nil || asg.Pool != "a" {
		t.Fatalf("empty request key should default to the import key: %v %v", asg, err)
	}
}

func TestSetPools(t *testing.T) {
	type svcIP struct {
		req  Request
		want string
	}
	cases := []struct {
		name        string
		before      []Pool
		svcs        []svcIP // allocated in order against before
		after       []Pool
		wantChanged []string
		want        map[string]string // key -> fmtResult of Lookup afterwards ("" = nothing held)
	}{
		{
			name:   "pool removed",
			before: []Pool{mkPool("a", "198.51.100.0/30"), mkPool("b", "203.0.113.0/30")},
			svcs: []svcIP{
				{svc("n/1").inPool("a"), "a:198.51.100.0"},
				{svc("n/2").inPool("b"), "b:203.0.113.0"},
			},
			after:       []Pool{mkPool("b", "203.0.113.0/30")},
			wantChanged: []string{"n/1"},
			want:        map[string]string{"n/1": "", "n/2": "b:203.0.113.0"},
		},
		{
			name:        "pool shrunk",
			before:      []Pool{mkPool("a", "198.51.100.0/30")},
			svcs:        []svcIP{{svc("n/1"), "a:198.51.100.0"}, {svc("n/2"), "a:198.51.100.1"}, {svc("n/3"), "a:198.51.100.2"}},
			after:       []Pool{mkPool("a", "198.51.100.0/31")},
			wantChanged: []string{"n/3"},
			want:        map[string]string{"n/1": "a:198.51.100.0", "n/2": "a:198.51.100.1", "n/3": ""},
		},
		{
			name:        "avoidBuggyIPs turned on",
			before:      []Pool{mkPool("a", "198.51.100.0/30")},
			svcs:        []svcIP{{svc("n/1"), "a:198.51.100.0"}, {svc("n/2"), "a:198.51.100.1"}},
			after:       []Pool{mkPool("a", "198.51.100.0/30").buggy()},
			wantChanged: []string{"n/1"},
			want:        map[string]string{"n/1": "", "n/2": "a:198.51.100.1"},
		},
		{
			name:        "serviceAllocation no longer selects the Service",
			before:      []Pool{mkPool("a", "198.51.100.0/30").sa(ServiceAllocation{Namespaces: []string{"n"}})},
			svcs:        []svcIP{{svc("n/1"), "a:198.51.100.0"}, {svc("m/1").inPool("a"), "ErrNoPoolMatches"}},
			after:       []Pool{mkPool("a", "198.51.100.0/30").sa(ServiceAllocation{Namespaces: []string{"m"}})},
			wantChanged: []string{"n/1"},
			want:        map[string]string{"n/1": ""},
		},
		{
			name:        "autoAssign turned off keeps IPs",
			before:      []Pool{mkPool("a", "198.51.100.0/30")},
			svcs:        []svcIP{{svc("n/1"), "a:198.51.100.0"}},
			after:       []Pool{mkPool("a", "198.51.100.0/30").manual()},
			wantChanged: nil,
			want:        map[string]string{"n/1": "a:198.51.100.0"},
		},
		{
			name:        "prefix moved to a renamed pool",
			before:      []Pool{mkPool("old", "198.51.100.0/30")},
			svcs:        []svcIP{{svc("n/1"), "old:198.51.100.0"}, {svc("n/2").inPool("old"), "old:198.51.100.1"}},
			after:       []Pool{mkPool("new", "198.51.100.0/30")},
			wantChanged: []string{"n/1", "n/2"},
			want:        map[string]string{"n/1": "new:198.51.100.0", "n/2": ""},
		},
		{
			name:        "dual-stack loses one family",
			before:      []Pool{mkPool("d", "198.51.100.0/30", "2001:db8::/126")},
			svcs:        []svcIP{{svc("n/1").fam(PreferDualStack, IPv4, IPv6), "d:198.51.100.0,2001:db8::"}},
			after:       []Pool{mkPool("d", "198.51.100.0/30")},
			wantChanged: []string{"n/1"},
			want:        map[string]string{"n/1": "d:198.51.100.0"},
		},
		{
			name:   "shared IP survives for both",
			before: []Pool{mkPool("a", "198.51.100.0/30")},
			svcs: []svcIP{
				{svc("n/1").share("k", "TCP/1"), "a:198.51.100.0"},
				{svc("n/2").share("k", "TCP/2"), "a:198.51.100.0"},
			},
			after: []Pool{mkPool("a", "198.51.100.0/29")},
			want:  map[string]string{"n/1": "a:198.51.100.0", "n/2": "a:198.51.100.0"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := newAlloc(t, tc.before...)
			reqs := map[string]Request{}
			for _, s := range tc.svcs {
				if got := fmtResult(a.Allocate(s.req)); got != s.want {
					t.Fatalf("setup %s: %s, want %s", s.req.Key, got, s.want)
				}
				reqs[s.req.Key] = s.req
			}
			changed, err := a.SetPools(tc.after)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(changed, tc.wantChanged) {
				t.Fatalf("changed = %v, want %v", changed, tc.wantChanged)
			}
			for key, want := range tc.want {
				got := ""
				if asg, ok := a.Lookup(key); ok {
					got = fmtResult(asg, nil)
				}
				if got != want {
					t.Errorf("%s holds %q, want %q", key, got, want)
				}
			}
			if err := a.verify(); err != nil {
				t.Fatal(err)
			}
			// Re-addressing the changed Services must succeed or fail cleanly.
			for _, key := range changed {
				a.Allocate(reqs[key])
			}
			if err := a.verify(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestSetPoolsInvalid(t *testing.T) {
	a := newAlloc(t, mkPool("a", "198.51.100.0/30"))
	mustAlloc(t, a, svc("n/1"))
	for name, pools := range map[string][]Pool{
		"overlap across pools": {mkPool("a", "198.51.100.0/30"), mkPool("b", "198.51.100.2/31")},
		"overlap within pool":  {mkPool("a", "198.51.100.0/30", "198.51.100.0/24")},
		"duplicate name":       {mkPool("a", "198.51.100.0/30"), mkPool("a", "203.0.113.0/30")},
		"empty name":           {mkPool("", "198.51.100.0/30")},
		"invalid prefix":       {{Name: "x", Prefixes: []netip.Prefix{{}}}},
	} {
		changed, err := a.SetPools(pools)
		if !errors.Is(err, ErrInvalidPool) || changed != nil {
			t.Errorf("%s: SetPools = %v, %v; want ErrInvalidPool", name, changed, err)
		}
	}
	if asg, ok := a.Lookup("n/1"); !ok || asg.Pool != "a" {
		t.Fatalf("previous pools not kept: %v %v", asg, ok)
	}
	if got := fmtResult(a.Allocate(svc("n/2"))); got != "a:198.51.100.1" {
		t.Fatalf("after rejected SetPools: %s", got)
	}
}

func TestStats(t *testing.T) {
	a := newAlloc(t,
		mkPool("dual", "198.51.100.0/24", "2001:db8::/120").buggy(),
		mkPool("huge", "2001:db8:1::/64"),
		mkPool("empty"),
	)
	mustAlloc(t, a, svc("n/1").fam(RequireDualStack, IPv4, IPv6).share("k", "TCP/1").inPool("dual"))
	mustAlloc(t, a, svc("n/2").fam(RequireDualStack, IPv4, IPv6).share("k", "TCP/2").inPool("dual")) // shares both
	mustAlloc(t, a, svc("n/3").inPool("dual"))
	mustAlloc(t, a, svc("n/4").fam(SingleStack, IPv6).inPool("huge"))
	got := a.Stats()
	want := []PoolStats{
		{Pool: "dual", TotalIPv4: 254, TotalIPv6: 256, AssignedIPv4: 2, AssignedIPv6: 1, AvailableIPv4: 252, AvailableIPv6: 255},
		{Pool: "empty"},
		{Pool: "huge", TotalIPv6: math.MaxInt64, AssignedIPv6: 1, AvailableIPv6: math.MaxInt64},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Stats:\n got %+v\nwant %+v", got, want)
	}
	if got[0].Total() != 510 || got[0].InUse() != 3 || got[2].Total() != math.MaxInt64 {
		t.Fatalf("Total/InUse: %d %d %d", got[0].Total(), got[0].InUse(), got[2].Total())
	}
	a.Release("n/1")
	if s := a.Stats()[0]; s.AssignedIPv4 != 2 || s.AssignedIPv6 != 1 {
		t.Fatalf("shared IPs must stay assigned while n/2 holds them: %+v", s)
	}
	a.Release("n/2")
	if s := a.Stats()[0]; s.AssignedIPv4 != 1 || s.AssignedIPv6 != 0 || s.AvailableIPv6 != 256 {
		t.Fatalf("after release: %+v", s)
	}
}

func TestConcurrentUse(t *testing.T) {
	a := newAlloc(t, mkPool("p", "198.51.100.0/24"))
	done := make(chan error)
	for g := range 4 {
		go func() {
			for i := range 200 {
				key := "n/" + string(rune('a'+g)) + "-" + string(rune('a'+i%20))
				if _, err := a.Allocate(svc(key)); err != nil {
					done <- err
					return
				}
				if i%3 == 0 {
					a.Release(key)
				}
				_ = a.Stats()
			}
			done <- nil
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if err := a.verify(); err != nil {
		t.Fatal(err)
	}
}

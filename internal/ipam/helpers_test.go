package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
)

func mkPool(name string, prefixes ...string) Pool {
	p := Pool{Name: name, AutoAssign: true}
	for _, s := range prefixes {
		p.Prefixes = append(p.Prefixes, netip.MustParsePrefix(s))
	}
	return p
}

func (p Pool) manual() Pool { p.AutoAssign = false; return p }
func (p Pool) buggy() Pool  { p.AvoidBuggyIPs = true; return p }
func (p Pool) sa(s ServiceAllocation) Pool {
	p.ServiceAllocation = &s
	return p
}

// svc returns a SingleStack IPv4 request for "namespace/name".
func svc(key string) Request {
	ns, _, _ := strings.Cut(key, "/")
	return Request{Key: key, Namespace: ns, Families: []Family{IPv4}, Policy: SingleStack}
}

func (r Request) fam(p FamilyPolicy, fs ...Family) Request {
	r.Policy, r.Families = p, fs
	return r
}

func (r Request) want(ips ...string) Request {
	r.RequestedIPs = addrs(ips...)
	return r
}

func (r Request) share(key string, ports ...string) Request {
	r.SharingKey = key
	r.Ports = nil
	for _, p := range ports {
		proto, num, _ := strings.Cut(p, "/")
		var n int32
		fmt.Sscan(num, &n)
		r.Ports = append(r.Ports, Port{Protocol: proto, Port: n})
	}
	return r
}

func (r Request) inPool(name string) Request { r.PoolName = name; return r }

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func sel(t testing.TB, s string) labels.Selector {
	t.Helper()
	out, err := labels.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func newAlloc(t testing.TB, pools ...Pool) *Allocator {
	t.Helper()
	a := New()
	if _, err := a.SetPools(pools); err != nil {
		t.Fatal(err)
	}
	return a
}

// fmtResult renders an Allocate outcome compactly: "pool:ip,ip" or the
// sentinel error name.
func fmtResult(asg Assignment, err error) string {
	if err != nil {
		return sentinelName(err)
	}
	var ips []string
	for _, ip := range asg.IPs {
		ips = append(ips, ip.String())
	}
	return asg.Pool + ":" + strings.Join(ips, ",")
}

func sentinelName(err error) string {
	for _, s := range []struct {
		err  error
		name string
	}{
		{ErrNoPoolMatches, "ErrNoPoolMatches"}, {ErrPoolExhausted, "ErrPoolExhausted"},
		{ErrSharingConflict, "ErrSharingConflict"}, {ErrRequestedIPNotInPool, "ErrRequestedIPNotInPool"},
		{ErrIPInUse, "ErrIPInUse"}, {ErrFamilyUnavailable, "ErrFamilyUnavailable"},
		{ErrUnknownPool, "ErrUnknownPool"}, {ErrInvalidRequest, "ErrInvalidRequest"}, {ErrInvalidPool, "ErrInvalidPool"},
	} {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	return "unexpected error: " + err.Error()
}

// mustAlloc allocates and fails the test on error.
func mustAlloc(t testing.TB, a *Allocator, r Request) Assignment {
	t.Helper()
	asg, err := a.Allocate(r)
	if err != nil {
		t.Fatalf("Allocate(%s): %v", r.Key, err)
	}
	return asg
}

// verify checks the allocator's internal invariants: every held IP lies in
// its pool and is not free there, holders of one IP share compatibly, the
// counters match, and the indexes agree with the holdings.
func (a *Allocator) verify() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	holders := map[netip.Addr][]string{}
	for key, h := range a.svcs {
		if key != h.req.Key {
			return fmt.Errorf("holding under %q has key %q", key, h.req.Key)
		}
		if len(h.ips) == 0 {
			return fmt.Errorf("%s holds no IPs but is recorded", key)
		}
		p := a.pools.byName[h.pool]
		if p == nil {
			return fmt.Errorf("%s holds IPs from missing pool %q", key, h.pool)
		}
		for _, ip := range h.ips {
			rs := p.set(familyOf(ip))
			if rs == nil || !rs.contains(ip) {
				return fmt.Errorf("%s holds %s, which is not in its pool %q", key, ip, h.pool)
			}
			if rs.isFree(ip) {
				return fmt.Errorf("%s holds %s, which pool %q lists as free", key, ip, h.pool)
			}
			holders[ip] = append(holders[ip], key)
		}
	}
	if len(holders) != len(a.ips) {
		return fmt.Errorf("%d held IPs, index has %d", len(holders), len(a.ips))
	}
	for ip, keys := range holders {
		slices.Sort(keys)
		u := a.ips[ip]
		if u == nil || !slices.Equal(u.holders, keys) {
			return fmt.Errorf("%s: holders %v, index %v", ip, keys, u)
		}
		for i, k1 := range keys {
			for _, k2 := range keys[i+1:] {
				r1, r2 := a.svcs[k1].req, a.svcs[k2].req
				if r1.SharingKey == "" || r1.SharingKey != r2.SharingKey || r1.BackendKey != r2.BackendKey {
					return fmt.Errorf("%s held by %s and %s without a compatible sharing key", ip, k1, k2)
				}
				for _, p := range r1.Ports {
					if slices.Contains(r2.Ports, p) {
						return fmt.Errorf("%s held by %s and %s, both on port %s", ip, k1, k2, p)
					}
				}
			}
		}
		if u.sharingKey != "" {
			if _, ok := a.shared[u.sharingKey][ip]; !ok {
				return fmt.Errorf("%s missing from sharing index %q", ip, u.sharingKey)
			}
		}
	}
	for ip, pool := range a.parked {
		if a.ips[ip] != nil {
			return fmt.Errorf("%s is both held and parked", ip)
		}
		if len(a.showers[ip]) == 0 {
			return fmt.Errorf("%s is parked but no status shows it", ip)
		}
		p := a.pools.byName[pool]
		if p == nil || p.set(familyOf(ip)).isFree(ip) {
			return fmt.Errorf("parked %s is free in pool %q", ip, pool)
		}
	}
	for ip, keys := range a.showers {
		if !slices.IsSorted(keys) || len(slices.Compact(slices.Clone(keys))) != len(keys) {
			return fmt.Errorf("the keys showing %s are not sorted and distinct: %v", ip, keys)
		}
		for _, k := range keys {
			if !slices.Contains(a.shown[k], ip) {
				return fmt.Errorf("the index says %s shows %s, but its status does not", k, ip)
			}
		}
	}
	for key, ips := range a.shown {
		for _, ip := range ips {
			if _, ok := slices.BinarySearch(a.showers[ip], key); !ok {
				return fmt.Errorf("%s shows %s but the index lacks it", key, ip)
			}
		}
	}
	for _, n := range a.pools.names {
		for _, rs := range a.pools.byName[n].sets {
			if rs == nil {
				continue
			}
			var n int64
			for ip, u := range a.ips {
				if a.pools.byName[u.pool].set(familyOf(ip)) == rs {
					n++
				}
			}
			for ip, pool := range a.parked {
				if a.pools.byName[pool].set(familyOf(ip)) == rs {
					n++
				}
			}
			if n != rs.used {
				return fmt.Errorf("pool counter %d, %d IPs held or parked", rs.used, n)
			}
		}
	}
	return nil
}

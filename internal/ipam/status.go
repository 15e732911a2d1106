package ipam

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// What Services' statuses show. An address leaves a Service in two steps:
// the allocator drops it from the Service's holding (Release, Allocate,
// SetPools), and the controller's write removes it from the Service's
// status.loadBalancer.ingress. Between the two, clients may still be sent
// to the address, so it must not go to another Service. The allocator
// therefore keeps, besides the holdings, the addresses every Service's
// status shows (SetStatus); an address that no Service holds but some
// status shows is "parked": out of its pool's free set, given to nobody
// but the Service whose status shows it, and returned to the free set
// when the last status showing it changes (a successful clearing write, or
// the Service's deletion).

// SetStatus records that Service key's status.loadBalancer.ingress now
// shows ips (nil or empty: nothing, also when the Service was deleted). The
// controller calls it when it imports a Service's status and after every
// successful status write. Addresses no longer shown by any Service and
// held by none return to their pool's free set; freed reports whether any
// did (pending Services may now get an address). Addresses outside every
// pool are recorded too (a later SetPools may bring them into one).
// O(k log n) for k addresses.
func (a *Allocator) SetStatus(key string, ips []netip.Addr) (freed bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	norm := make([]netip.Addr, 0, len(ips))
	for _, ip := range ips {
		if ip.IsValid() && !slices.Contains(norm, ip.Unmap()) {
			norm = append(norm, ip.Unmap())
		}
	}
	old := a.shown[key]
	if len(norm) == 0 {
		delete(a.shown, key)
	} else {
		a.shown[key] = norm
	}
	for _, ip := range norm {
		if slices.Contains(old, ip) {
			continue
		}
		if i, found := slices.BinarySearch(a.showers[ip], key); !found {
			a.showers[ip] = slices.Insert(a.showers[ip], i, key)
		}
		if a.ips[ip] == nil {
			a.park(ip)
		}
	}
	for _, ip := range old {
		if slices.Contains(norm, ip) {
			continue
		}
		if i, found := slices.BinarySearch(a.showers[ip], key); found {
			a.showers[ip] = slices.Delete(a.showers[ip], i, i+1)
		}
		if len(a.showers[ip]) > 0 {
			continue
		}
		delete(a.showers, ip)
		if a.unpark(ip) {
			freed = true
		}
	}
	return freed
}

// Shown returns the addresses Service key's status shows, as last given to
// SetStatus.
func (a *Allocator) Shown(key string) []netip.Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.shown[key])
}

// Parked returns every address held by no Service but still shown in a
// Service's status, with the keys of the Services showing it (sorted).
func (a *Allocator) Parked() map[netip.Addr][]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[netip.Addr][]string, len(a.parked))
	for ip := range a.parked {
		out[ip] = slices.Clone(a.showers[ip])
	}
	return out
}

// park takes ip, held by nobody and shown by some status, out of its pool's
// free set. An address in no pool, or not allocatable in it, is left alone.
func (a *Allocator) park(ip netip.Addr) {
	if _, ok := a.parked[ip]; ok {
		return
	}
	p := a.pools.poolOf(ip)
	if p == nil {
		return
	}
	rs := p.set(familyOf(ip))
	if rs == nil || !rs.take(ip) {
		return
	}
	a.parked[ip] = p.cfg.Name
}

// unpark returns a parked ip to its pool's free set.
func (a *Allocator) unpark(ip netip.Addr) bool {
	pool, ok := a.parked[ip]
	if !ok {
		return false
	}
	delete(a.parked, ip)
	a.pools.byName[pool].set(familyOf(ip)).put(ip)
	return true
}

// shownByOther returns a *ConflictError when ip is parked for Services
// other than r (their status still shows it), nil otherwise.
func (a *Allocator) shownByOther(ip netip.Addr, r *Request) error {
	if _, ok := a.parked[ip]; !ok {
		return nil
	}
	for _, k := range a.showers[ip] {
		if k != r.Key {
			return &ConflictError{Kind: ErrIPInUse, IP: ip, Other: k,
				Reason: "its status still shows the address; it is free once the write clearing it succeeds"}
		}
	}
	return nil
}

// parkedFor returns the parked addresses key's status shows.
func (a *Allocator) parkedFor(key string) []netip.Addr {
	var out []netip.Addr
	for _, ip := range a.shown[key] {
		if _, ok := a.parked[ip]; ok {
			out = append(out, ip)
		}
	}
	return out
}

// parkedNote explains, for an exhaustion message, the addresses of pool's
// family f that are parked: "" when none.
func (a *Allocator) parkedNote(pool string, f Family) string {
	var ips []netip.Addr
	for ip, p := range a.parked {
		if p == pool && familyOf(ip) == f {
			ips = append(ips, ip)
		}
	}
	if len(ips) == 0 {
		return ""
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	keys := a.showers[ips[0]]
	if len(ips) == 1 {
		return fmt.Sprintf(" (%s stays reserved for Service %s until the write clearing it from its status succeeds)", ips[0], strings.Join(keys, ", "))
	}
	return fmt.Sprintf(" (%d addresses stay reserved for Services whose status still shows them, %s for %s, until the writes clearing them succeed)", len(ips), ips[0], strings.Join(keys, ", "))
}

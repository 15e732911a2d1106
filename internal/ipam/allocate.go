package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Allocate gives Service req.Key its LoadBalancer IPs and returns them.
//
// If the Service already holds IPs (or holds none but its status still
// shows parked ones, see SetStatus) that are still valid for req (in a
// current pool, of a wanted family, in the annotated pool, equal to the
// requested IPs, selected by the pool's serviceAllocation, compatible with
// the other holders), they are returned unchanged: an allocation never
// moves a valid IP. Invalid ones are dropped. A PreferDualStack Service
// holding one IP gets the other family added from the same pool when that
// pool has one free; a RequireDualStack Service that cannot complete its
// pair is re-allocated.
//
// Otherwise the choice order is:
//  1. req.RequestedIPs: exactly these IPs. They must lie in one pool
//     (the annotated one, if set), respect avoidBuggyIPs and the pool's
//     serviceAllocation, and be free or compatibly shared.
//  2. req.PoolName: that pool, even with autoAssign false; its
//     serviceAllocation still applies.
//  3. Pools whose serviceAllocation selects the Service and that have
//     autoAssign, by priority (lower first, 0 last) then name; then
//     autoAssign pools without serviceAllocation, by name. Unlike MetalLB,
//     which walked a map, ties never depend on iteration order.
//
// Family policy: SingleStack takes Families[0]; RequireDualStack takes both
// families from one pool; PreferDualStack takes both from one pool if some
// pool can, else Families[0], else Families[1]. Within a pool each family
// takes, when req.SharingKey is set, the lowest compatible IP already held
// under that key, else the lowest free address in configured prefix order
// (avoidBuggyIPs addresses skipped). With a sharing key, pools where the
// Service can join an existing IP are preferred over taking a new one.
//
// On error the Service holds nothing afterwards; the error wraps one of the
// sentinel errors. Cost: O(C·(log n + k)) for C candidate pools, n free
// intervals per pool and k IPs held under req.SharingKey; independent of
// pool size and fill level.
func (a *Allocator) Allocate(req Request) (Assignment, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, err := normalize(req)
	if err != nil {
		a.unrecord(req.Key)
		return Assignment{}, fmt.Errorf("allocate %s: %w", req.Key, err)
	}
	var kept []netip.Addr
	var p *pool
	var conflict, dropped error
	if h := a.svcs[r.Key]; h != nil {
		kept, p, conflict, dropped = a.filter(h.ips, &r)
		a.unrecord(r.Key)
	} else if prev := a.parkedFor(r.Key); len(prev) > 0 {
		kept, p, conflict, dropped = a.filter(prev, &r)
	}
	if len(kept) > 0 {
		if ips, ok := a.complete(kept, p, &r); ok {
			a.record(&holding{req: r, ips: ips, pool: p.cfg.Name})
			return Assignment{IPs: slices.Clone(ips), Pool: p.cfg.Name, Dropped: errors.Join(conflict, dropped)}, nil
		}
	}
	ips, p, err := a.choose(&r)
	if err != nil {
		return Assignment{}, fmt.Errorf("allocate %s: %w", r.Key, err)
	}
	a.record(&holding{req: r, ips: ips, pool: p.cfg.Name})
	return Assignment{IPs: slices.Clone(ips), Pool: p.cfg.Name, Dropped: errors.Join(conflict, dropped)}, nil
}

// complete decides whether kept (valid IPs the Service held, from pool p)
// satisfies r's family policy, adding the missing family from p where the
// policy asks for it. ok=false means a fresh allocation is needed.
func (a *Allocator) complete(kept []netip.Addr, p *pool, r *Request) ([]netip.Addr, bool) {
	if len(kept) == 0 {
		return nil, false
	}
	if len(r.RequestedIPs) > 0 {
		return kept, len(kept) == len(r.RequestedIPs)
	}
	wanted := r.wanted()
	if len(kept) == len(wanted) {
		return kept, true
	}
	// One IP held, two families wanted (PreferDualStack or RequireDualStack).
	missing := wanted[0]
	if familyOf(kept[0]) == missing {
		missing = wanted[1]
	}
	if ip, ok := a.pickFamily(p, missing, r); ok {
		if missing == wanted[0] {
			return []netip.Addr{ip, kept[0]}, true
		}
		return []netip.Addr{kept[0], ip}, true
	}
	return kept, r.Policy != RequireDualStack
}

// choose picks IPs for r, which holds nothing, without changing state.
func (a *Allocator) choose(r *Request) ([]netip.Addr, *pool, error) {
	if len(r.RequestedIPs) > 0 {
		return a.chooseRequested(r)
	}
	var cands []*pool
	if r.PoolName != "" {
		p := a.pools.byName[r.PoolName]
		if p == nil {
			return nil, nil, newErr(ErrUnknownPool, fmt.Sprintf("address pool %q (metallb.io/address-pool) does not exist", r.PoolName))
		}
		if !p.matches(r) {
			return nil, nil, newErr(ErrNoPoolMatches, fmt.Sprintf("the serviceAllocation of address pool %q does not select Service %s", p.cfg.Name, r.Key))
		}
		cands = []*pool{p}
	} else {
		cands = a.pools.candidates(r)
		if len(cands) == 0 {
			return nil, nil, newErr(ErrNoPoolMatches, fmt.Sprintf("no address pool serves Service %s: none has autoAssign without serviceAllocation, and no serviceAllocation selects it", r.Key))
		}
	}
	targets := familyTargets(r)
	for _, fams := range targets {
		if r.SharingKey != "" {
			for _, p := range cands {
				if ips, ok := a.pick(p, fams, r, true); ok {
					return ips, p, nil
				}
			}
		}
		for _, p := range cands {
			if ips, ok := a.pick(p, fams, r, false); ok {
				return ips, p, nil
			}
		}
	}
	// Nothing fits: tell "no pool has the family" from "pools are full".
	var offering []*pool
	for _, p := range cands {
		for _, fams := range targets {
			if p.hasFamilies(fams) {
				offering = append(offering, p)
				break
			}
		}
	}
	if len(offering) == 0 {
		return nil, nil, newErr(ErrFamilyUnavailable, fmt.Sprintf("no candidate address pool (%s) offers %s", quoteNames(cands), describeTargets(targets)))
	}
	var full []string
	for _, p := range offering {
		for _, f := range r.wanted() {
			if p.set(f) != nil {
				if _, ok := a.pickFamily(p, f, r); !ok {
					full = append(full, fmt.Sprintf("address pool %q has no free %s address%s", p.cfg.Name, f, a.parkedNote(p.cfg.Name, f)))
				}
			}
		}
	}
	return nil, nil, newErr(ErrPoolExhausted, fmt.Sprintf("no %s address available: %s", describeTargets(targets), strings.Join(full, "; ")))
}

// chooseRequested checks r.RequestedIPs (already in family order).
func (a *Allocator) chooseRequested(r *Request) ([]netip.Addr, *pool, error) {
	var p *pool
	for _, ip := range r.RequestedIPs {
		ipPool, err := a.checkIP(ip, r)
		if err != nil {
			return nil, nil, err
		}
		if p != nil && ipPool != p {
			return nil, nil, newErr(ErrRequestedIPNotInPool, fmt.Sprintf("requested IPs %s (pool %q) and %s (pool %q) are in different address pools",
				r.RequestedIPs[0], p.cfg.Name, ip, ipPool.cfg.Name))
		}
		p = ipPool
		if err := a.shownByOther(ip, r); err != nil {
			return nil, nil, err
		}
		if u := a.ips[ip]; u != nil {
			if err := compat(ip, u, r); err != nil {
				return nil, nil, err
			}
		}
	}
	return slices.Clone(r.RequestedIPs), p, nil
}

// familyTargets lists the family sets to try, in order.
func familyTargets(r *Request) [][]Family {
	w := r.wanted()
	switch {
	case len(w) == 1:
		return [][]Family{w}
	case r.Policy == RequireDualStack:
		return [][]Family{w}
	default: // PreferDualStack with two families
		return [][]Family{w, w[:1], w[1:]}
	}
}

func describeTargets(targets [][]Family) string {
	first := targets[0]
	if len(first) == 2 {
		s := first[0].String() + " and " + first[1].String()
		if len(targets) > 1 {
			s += " (or either alone)"
		}
		return s
	}
	return first[0].String()
}

func (p *pool) hasFamilies(fams []Family) bool {
	for _, f := range fams {
		if p.set(f) == nil {
			return false
		}
	}
	return true
}

// pick selects one IP per family in fams from p. With join, it succeeds
// only if at least one family joins an IP already held under r.SharingKey.
func (a *Allocator) pick(p *pool, fams []Family, r *Request, join bool) ([]netip.Addr, bool) {
	var ips []netip.Addr
	joined := false
	for _, f := range fams {
		if p.set(f) == nil {
			return nil, false
		}
		if ip, ok := a.lowestShared(p, f, r); ok {
			ips = append(ips, ip)
			joined = true
			continue
		}
		ip, ok := p.set(f).lowest()
		if !ok {
			return nil, false
		}
		ips = append(ips, ip)
	}
	if join && !joined {
		return nil, false
	}
	return ips, true
}

// pickFamily selects one IP of family f from p: a compatible shared IP
// first, else the lowest free address.
func (a *Allocator) pickFamily(p *pool, f Family, r *Request) (netip.Addr, bool) {
	ips, ok := a.pick(p, []Family{f}, r, false)
	if !ok {
		return netip.Addr{}, false
	}
	return ips[0], true
}

// lowestShared returns the IP of family f in p, held under r.SharingKey and
// compatible with r, that comes first in allocation order. O(k log p) for
// k IPs held under the key.
func (a *Allocator) lowestShared(p *pool, f Family, r *Request) (netip.Addr, bool) {
	if r.SharingKey == "" {
		return netip.Addr{}, false
	}
	rs := p.set(f)
	var best netip.Addr
	var bestPos span
	for ip := range a.shared[r.SharingKey] {
		u := a.ips[ip]
		if familyOf(ip) != f || u.pool != p.cfg.Name || compat(ip, u, r) != nil {
			continue
		}
		pos, ok := rs.position(ip)
		if !ok {
			continue
		}
		if !best.IsValid() || spanLess(pos, bestPos) {
			best, bestPos = ip, pos
		}
	}
	return best, best.IsValid()
}

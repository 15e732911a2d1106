package ipam

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"slices"
	"strings"
	"sync"
)

// Allocator assigns LoadBalancer IPs to Services from pools. It is safe for
// concurrent use; calls are serialised by a mutex.
//
// Its state is the pool list plus, per Service, the held IPs and the last
// Request. Every decision is a function of that state alone (no cursor, no
// history, no map iteration order), so two allocators fed the same calls
// return the same results, and an allocator rebuilt from the Assignments of
// another (Import) continues exactly as the original would.
type Allocator struct {
	mu     sync.Mutex
	pools  *poolIndex
	svcs   map[string]*holding                // Service key -> held IPs
	ips    map[netip.Addr]*ipUse              // held address -> holders
	shared map[string]map[netip.Addr]struct{} // sharing key -> addresses held under it
	// What statuses show (status.go): Service key -> addresses, address ->
	// keys, and the addresses held by nobody but still shown (taken out
	// of their pool's free set) -> pool name.
	shown   map[string][]netip.Addr
	showers map[netip.Addr][]string // sorted keys, most often one
	parked  map[netip.Addr]string
}

// holding is what one Service holds.
type holding struct {
	req  Request
	ips  []netip.Addr
	pool string
}

// New returns an Allocator with no pools and no assignments.
func New() *Allocator {
	idx, _ := buildPools(nil)
	return &Allocator{
		pools:   idx,
		svcs:    map[string]*holding{},
		ips:     map[netip.Addr]*ipUse{},
		shared:  map[string]map[netip.Addr]struct{}{},
		shown:   map[string][]netip.Addr{},
		showers: map[netip.Addr][]string{},
		parked:  map[netip.Addr]string{},
	}
}

// SetPools replaces the pool list and re-validates every assignment against
// it. Assignments that remain valid are kept unchanged. IPs that are no
// longer valid (pool removed or shrunk, avoidBuggyIPs turned on,
// serviceAllocation no longer selecting the Service, annotation pool gone)
// are released (and stay parked while a status shows them, see SetStatus);
// the returned keys (sorted) name every Service whose
// Assignment changed (IPs dropped, or their pool renamed), which the
// controller must re-address with Allocate.
//
// pools must have unique non-empty names and non-overlapping prefixes;
// otherwise SetPools returns an error wrapping ErrInvalidPool and keeps the
// previous pools. Cost: O(A log A + H log n) for A prefixes and H held IPs.
func (a *Allocator) SetPools(pools []Pool) ([]string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	idx, err := buildPools(pools)
	if err != nil {
		return nil, fmt.Errorf("set pools: %w", err)
	}
	old := a.svcs
	a.pools = idx
	a.svcs = map[string]*holding{}
	a.ips = map[netip.Addr]*ipUse{}
	a.shared = map[string]map[netip.Addr]struct{}{}
	a.parked = map[netip.Addr]string{}
	var changed []string
	for _, key := range slices.Sorted(maps.Keys(old)) {
		h := old[key]
		kept, p, _, _ := a.filter(h.ips, &h.req)
		if len(kept) > 0 {
			a.record(&holding{req: h.req, ips: kept, pool: p.cfg.Name})
		}
		if !slices.Equal(kept, h.ips) || (p != nil && p.cfg.Name != h.pool) {
			changed = append(changed, key)
		}
	}
	// Addresses still shown by a status but held by nobody stay out of the
	// new free sets too.
	for _, ip := range slices.SortedFunc(maps.Keys(a.showers), netip.Addr.Compare) {
		if a.ips[ip] == nil {
			a.park(ip)
		}
	}
	return changed, nil
}

// Import records that Service key already holds ips (from its
// status.loadBalancer.ingress), without allocating anything. The controller
// imports every existing Service before its first Allocate, so existing
// IPs are never handed to another Service (metallb#1774, #2443).
//
// If one of the IPs is held by an incompatible Service, Import records
// nothing and returns a *ConflictError (ErrIPInUse or ErrSharingConflict);
// the IP is never taken away silently. IPs that req may not hold (outside
// every pool, another family, not the annotated or requested pool, a pool
// whose serviceAllocation does not select it) are not recorded: the
// others are, and the error explains the dropped ones; the next Allocate
// gives the Service new IPs. Import checks neither family-policy
// completeness (a RequireDualStack Service may import one IP; Allocate
// completes or replaces it) nor autoAssign. An earlier holding of key is
// dropped first, also when Import fails. Cost: O(log n) per IP.
func (a *Allocator) Import(key string, ips []netip.Addr, req Request) (Assignment, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if req.Key == "" {
		req.Key = key
	}
	r, err := normalize(req)
	if err == nil && r.Key != key {
		err = newErr(ErrInvalidRequest, fmt.Sprintf("request key %q differs from %q", r.Key, key))
	}
	if err != nil {
		return Assignment{}, fmt.Errorf("import %s: %w", key, err)
	}
	var norm []netip.Addr
	seen := [2]bool{}
	for _, ip := range ips {
		if !ip.IsValid() || ip.Zone() != "" {
			return Assignment{}, fmt.Errorf("import %s: %w", key, newErr(ErrInvalidRequest, fmt.Sprintf("invalid IP %q", ip.String())))
		}
		ip = ip.Unmap()
		if seen[familyOf(ip)] {
			return Assignment{}, fmt.Errorf("import %s: %w", key, newErr(ErrInvalidRequest, fmt.Sprintf("two %s addresses in %v", familyOf(ip), ips)))
		}
		seen[familyOf(ip)] = true
		norm = append(norm, ip)
	}
	a.unrecord(key)
	kept, p, conflict, dropped := a.filter(norm, &r)
	if conflict != nil {
		return Assignment{}, fmt.Errorf("import %s: %w", key, conflict)
	}
	var asg Assignment
	if len(kept) > 0 {
		a.record(&holding{req: r, ips: kept, pool: p.cfg.Name})
		asg = Assignment{IPs: slices.Clone(kept), Pool: p.cfg.Name}
	}
	if dropped != nil {
		return asg, fmt.Errorf("import %s: %w", key, dropped)
	}
	return asg, nil
}

// Release frees every IP held by Service key (shared IPs stay held by
// their other Services; IPs key's status still shows stay parked until
// SetStatus says otherwise). Releasing an unknown key is a no-op. O(log n)
// per IP.
func (a *Allocator) Release(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.unrecord(key)
}

// Lookup returns the Assignment of Service key.
func (a *Allocator) Lookup(key string) (Assignment, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	h, ok := a.svcs[key]
	if !ok {
		return Assignment{}, false
	}
	return Assignment{IPs: slices.Clone(h.ips), Pool: h.pool}, true
}

// Assignments returns a copy of every Service's Assignment, by key.
func (a *Allocator) Assignments() map[string]Assignment {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]Assignment, len(a.svcs))
	for k, h := range a.svcs {
		out[k] = Assignment{IPs: slices.Clone(h.ips), Pool: h.pool}
	}
	return out
}

// Stats returns the counters of every pool, sorted by pool name. O(P).
func (a *Allocator) Stats() []PoolStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]PoolStats, 0, len(a.pools.names))
	for _, n := range a.pools.names {
		p := a.pools.byName[n]
		s := PoolStats{Pool: n}
		if rs := p.set(IPv4); rs != nil {
			s.TotalIPv4, s.AssignedIPv4 = rs.total, rs.used
			s.AvailableIPv4 = available(rs)
		}
		if rs := p.set(IPv6); rs != nil {
			s.TotalIPv6, s.AssignedIPv6 = rs.total, rs.used
			s.AvailableIPv6 = available(rs)
		}
		out = append(out, s)
	}
	return out
}

func available(rs *rangeSet) int64 {
	if rs.total == math.MaxInt64 {
		return math.MaxInt64
	}
	return rs.total - rs.used
}

// normalize validates r and returns the Request the allocator keeps:
// requested IPs unmapped and ordered by Families (a new slice); its other
// slices and maps are r's own, not copies (Request: the caller does not
// modify them afterwards), so Services of one namespace share its label
// map. It returns an error wrapping ErrInvalidRequest.
func normalize(r Request) (Request, error) {
	bad := func(format string, args ...any) (Request, error) {
		return Request{}, newErr(ErrInvalidRequest, fmt.Sprintf(format, args...))
	}
	if r.Key == "" {
		return bad("empty Service key")
	}
	switch len(r.Families) {
	case 1:
	case 2:
		if r.Families[0] == r.Families[1] {
			return bad("ipFamilies lists %s twice", r.Families[0])
		}
	default:
		return bad("ipFamilies must list one or two families, got %d", len(r.Families))
	}
	for _, f := range r.Families {
		if f != IPv4 && f != IPv6 {
			return bad("unknown IP family %s", f)
		}
	}
	switch r.Policy {
	case SingleStack, PreferDualStack:
	case RequireDualStack:
		if len(r.Families) != 2 {
			return bad("ipFamilyPolicy RequireDualStack needs two ipFamilies, got %v", r.Families)
		}
	default:
		return bad("unknown ipFamilyPolicy %s", r.Policy)
	}
	out := r
	wanted := out.wanted()
	var byFam [2]netip.Addr
	for _, ip := range r.RequestedIPs {
		if !ip.IsValid() || ip.Zone() != "" {
			return bad("invalid requested IP %q", ip.String())
		}
		ip = ip.Unmap()
		f := familyOf(ip)
		if byFam[f].IsValid() {
			return bad("requested IPs %s and %s are both %s; at most one IP per family", byFam[f], ip, f)
		}
		if !slices.Contains(wanted, f) {
			return bad("requested IP %s is %s, but the Service (%s, ipFamilies %v) has no such family", ip, f, r.Policy, r.Families)
		}
		byFam[f] = ip
	}
	out.RequestedIPs = nil
	if len(r.RequestedIPs) > 0 {
		for _, f := range wanted {
			if byFam[f].IsValid() {
				out.RequestedIPs = append(out.RequestedIPs, byFam[f])
			}
		}
		if r.Policy == RequireDualStack && len(out.RequestedIPs) != 2 {
			return bad("ipFamilyPolicy RequireDualStack needs one requested IP per family, got %v", r.RequestedIPs)
		}
	}
	return out, nil
}

// wanted returns the families r may hold, primary first.
func (r *Request) wanted() []Family {
	if r.Policy == SingleStack || len(r.Families) == 1 {
		return r.Families[:1]
	}
	return r.Families[:2]
}

// checkIP returns the pool from which r may hold ip, ignoring other holders.
func (a *Allocator) checkIP(ip netip.Addr, r *Request) (*pool, error) {
	p := a.pools.poolOf(ip)
	if p == nil {
		return nil, newErr(ErrRequestedIPNotInPool, fmt.Sprintf("%s is not in any address pool", ip))
	}
	if !p.set(familyOf(ip)).contains(ip) {
		return nil, newErr(ErrRequestedIPNotInPool, fmt.Sprintf("%s ends in .0 or .255 and address pool %q sets avoidBuggyIPs", ip, p.cfg.Name))
	}
	if r.PoolName != "" && p.cfg.Name != r.PoolName {
		return nil, newErr(ErrRequestedIPNotInPool, fmt.Sprintf("%s is in address pool %q, not in the requested pool %q", ip, p.cfg.Name, r.PoolName))
	}
	if !p.matches(r) {
		return nil, newErr(ErrNoPoolMatches, fmt.Sprintf("%s is in address pool %q, whose serviceAllocation does not select Service %s", ip, p.cfg.Name, r.Key))
	}
	return p, nil
}

// filter returns the subset of ips (at most one per family) that r may hold
// in the current state, in r's family order, and their pool. An IP held by
// an incompatible Service is skipped and reported as conflict (the first
// one); other skipped IPs are explained in dropped.
func (a *Allocator) filter(ips []netip.Addr, r *Request) (kept []netip.Addr, p *pool, conflict, dropped error) {
	var drops []error
	if len(r.RequestedIPs) > 0 && !sameSet(ips, r.RequestedIPs) {
		return nil, nil, nil, newErr(ErrRequestedIPNotInPool, fmt.Sprintf("%v differ from the requested IPs %v", ips, r.RequestedIPs))
	}
	wanted := r.wanted()
	for _, ip := range ips {
		if !slices.Contains(wanted, familyOf(ip)) {
			drops = append(drops, newErr(ErrFamilyUnavailable, fmt.Sprintf("%s is %s, which the Service (%s, ipFamilies %v) does not use", ip, familyOf(ip), r.Policy, r.Families)))
		}
	}
	for _, f := range wanted {
		i := slices.IndexFunc(ips, func(ip netip.Addr) bool { return familyOf(ip) == f })
		if i < 0 {
			continue
		}
		ip := ips[i]
		ipPool, err := a.checkIP(ip, r)
		if err != nil {
			drops = append(drops, err)
			continue
		}
		if p != nil && ipPool != p {
			drops = append(drops, newErr(ErrRequestedIPNotInPool, fmt.Sprintf("%s is in address pool %q but %s is in %q; all IPs of a Service come from one pool", ip, ipPool.cfg.Name, kept[0], p.cfg.Name)))
			continue
		}
		err = a.shownByOther(ip, r)
		if u := a.ips[ip]; u != nil {
			err = compat(ip, u, r)
		}
		if err != nil {
			if conflict == nil {
				conflict = err
			}
			continue
		}
		p = ipPool
		kept = append(kept, ip)
	}
	return kept, p, conflict, errors.Join(drops...)
}

func sameSet(a, b []netip.Addr) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// record makes h current. Every IP of h must be free in h's pool or held
// compatibly (the caller checked). O(log n) per IP.
func (a *Allocator) record(h *holding) {
	a.svcs[h.req.Key] = h
	for _, ip := range h.ips {
		u := a.ips[ip]
		if u == nil {
			if _, parked := a.parked[ip]; parked {
				delete(a.parked, ip) // already out of the free set
			} else if !a.pools.byName[h.pool].set(familyOf(ip)).take(ip) {
				panic(fmt.Sprintf("ipam: internal error: %s is neither free nor held in pool %q", ip, h.pool))
			}
			u = &ipUse{pool: h.pool}
			a.ips[ip] = u
			if h.req.SharingKey != "" {
				m := a.shared[h.req.SharingKey]
				if m == nil {
					m = map[netip.Addr]struct{}{}
					a.shared[h.req.SharingKey] = m
				}
				m[ip] = struct{}{}
			}
		}
		u.addHolder(&h.req)
	}
}

// unrecord drops key's holding, freeing IPs no other Service holds.
func (a *Allocator) unrecord(key string) {
	h := a.svcs[key]
	if h == nil {
		return
	}
	delete(a.svcs, key)
	for _, ip := range h.ips {
		u := a.ips[ip]
		u.removeHolder(&h.req)
		if len(u.holders) > 0 {
			continue
		}
		if len(a.showers[ip]) > 0 {
			a.parked[ip] = u.pool // a status still shows it: not free yet
		} else {
			a.pools.byName[u.pool].set(familyOf(ip)).put(ip)
		}
		delete(a.ips, ip)
		if u.sharingKey != "" {
			delete(a.shared[u.sharingKey], ip)
			if len(a.shared[u.sharingKey]) == 0 {
				delete(a.shared, u.sharingKey)
			}
		}
	}
}

// quoteNames renders pool names for messages: "a", "b".
func quoteNames(ps []*pool) string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", p.cfg.Name)
	}
	return b.String()
}

// Candidates returns the names of the pools an automatic allocation for req
// tries, in the order Allocate tries them (step 3 of Allocate: pools whose
// serviceAllocation selects req by priority then name, then autoAssign pools
// without serviceAllocation by name). Requested IPs and the address-pool
// annotation are not looked at. For explanations (kubectl herald why).
func (a *Allocator) Candidates(req Request) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, p := range a.pools.candidates(&req) {
		out = append(out, p.cfg.Name)
	}
	return out
}

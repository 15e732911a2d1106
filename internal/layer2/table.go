package layer2

import (
	"net/netip"
	"slices"
	"sync"
)

// table is the refcounted ownership table: which owner announces which IP on
// which interfaces. It is safe for concurrent use; responders query it for
// every received request, so a withdrawal takes effect for the next packet.
type table struct {
	mu sync.RWMutex
	// ips maps an announced IP to its owners and each owner's interface list
	// (nil: all interfaces).
	ips map[netip.Addr]map[string][]string
	// byOwner indexes the IPs of each owner.
	byOwner map[string]map[netip.Addr]struct{}
	// dirty collects IPs changed since the last takeDirty.
	dirty map[netip.Addr]struct{}
}

func newTable() *table {
	return &table{
		ips:     map[netip.Addr]map[string][]string{},
		byOwner: map[string]map[netip.Addr]struct{}{},
		dirty:   map[netip.Addr]struct{}{},
	}
}

// normalize returns the canonical form of ip (IPv4-mapped IPv6 unmapped, zone
// dropped) and whether it can be announced at all.
func normalize(ip netip.Addr) (netip.Addr, bool) {
	ip = ip.Unmap().WithZone("")
	if !ip.IsValid() || ip.IsUnspecified() || ip.IsMulticast() || ip.IsLoopback() {
		return ip, false
	}
	return ip, true
}

func cleanInterfaces(in []string) []string {
	if len(in) == 0 {
		return nil
	}
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}

// set makes owner announce ip on ifaces and reports whether anything changed.
// Callers hold t.mu.
func (t *table) setLocked(owner string, ip netip.Addr, ifaces []string) bool {
	ifaces = cleanInterfaces(ifaces)
	owners := t.ips[ip]
	if owners == nil {
		owners = map[string][]string{}
		t.ips[ip] = owners
	}
	old, had := owners[owner]
	if had && slices.Equal(old, ifaces) {
		return false
	}
	owners[owner] = ifaces
	if t.byOwner[owner] == nil {
		t.byOwner[owner] = map[netip.Addr]struct{}{}
	}
	t.byOwner[owner][ip] = struct{}{}
	t.dirty[ip] = struct{}{}
	return true
}

// removeLocked drops owner's claim on ip and reports whether it had one.
func (t *table) removeLocked(owner string, ip netip.Addr) bool {
	owners := t.ips[ip]
	if _, ok := owners[owner]; !ok {
		return false
	}
	delete(owners, owner)
	if len(owners) == 0 {
		delete(t.ips, ip)
	}
	if ips := t.byOwner[owner]; ips != nil {
		delete(ips, ip)
		if len(ips) == 0 {
			delete(t.byOwner, owner)
		}
	}
	t.dirty[ip] = struct{}{}
	return true
}

// setOwner replaces all of owner's announcements with targets (targets with
// the same IP are merged: union of interfaces, empty list wins).
func (t *table) setOwner(owner string, targets map[netip.Addr][]string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	changed := false
	for ip := range t.byOwner[owner] {
		if _, keep := targets[ip]; !keep {
			changed = t.removeLocked(owner, ip) || changed
		}
	}
	for ip, ifaces := range targets {
		changed = t.setLocked(owner, ip, ifaces) || changed
	}
	return changed
}

// lookup reports whether ip is announced at all, and whether it is announced
// on the interface named ifname.
func (t *table) lookup(ip netip.Addr, ifname string) (announced, onIface bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	owners, ok := t.ips[ip]
	if !ok {
		return false, false
	}
	for _, ifaces := range owners {
		if ifaces == nil {
			return true, true
		}
		if _, found := slices.BinarySearch(ifaces, ifname); found {
			return true, true
		}
	}
	return true, false
}

// owners returns the sorted owners of ip.
func (t *table) owners(ip netip.Addr) []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]string, 0, len(t.ips[ip]))
	for o := range t.ips[ip] {
		out = append(out, o)
	}
	slices.Sort(out)
	return out
}

// all returns every announced IP.
func (t *table) all() []netip.Addr {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]netip.Addr, 0, len(t.ips))
	for ip := range t.ips {
		out = append(out, ip)
	}
	return out
}

// takeDirty returns and clears the IPs changed since the last call.
func (t *table) takeDirty() []netip.Addr {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]netip.Addr, 0, len(t.dirty))
	for ip := range t.dirty {
		out = append(out, ip)
	}
	clear(t.dirty)
	return out
}

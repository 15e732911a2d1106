package ipam

import (
	"fmt"
	"net/netip"
	"slices"
)

// ipUse records the Services holding one address. All holders have the same
// sharing key and backend key (non-empty sharing key when there are several)
// and pairwise disjoint ports.
type ipUse struct {
	pool       string
	holders    []string // sorted Service keys
	sharingKey string
	backendKey string
	ports      []portUse // one per port in use, few: a slice is a fraction of a map's size
}

// portUse is one port of an address and the Service using it.
type portUse struct {
	port   Port
	holder string
}

// portHolder returns the Service using port p of u.
func (u *ipUse) portHolder(p Port) (string, bool) {
	for _, pu := range u.ports {
		if pu.port == p {
			return pu.holder, true
		}
	}
	return "", false
}

// compat checks whether r may hold the address described by u next to its
// current holders (r itself excluded). The rules are MetalLB's: both sides
// set the same non-empty sharing key, have equal backend keys (same
// selector under externalTrafficPolicy Local, else both empty), and use no
// common protocol/port. It returns a *ConflictError naming one other
// holder (the lowest key, for stable messages).
func compat(ip netip.Addr, u *ipUse, r *Request) error {
	other := ""
	for _, h := range u.holders {
		if h != r.Key {
			other = h
			break
		}
	}
	if other == "" {
		return nil
	}
	conflict := func(kind error, format string, args ...any) error {
		return &ConflictError{Kind: kind, IP: ip, Other: other, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case u.sharingKey == "":
		return conflict(ErrIPInUse, "it does not allow sharing (no allow-shared-ip annotation)")
	case r.SharingKey == "":
		return conflict(ErrIPInUse, "this Service does not allow sharing (no allow-shared-ip annotation)")
	case u.sharingKey != r.SharingKey:
		return conflict(ErrSharingConflict, "sharing key %q differs from this Service's %q", u.sharingKey, r.SharingKey)
	case u.backendKey != r.BackendKey:
		return conflict(ErrSharingConflict, "backend key %q differs from this Service's %q (Services sharing an IP must both use externalTrafficPolicy Cluster or select the same Pods)",
			u.backendKey, r.BackendKey)
	}
	for _, p := range r.Ports {
		if h, ok := u.portHolder(p); ok && h != r.Key {
			return &ConflictError{Kind: ErrSharingConflict, IP: ip, Other: h, Reason: fmt.Sprintf("port %s is already used there", p)}
		}
	}
	return nil
}

func (u *ipUse) addHolder(r *Request) {
	i, found := slices.BinarySearch(u.holders, r.Key)
	if !found {
		u.holders = slices.Insert(u.holders, i, r.Key)
	}
	u.sharingKey = r.SharingKey
	u.backendKey = r.BackendKey
	for _, p := range r.Ports {
		i := slices.IndexFunc(u.ports, func(pu portUse) bool { return pu.port == p })
		if i < 0 {
			u.ports = append(u.ports, portUse{port: p, holder: r.Key})
		} else {
			u.ports[i].holder = r.Key
		}
	}
}

func (u *ipUse) removeHolder(r *Request) {
	if i, found := slices.BinarySearch(u.holders, r.Key); found {
		u.holders = slices.Delete(u.holders, i, i+1)
	}
	u.ports = slices.DeleteFunc(u.ports, func(pu portUse) bool {
		return pu.holder == r.Key && slices.Contains(r.Ports, pu.port)
	})
}

package ipam

import (
	"errors"
	"net/netip"
)

// Sentinel errors. Every error the allocator returns wraps exactly one of
// them (test with errors.Is) and carries a human-readable message naming the
// Service, pool, address or other Service involved, fit for a Service event.
var (
	// ErrNoPoolMatches: no pool may serve the Service (no autoAssign pool
	// without serviceAllocation, and no serviceAllocation selecting it), or
	// the named or requested pool's serviceAllocation does not select it.
	ErrNoPoolMatches = errors.New("no address pool matches the Service")
	// ErrPoolExhausted: every candidate pool offering the needed families is
	// full. The message names the pools.
	ErrPoolExhausted = errors.New("address pool exhausted")
	// ErrSharingConflict: an address is held by a Service with the same
	// sharing key but overlapping ports or a different backend key, or with
	// a different sharing key. See ConflictError for the other Service.
	ErrSharingConflict = errors.New("IP sharing conflict")
	// ErrRequestedIPNotInPool: a requested or imported IP lies in no pool,
	// in a pool other than the one named, or is a .0/.255 address of an
	// avoidBuggyIPs pool.
	ErrRequestedIPNotInPool = errors.New("requested IP is not in an allowed address pool")
	// ErrIPInUse: an address is held by a Service that does not share it
	// (either side has no sharing key). See ConflictError.
	ErrIPInUse = errors.New("IP already in use")
	// ErrFamilyUnavailable: no candidate pool offers the IP family (or, for
	// RequireDualStack, both families).
	ErrFamilyUnavailable = errors.New("no address pool offers the IP family")
	// ErrUnknownPool: the address-pool annotation names no pool.
	ErrUnknownPool = errors.New("unknown address pool")
	// ErrInvalidRequest: the request itself is inconsistent (two IPs of one
	// family, a requested IP of a family the Service does not have,
	// RequireDualStack with one family, ...).
	ErrInvalidRequest = errors.New("invalid allocation request")
	// ErrInvalidPool: SetPools got an inconsistent pool list (duplicate or
	// empty name, invalid or overlapping prefixes).
	ErrInvalidPool = errors.New("invalid address pool")
)

// detailError is an error whose message is msg and which wraps kind.
type detailError struct {
	kind error
	msg  string
}

func (e *detailError) Error() string { return e.msg }
func (e *detailError) Unwrap() error { return e.kind }

func newErr(kind error, msg string) error { return &detailError{kind: kind, msg: msg} }

// ConflictError reports that an address cannot be used because another
// Service holds it. It wraps ErrIPInUse or ErrSharingConflict.
type ConflictError struct {
	// Kind is ErrIPInUse or ErrSharingConflict.
	Kind error
	// IP is the contested address.
	IP netip.Addr
	// Other is the key ("namespace/name") of the Service holding IP.
	Other string
	// Reason says why the two Services cannot share IP.
	Reason string
}

func (e *ConflictError) Error() string {
	return e.IP.String() + " is held by Service " + e.Other + ": " + e.Reason
}

func (e *ConflictError) Unwrap() error { return e.Kind }

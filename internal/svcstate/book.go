// Package svcstate is the controller's memory of each Service between
// reconciles and the per-Service decisions made from it, apart from the
// addresses themselves (those are internal/ipam's): which Services wait for
// an address (pending) and which a configuration change took addresses from
// (reassess), the order a retry pass re-allocates them in, an import
// conflict and when it is re-checked, why a Service's addresses were
// cleared, which status write failure is new, and since when a Service
// waits. It is pure (no Kubernetes client, no clock of its own: times are
// passed in) so these decisions are table-tested; internal/k8s/allocation
// drives it from its workers.
//
// Services are named by key, "namespace/name". A Book is safe for
// concurrent use; the allocation loop hands one key to one worker at a
// time, so the methods about one key are not interleaved by it.
package svcstate

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/herald-lb/herald/internal/ipam"
)

// Book is the per-Service state. The zero value is not usable: use New.
type Book struct {
	mu   sync.Mutex
	svcs map[string]*entry
	// pending: keys waiting for an address (retried on every pass).
	pending map[string]bool
	// reassess: keys a configuration change took addresses from; the
	// next retry pass re-allocates them before the pending ones.
	reassess map[string]bool
	// since: when a key started waiting (created, or its request changed),
	// for the allocation latency.
	since map[string]time.Time
}

// entry is what is remembered about one Service.
type entry struct {
	// seen: imported at start or reconciled since; its status addresses
	// are not imported again from a possibly stale cache.
	seen bool
	// fp is the request fingerprint of the last reconcile.
	fp string
	// writeErr is the last failed status write's message.
	writeErr string
	// conflict is the ipam.ConflictError the Service's existing address
	// met on import, conflictFP the request fingerprint it had then.
	conflict   error
	conflictFP string
	// clearReason explains why the Service's addresses were taken back.
	clearReason string
}

// New returns an empty Book.
func New() *Book {
	return &Book{
		svcs:     map[string]*entry{},
		pending:  map[string]bool{},
		reassess: map[string]bool{},
		since:    map[string]time.Time{},
	}
}

func (b *Book) entryLocked(key string) *entry {
	e := b.svcs[key]
	if e == nil {
		e = &entry{}
		b.svcs[key] = e
	}
	return e
}

// See records that key is being decided with request fingerprint fp and
// returns whether it had been seen before and the fingerprint of its
// previous decision ("" when none). A key not seen before is decided as on
// first sight: the addresses its status shows are imported.
func (b *Book) See(key, fp string) (wasSeen bool, prevFP string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.entryLocked(key)
	wasSeen, prevFP = e.seen, e.fp
	e.seen, e.fp = true, fp
	return wasSeen, prevFP
}

// Unsee makes key's next decision one on first sight again (after a status
// write lost a resourceVersion conflict); the rest of its state stays.
func (b *Book) Unsee(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.entryLocked(key).seen = false
}

// NoteImport records the outcome of importing key's existing addresses
// with request fingerprint fp (ipam.Allocator.Import). An
// *ipam.ConflictError (another Service holds the address) is kept as key's
// conflict and conflict is true; another error becomes key's clear reason
// ("the existing address could not be kept: ..."); nil changes nothing.
func (b *Book) NoteImport(key, fp string, err error) (conflict bool) {
	if err == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.entryLocked(key)
	var ce *ipam.ConflictError
	if errors.As(err, &ce) {
		e.conflict, e.conflictFP = err, fp
		return true
	}
	e.clearReason = "the existing address could not be kept: " + err.Error()
	return false
}

// CheckConflict decides what to do with key's import conflict now that it
// asks for request fp. recheck is true when the conflict stands for the
// same request: the caller imports the status addresses again and either
// reports the conflict again (it stays) or calls ResolveConflict. A conflict
// recorded for another request is dropped (the new request is allocated
// afresh) and recheck is false, as it is without a conflict.
func (b *Book) CheckConflict(key, fp string) (recheck bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.svcs[key]
	if e == nil || e.conflict == nil {
		return false
	}
	if e.conflictFP == fp {
		return true
	}
	e.conflict, e.conflictFP = nil, ""
	return false
}

// ResolveConflict drops key's import conflict (its address became free).
func (b *Book) ResolveConflict(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.svcs[key]; e != nil {
		e.conflict, e.conflictFP = nil, ""
	}
}

// MayPreallocate reports whether a retry pass may allocate for key ahead of
// its reconcile: only for a Service already known (seen or imported) and
// not in an import conflict (that one keeps what its status shows until
// its request changes or the other Service lets the address go).
func (b *Book) MayPreallocate(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.svcs[key]
	return e != nil && e.conflict == nil
}

// SetPending records whether key waits for an address and returns the
// number of pending keys. wake is true when key becomes pending: its
// decision may have read the pools before a configuration change whose own
// retry pass ran before key was pending, so a retry pass must follow. A
// key that stays pending wakes nothing, so retry passes do not feed
// themselves.
func (b *Book) SetPending(key string, p bool) (wake bool, pending int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	was := b.pending[key]
	if p {
		b.pending[key] = true
	} else {
		delete(b.pending, key)
	}
	return p && !was, len(b.pending)
}

// Reassess marks keys, whose addresses a configuration change took back, to
// be re-allocated first by the next retry pass, with reason as the reason
// their clear event gives.
func (b *Book) Reassess(keys []string, reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range keys {
		b.entryLocked(k).clearReason = reason
		b.reassess[k] = true
	}
}

// RetryOrder returns the keys a retry pass re-allocates, one at a time, in
// this order: the reassessed keys in key order, then the other pending keys
// in key order; the order is a function of the state alone, so the winner
// of a freed address does not depend on worker scheduling (MetalLB issue
// 8). The reassess marks are consumed; pending keys stay pending until
// their reconcile says otherwise.
func (b *Book) RetryOrder() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	first := slices.Sorted(maps.Keys(b.reassess))
	clear(b.reassess)
	var then []string
	for k := range b.pending {
		if !slices.Contains(first, k) {
			then = append(then, k)
		}
	}
	slices.Sort(then)
	return append(first, then...)
}

// TakeClearReason returns and forgets the reason recorded for clearing
// key's addresses ("" when none).
func (b *Book) TakeClearReason(key string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.svcs[key]
	if e == nil {
		return ""
	}
	r := e.clearReason
	e.clearReason = ""
	return r
}

// ClearReason is the text a clear event gives for addresses a decision
// dropped from a Service's status: the recorded reason (TakeClearReason)
// when there is one, else the allocation error's text, else why the
// allocator did not keep them (dropped, ipam.Assignment.Dropped: e.g. a
// namespace relabel that the pool's serviceAllocation no longer selects),
// else "the Service's request changed" when reqChanged, else that the
// address is no longer valid for the Service. The text is one line: the
// lines of a joined error (one per address, errors.Join) are joined with
// "; ", so kubectl's event tables stay one row per event.
func ClearReason(recorded string, allocErr, dropped error, reqChanged bool) string {
	switch {
	case recorded != "":
		return oneLine(recorded)
	case allocErr != nil:
		return oneLine(allocErr.Error())
	case dropped != nil:
		return oneLine(dropped.Error())
	case reqChanged:
		return "the Service's request changed"
	default:
		return "the address is no longer valid for the Service"
	}
}

// MarkWaiting records that key started waiting for an address at now
// (created without addresses, or its request changed), unless it already
// waits.
func (b *Book) MarkWaiting(key string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.since[key]; !ok {
		b.since[key] = now
	}
}

// Waiting returns since when key waits (ok false when it does not); done
// ends the wait (the Service got its addresses).
func (b *Book) Waiting(key string, done bool) (since time.Time, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	since, ok = b.since[key]
	if done {
		delete(b.since, key)
	}
	return since, ok
}

// WriteFailed records that key's status write failed with msg and reports
// whether this failure is new (not the one recorded last), to report each
// distinct failure once.
func (b *Book) WriteFailed(key, msg string) (first bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.entryLocked(key)
	first = e.writeErr != msg
	e.writeErr = msg
	return first
}

// WriteSucceeded forgets key's last write failure.
func (b *Book) WriteSucceeded(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.svcs[key]; e != nil {
		e.writeErr = ""
	}
}

// Forget drops everything about key (the Service is gone or not ours) and
// returns the number of pending keys left.
func (b *Book) Forget(key string) (pending int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.svcs, key)
	delete(b.since, key)
	delete(b.pending, key)
	return len(b.pending)
}

// oneLine joins the lines of s with "; ".
func oneLine(s string) string { return strings.ReplaceAll(s, "\n", "; ") }

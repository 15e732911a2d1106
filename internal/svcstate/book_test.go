package svcstate

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/herald-lb/herald/internal/ipam"
)

// errConflict is what ipam.Allocator.Import returns when another Service
// holds the address.
var errConflict = fmt.Errorf("import: %w", &ipam.ConflictError{
	Kind: ipam.ErrIPInUse, IP: netip.MustParseAddr("198.51.100.7"), Other: "ns/other",
})

func TestSetPendingWakesOnlyOnBecomingPending(t *testing.T) {
	// Each step: key, pending, wake expected, pending count expected.
	steps := []struct {
		key     string
		p       bool
		wake    bool
		pending int
	}{
		{"ns/a", true, true, 1},   // becomes pending: a retry pass must follow (66bcd02)
		{"ns/a", true, false, 1},  // stays pending: retry passes do not feed themselves
		{"ns/b", true, true, 2},   // another one
		{"ns/a", false, false, 1}, // got its address
		{"ns/a", false, false, 1}, // not pending, stays so
		{"ns/a", true, true, 2},   // pending again: wakes again
	}
	b := New()
	for i, s := range steps {
		wake, n := b.SetPending(s.key, s.p)
		if wake != s.wake || n != s.pending {
			t.Errorf("step %d SetPending(%s, %v) = %v, %d; want %v, %d", i, s.key, s.p, wake, n, s.wake, s.pending)
		}
	}
	if n := b.Forget("ns/a"); n != 1 {
		t.Errorf("Forget left %d pending, want 1", n)
	}
}

func TestRetryOrder(t *testing.T) {
	tests := []struct {
		name     string
		pending  []string
		reassess []string
		want     []string
		// wantNext is the order of the pass after, with no change between.
		wantNext []string
	}{
		{name: "nothing"},
		{
			name:    "pending in key order",
			pending: []string{"ns/c", "ns/a", "other/a", "ns/b"},
			want:    []string{"ns/a", "ns/b", "ns/c", "other/a"}, wantNext: []string{"ns/a", "ns/b", "ns/c", "other/a"},
		},
		{
			name:     "reassessed first, each once, then the other pending",
			pending:  []string{"ns/a", "ns/z", "ns/m"},
			reassess: []string{"ns/z", "ns/b"},
			want:     []string{"ns/b", "ns/z", "ns/a", "ns/m"},
			// The reassess marks are consumed; pending stays.
			wantNext: []string{"ns/a", "ns/m", "ns/z"},
		},
		{
			name:     "reassessed only",
			reassess: []string{"ns/y", "ns/x"},
			want:     []string{"ns/x", "ns/y"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := New()
			for _, k := range tt.pending {
				b.SetPending(k, true)
			}
			b.Reassess(tt.reassess, "config changed")
			if got := b.RetryOrder(); !slices.Equal(got, tt.want) {
				t.Errorf("RetryOrder = %v, want %v", got, tt.want)
			}
			if got := b.RetryOrder(); !slices.Equal(got, tt.wantNext) {
				t.Errorf("next RetryOrder = %v, want %v", got, tt.wantNext)
			}
		})
	}
}

func TestConflictDecisions(t *testing.T) {
	tests := []struct {
		name string
		// importErr is what the import of the existing address met, with
		// request fingerprint "fp1".
		importErr error
		// fp is the request at the next reconcile.
		fp              string
		wantConflict    bool // NoteImport
		wantRecheck     bool // CheckConflict
		wantPreallocate bool // MayPreallocate after CheckConflict
		wantClear       string
	}{
		{name: "import kept", fp: "fp1", wantPreallocate: true},
		{
			name: "held by another, same request: re-checked, no preallocation", importErr: errConflict, fp: "fp1",
			wantConflict: true, wantRecheck: true,
		},
		{
			name: "held by another, request changed: dropped, allocated afresh", importErr: errConflict, fp: "fp2",
			wantConflict: true, wantPreallocate: true,
		},
		{
			name: "not valid any more: a clear reason, no conflict", importErr: errors.New("198.51.100.7 is in no pool"), fp: "fp1",
			wantPreallocate: true, wantClear: "the existing address could not be kept: 198.51.100.7 is in no pool",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := New()
			b.See("ns/s", "fp1")
			if got := b.NoteImport("ns/s", "fp1", tt.importErr); got != tt.wantConflict {
				t.Errorf("NoteImport = %v, want %v", got, tt.wantConflict)
			}
			if got := b.CheckConflict("ns/s", tt.fp); got != tt.wantRecheck {
				t.Errorf("CheckConflict = %v, want %v", got, tt.wantRecheck)
			}
			if got := b.MayPreallocate("ns/s"); got != tt.wantPreallocate {
				t.Errorf("MayPreallocate = %v, want %v", got, tt.wantPreallocate)
			}
			if got := b.TakeClearReason("ns/s"); got != tt.wantClear {
				t.Errorf("TakeClearReason = %q, want %q", got, tt.wantClear)
			}
			if got := b.TakeClearReason("ns/s"); got != "" {
				t.Errorf("second TakeClearReason = %q, want it consumed", got)
			}
			if tt.wantRecheck {
				// The re-import found the address free.
				b.ResolveConflict("ns/s")
				if b.CheckConflict("ns/s", tt.fp) || !b.MayPreallocate("ns/s") {
					t.Error("conflict still in force after ResolveConflict")
				}
			}
		})
	}
}

func TestMayPreallocateOnlyKnownServices(t *testing.T) {
	b := New()
	if b.MayPreallocate("ns/new") {
		t.Error("a Service never seen may be preallocated")
	}
	b.See("ns/new", "fp")
	if !b.MayPreallocate("ns/new") {
		t.Error("a seen Service may not be preallocated")
	}
	b.Forget("ns/new")
	if b.MayPreallocate("ns/new") {
		t.Error("a forgotten Service may be preallocated")
	}
}

func TestSeeUnsee(t *testing.T) {
	b := New()
	steps := []struct {
		do       string // "see" or "unsee"
		fp       string
		wantSeen bool
		wantPrev string
	}{
		{"see", "fp1", false, ""},
		{"see", "fp1", true, "fp1"},
		{"see", "fp2", true, "fp1"},
		{"unsee", "", false, ""},
		// After a lost write conflict: first sight again, previous request kept.
		{"see", "fp2", false, "fp2"},
	}
	for i, s := range steps {
		if s.do == "unsee" {
			b.Unsee("ns/s")
			continue
		}
		seen, prev := b.See("ns/s", s.fp)
		if seen != s.wantSeen || prev != s.wantPrev {
			t.Errorf("step %d See(%s) = %v, %q; want %v, %q", i, s.fp, seen, prev, s.wantSeen, s.wantPrev)
		}
	}
}

func TestClearReason(t *testing.T) {
	notSelected := errors.New(`198.51.100.0 is in address pool "team", whose serviceAllocation does not select Service demo/web`)
	tests := []struct {
		recorded     string
		err, dropped error
		reqChanged   bool
		want         string
	}{
		{"after a configuration change", errors.New("pool exhausted"), notSelected, true, "after a configuration change"},
		{"", errors.New("pool exhausted"), notSelected, true, "pool exhausted"},
		{"", nil, notSelected, true, notSelected.Error()},
		// A dual-stack Service's two addresses: one line.
		{"", nil, errors.Join(notSelected, errors.New("2001:db8::1 is not in any address pool")), true,
			notSelected.Error() + "; 2001:db8::1 is not in any address pool"},
		{"", nil, nil, true, "the Service's request changed"},
		{"", nil, nil, false, "the address is no longer valid for the Service"},
	}
	for _, tt := range tests {
		if got := ClearReason(tt.recorded, tt.err, tt.dropped, tt.reqChanged); got != tt.want {
			t.Errorf("ClearReason(%q, %v, %v, %v) = %q, want %q", tt.recorded, tt.err, tt.dropped, tt.reqChanged, got, tt.want)
		}
	}
}

func TestReassessRecordsClearReason(t *testing.T) {
	b := New()
	b.Reassess([]string{"ns/a"}, "moved out of the pool")
	if got := b.TakeClearReason("ns/a"); got != "moved out of the pool" {
		t.Errorf("clear reason %q", got)
	}
}

func TestWaiting(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := New()
	if _, ok := b.Waiting("ns/s", false); ok {
		t.Fatal("waits before MarkWaiting")
	}
	b.MarkWaiting("ns/s", t0)
	b.MarkWaiting("ns/s", t0.Add(time.Second)) // already waits: kept
	if since, ok := b.Waiting("ns/s", false); !ok || !since.Equal(t0) {
		t.Fatalf("Waiting = %v, %v; want %v", since, ok, t0)
	}
	if since, ok := b.Waiting("ns/s", true); !ok || !since.Equal(t0) {
		t.Fatalf("Waiting(done) = %v, %v; want %v", since, ok, t0)
	}
	if _, ok := b.Waiting("ns/s", false); ok {
		t.Fatal("still waits after done")
	}
	b.MarkWaiting("ns/s", t0)
	b.Forget("ns/s")
	if _, ok := b.Waiting("ns/s", false); ok {
		t.Fatal("waits after Forget")
	}
}

func TestWriteFailedOncePerDistinctError(t *testing.T) {
	b := New()
	steps := []struct {
		fail  string // "" = success
		first bool
	}{
		{"forbidden by policy", true},
		{"forbidden by policy", false},
		{"quota exceeded", true},
		{"", false},
		{"quota exceeded", true}, // after a success, reported again
	}
	for i, s := range steps {
		if s.fail == "" {
			b.WriteSucceeded("ns/s")
			continue
		}
		if got := b.WriteFailed("ns/s", s.fail); got != s.first {
			t.Errorf("step %d WriteFailed(%q) = %v, want %v", i, s.fail, got, s.first)
		}
	}
}

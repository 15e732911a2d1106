package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRecordSection: the "L2 failover" section is appended when missing and
// replaced in place when present; the other sections stay byte for byte.
func TestRecordSection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "performance.md")
	other := "# Performance\n\n## Allocation\n\nalloc figures\n"
	if err := os.WriteFile(path, []byte(other), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := recordSection(path, "table one\n"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(b), other) || !strings.Contains(string(b), "## L2 failover\n") || !strings.HasSuffix(string(b), "table one\n") {
		t.Fatalf("after append:\n%s", b)
	}
	// A later section must survive a replacement.
	if err := os.WriteFile(path, append(b, []byte("\n## BGP\n\nbgp figures\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := recordSection(path, "table two\n"); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	s := string(b)
	if strings.Contains(s, "table one") || !strings.Contains(s, "table two") || strings.Count(s, "## L2 failover") != 1 {
		t.Fatalf("after replace:\n%s", s)
	}
	if !strings.HasPrefix(s, other) || !strings.HasSuffix(s, "## BGP\n\nbgp figures\n") {
		t.Fatalf("other sections changed:\n%s", s)
	}
}

// TestPercentile: nearest-rank percentiles.
func TestPercentile(t *testing.T) {
	var s []time.Duration
	for i := 1; i <= 20; i++ {
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{.5, 10 * time.Millisecond}, {.9, 18 * time.Millisecond}, {.99, 20 * time.Millisecond}, {1, 20 * time.Millisecond}} {
		if got := percentile(s, c.p); got != c.want {
			t.Errorf("p%.0f = %s, want %s", c.p*100, got, c.want)
		}
	}
	if got := percentile(nil, .5); got != 0 {
		t.Errorf("empty = %s", got)
	}
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRecordSection checks that the BGP figures replace only their own
// section, or are appended, and that other helpers' sections stay.
func TestRecordSection(t *testing.T) {
	for _, tc := range []struct{ name, before string }{
		{"missing file", ""},
		{"other sections only", "# Performance\n\n## L2 failover\n\nfast\n"},
		{"replace between", "# Performance\n\n## L2 failover\n\nfast\n\n## BGP\n\nold figures\n\n## Allocation\n\nquick\n"},
		{"replace at end", "# Performance\n\n## BGP\n\nold figures\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "performance.md")
			if tc.before != "" {
				if err := os.WriteFile(p, []byte(tc.before), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := recordSection(p, "| new table |\n"); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(p)
			got := string(b)
			if strings.Count(got, "## BGP\n") != 1 || !strings.Contains(got, "| new table |") || strings.Contains(got, "old figures") {
				t.Errorf("after recording:\n%s", got)
			}
			for _, keep := range []string{"## L2 failover\n\nfast\n", "## Allocation\n\nquick\n"} {
				if strings.Contains(tc.before, keep) && !strings.Contains(got, keep) {
					t.Errorf("lost %q:\n%s", keep, got)
				}
			}
		})
	}
}

// TestMedianAndFailoverTable checks the median (odd and even counts) and
// that the failover table has both rows and the ratio of the medians.
func TestMedianAndFailoverTable(t *testing.T) {
	for _, tc := range []struct {
		in   []time.Duration
		want time.Duration
	}{
		{[]time.Duration{3, 1, 2}, 2},
		{[]time.Duration{4, 1, 3, 2}, 2}, // (2+3)/2 in integer nanoseconds
		{[]time.Duration{7}, 7},
	} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
	f := failover{hold: 9 * time.Second, keepalive: 3 * time.Second,
		noBFD:   []time.Duration{8900 * time.Millisecond, 9000 * time.Millisecond, 8800 * time.Millisecond},
		withBFD: []time.Duration{900 * time.Millisecond, 800 * time.Millisecond, 1000 * time.Millisecond}}
	got := failoverTable(f, "10.3")
	for _, want := range []string{
		"| BGP alone (hold time 9s, keepalive 3s) | 3 | 8900.0 ms | 9000.0 ms |",
		"| BFD 300 ms × 3 | 3 | 900.0 ms | 1000.0 ms |",
		"BGP alone / BFD: 9.9×",
		"FRR 10.3",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("failover table lacks %q:\n%s", want, got)
		}
	}
}

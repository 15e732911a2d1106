package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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

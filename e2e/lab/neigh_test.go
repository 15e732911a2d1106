package lab

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestNeighbourEntries(t *testing.T) {
	// 100 nodes + router + client + API server: 103 members, 102 peers each.
	if got := NeighbourEntries(100); got != 103*102 {
		t.Errorf("NeighbourEntries(100) = %d, want %d", got, 103*102)
	}
	// The 100-node lab exceeds the kernel's default hard limit (1024) by
	// ten times: that is why only 32 speakers (32 * 32 = 1024) could mesh.
	if NeighbourEntries(100) <= 1024 || NeighbourEntries(30) <= 1024 {
		t.Errorf("NeighbourEntries(30/100) = %d/%d, want both above the default 1024", NeighbourEntries(30), NeighbourEntries(100))
	}
}

func TestNeighLimits(t *testing.T) {
	for _, tc := range []struct {
		name          string
		nodes, t2, t3 int
		want2, want3  int
		raise         bool
	}{
		{"3 nodes fit the defaults", 3, 512, 1024, 512, 1024, false},
		{"20 nodes fit the defaults", 20, 512, 1024, 512, 1024, false},
		{"21 nodes take over half", 21, 512, 1024, 24*23 + 512, 24*23 + 1024, true},
		{"100 nodes", 100, 512, 1024, 10506 + 512, 10506 + 1024, true},
		{"already high enough", 100, 20000, 40000, 20000, 40000, false},
		{"never lowered; hard limit at least the soft one", 100, 30000, 21000, 30000, 30000, true},
		{"only the soft limit low", 100, 512, 40000, 512, 40000, false},
		{"hard limit below the need plus headroom", 100, 16000, 11000, 16000, 16000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n2, n3, raise := neighLimits(tc.nodes, tc.t2, tc.t3)
			if n2 != tc.want2 || n3 != tc.want3 || raise != tc.raise {
				t.Errorf("neighLimits(%d, %d, %d) = %d, %d, %v; want %d, %d, %v", tc.nodes, tc.t2, tc.t3, n2, n3, raise, tc.want2, tc.want3, tc.raise)
			}
			if n2 > n3 && tc.raise {
				t.Errorf("gc_thresh2 %d above gc_thresh3 %d", n2, n3)
			}
		})
	}
}

func TestEnsureNeighbourLimits(t *testing.T) {
	dir := t.TempDir()
	old := neighSysctlDir
	neighSysctlDir = dir
	t.Cleanup(func() { neighSysctlDir = old })
	for _, fam := range []string{"ipv4", "ipv6"} {
		d := filepath.Join(dir, fam, "neigh", "default")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for k, v := range map[string]string{"gc_thresh2": "512\n", "gc_thresh3": "1024\n"} {
			if err := os.WriteFile(filepath.Join(d, k), []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got, err := ensureNeighbourLimits(10); err != nil || got != "" {
		t.Fatalf("10 nodes: %q, %v; want no change", got, err)
	}
	got, err := ensureNeighbourLimits(100)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "net.ipv4.neigh.default.gc_thresh3 1024 -> 11530") || !strings.Contains(got, "net.ipv6.neigh.default.gc_thresh2 512 -> 11018") {
		t.Errorf("changes = %q", got)
	}
	for _, fam := range []string{"ipv4", "ipv6"} {
		b, _ := os.ReadFile(filepath.Join(dir, fam, "neigh", "default", "gc_thresh3"))
		if v, _ := strconv.Atoi(string(b)); v != 11530 {
			t.Errorf("%s gc_thresh3 = %q, want 11530", fam, b)
		}
	}
	// A second lab of the same size changes nothing.
	if got, err := ensureNeighbourLimits(100); err != nil || got != "" {
		t.Errorf("again: %q, %v; want no change", got, err)
	}
}

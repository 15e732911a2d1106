package logging

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

func TestParseLevel(t *testing.T) {
	tests := []struct {
		in      string
		want    slog.Level
		wantErr bool
	}{
		{"debug", slog.LevelDebug, false},
		{"INFO", slog.LevelInfo, false},
		{"", slog.LevelInfo, false},
		{"warn", slog.LevelWarn, false},
		{"error", slog.LevelError, false},
		{"verbose", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseLevel(tt.in)
		if (err != nil) != tt.wantErr {
			t.Fatalf("ParseLevel(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
		}
		if err == nil && got != tt.want {
			t.Errorf("ParseLevel(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
	all, _ := ParseLevel("all")
	none, _ := ParseLevel("none")
	if !(all < slog.LevelDebug && none > slog.LevelError) {
		t.Errorf("all=%v must be below debug and none=%v above error", all, none)
	}
}

func TestNewFiltersAndTags(t *testing.T) {
	var buf bytes.Buffer
	l, err := New(&buf, "warn", "controller")
	if err != nil {
		t.Fatal(err)
	}
	l.Info("hidden")
	l.Warn("shown", "pool", "a")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("want 1 line at warn, got %d: %q", len(lines), buf.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatal(err)
	}
	if rec["component"] != "controller" || rec["pool"] != "a" || rec["msg"] != "shown" {
		t.Errorf("unexpected record %v", rec)
	}
}

// The binary's identity attributes are on every line, also on klog's.
func TestNewIdentityOnLibraryLines(t *testing.T) {
	var buf bytes.Buffer
	l, err := New(&buf, "info", "speaker", slog.String(KeyNode, "n1"))
	if err != nil {
		t.Fatal(err)
	}
	l.Info("own")
	klog.InfoS("from klog")
	klog.Flush()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got %q", buf.String())
	}
	for _, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if rec[KeyComponent] != "speaker" || rec[KeyNode] != "n1" || strings.Count(line, `"node"`) != 1 {
			t.Errorf("line %s: want component speaker and node n1, once", line)
		}
	}
}

package lab

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// UpForTest brings up a fresh lab for t: a unique prefix (unless
// cfg.Prefix is set), state in t.TempDir() (unless cfg.StateDir is set),
// and a t.Cleanup that tears it down and, when t failed, logs the tail of
// every process log. It fails t when Up fails or the lab needs what the
// machine lacks (root).
func UpForTest(t testing.TB, cfg Config) *Lab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the lab needs root (network namespaces); run as root or use go test -short")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = RandomPrefix()
	}
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	l, err := Up(ctx, cfg)
	if err != nil {
		dumpLogs(t, cfg.StateDir)
		t.Fatalf("lab up: %v", err)
	}
	t.Logf("lab %s up in %s (state %s)", l.Prefix(), time.Since(start).Round(time.Millisecond), l.StateDir())
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogs(t, l.StateDir())
		}
		if err := l.Down(); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	return l
}

// dumpLogs logs the last lines of every *.log in dir.
func dumpLogs(t testing.TB, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".log") {
			continue
		}
		b, err := os.ReadFile(dir + "/" + e.Name())
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 25 {
			lines = lines[len(lines)-25:]
		}
		t.Logf("--- %s (tail)\n%s", e.Name(), strings.Join(lines, "\n"))
	}
}

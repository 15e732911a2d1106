package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	if err := SweepOrphans(); err != nil {
		t.Logf("sweep labs of crashed test runs: %v", err)
	}
	if err := claim(cfg); err != nil {
		t.Fatalf("lab up: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	l, err := Up(ctx, cfg)
	if err != nil {
		dumpLogs(t, cfg.StateDir)
		unclaim(cfg.Prefix)
		t.Fatalf("lab up: %v", err)
	}
	t.Logf("lab %s up in %s (state %s)", l.Prefix(), time.Since(start).Round(time.Millisecond), l.StateDir())
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogs(t, l.StateDir())
		}
		if err := l.Down(); err != nil {
			t.Errorf("lab down: %v", err)
		} else if left := Leftovers(l.StateDir()); len(left) > 0 {
			t.Errorf("lab down left files besides logs and built binaries in %s: %q", l.StateDir(), left)
		}
		unclaim(l.Prefix())
	})
	return l
}

// Leftovers lists what a stopped lab left in stateDir besides what Down
// keeps on purpose: the logs (*.log, for a post-mortem; the next Up removes
// them), built binaries (bin/, the helper binary herald-lab) and the lab
// README a user may have put there. Keys, tokens, kubeconfigs and etcd data
// must all be gone.
func Leftovers(stateDir string) []string {
	ents, err := os.ReadDir(stateDir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		n := e.Name()
		if strings.HasSuffix(n, ".log") || n == "bin" || n == "herald-lab" {
			continue
		}
		out = append(out, n)
	}
	return out
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

// claimsDir records which process owns each test lab, so that the labs of
// a test binary that crashed (or was killed by a timeout) are removed by
// the next test run.
const claimsDir = "/var/run/herald-lab/claims"

// claim records that this process owns the lab of cfg.
func claim(cfg Config) error {
	if err := os.MkdirAll(claimsDir, 0o755); err != nil {
		return err
	}
	st, err := procStartTime(os.Getpid())
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return err
	}
	line := fmt.Sprintf("%d %d %s\n", os.Getpid(), st, abs)
	return os.WriteFile(filepath.Join(claimsDir, cfg.Prefix), []byte(line), 0o644)
}

func unclaim(prefix string) { _ = os.Remove(filepath.Join(claimsDir, prefix)) }

// SweepOrphans removes the labs of test processes that no longer run
// (see [UpForTest]); labs of live processes and the persistent lab are
// left alone.
func SweepOrphans() error {
	ents, err := os.ReadDir(claimsDir)
	if err != nil {
		return nil // no claims yet
	}
	var errs []error
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(claimsDir, e.Name()))
		if err != nil {
			continue
		}
		var pid int
		var start uint64
		var dir string
		if _, err := fmt.Sscanf(string(b), "%d %d %s", &pid, &start, &dir); err != nil || !prefixRE.MatchString(e.Name()) {
			unclaim(e.Name())
			continue
		}
		if procAlive(pid, start) {
			continue
		}
		if err := Cleanup(dir, e.Name()); err != nil {
			errs = append(errs, err)
			continue
		}
		unclaim(e.Name())
	}
	return errors.Join(errs...)
}

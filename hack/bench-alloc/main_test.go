package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/herald-lb/herald/internal/testenv"
)

// TestInterruptCleansUp interrupts a bench in the middle of a burst, as
// Ctrl-C or a CI timeout does, and checks that it stopped everything it
// started (kube-apiserver, etcd, the ideal allocator) and removed every
// file it made in TMPDIR.
func TestInterruptCleansUp(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real API server; skipped under -short")
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(root, "bin", "k8s")
	}
	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
		t.Fatalf("kube-apiserver missing in %s: run make test-assets", assets)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bench-alloc")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	tmp := filepath.Join(dir, "tmp") // the bench's TMPDIR: everything it makes
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	// Whatever the outcome, nothing of this run survives the test.
	t.Cleanup(func() {
		for _, pid := range pidsMentioning(tmp) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	// The ideal allocator runs first; Herald's controller (here the bench
	// binary itself: it must exist) is never reached.
	cmd := exec.Command(bin, "-controller", bin, "-metallb=", "-bursts", "200000")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "KUBEBUILDER_ASSETS="+assets)
	out := &watchWriter{want: "ideal: creating", seen: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = out, out
	// Children left running would hold the output pipe open for ever.
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	burst := out.seen
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	select {
	case <-burst:
	case err := <-exited:
		t.Fatalf("the bench ended before its first burst: %v\n%s", err, out.String())
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		t.Fatalf("no burst started within 5 min")
	}
	if n := len(pidsMentioning(tmp)); n < 3 {
		t.Fatalf("%d processes mention %s during the burst, want kube-apiserver, etcd and the ideal allocator", n, tmp)
	}
	// The bench's process alone, as kill(1) or a supervisor does (a
	// terminal's Ctrl-C signals the whole process group).
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		t.Fatalf("the bench did not end within 5 min of SIGINT")
	}
	// The children exit shortly after the parent.
	deadline := time.Now().Add(20 * time.Second)
	for len(pidsMentioning(tmp)) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	for _, pid := range pidsMentioning(tmp) {
		cl, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		t.Errorf("process %d still runs after the interrupted bench: %s", pid, strings.ReplaceAll(string(cl), "\x00", " "))
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("left in TMPDIR after the interrupted bench: %s", e.Name())
	}
	if t.Failed() {
		t.Logf("bench output:\n%s", out.String())
	}
}

// pidsMentioning returns the processes whose command line or environment
// contains s.
func pidsMentioning(s string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		for _, f := range []string{"cmdline", "environ"} {
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), f))
			if err == nil && strings.Contains(string(b), s) {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// watchWriter keeps what is written and closes seen once want was written.
type watchWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	done bool
}

func (w *watchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.done && bytes.Contains(w.buf.Bytes(), []byte(w.want)) {
		w.done = true
		close(w.seen)
	}
	return len(p), nil
}

func (w *watchWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

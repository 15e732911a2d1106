package logging

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

func do(t *testing.T, h http.Handler, method, target, body string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, strings.NewReader(body)))
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, string(b)
}

// TestLevelHandler: PUT changes the level of the running logger (the next
// debug line appears, controller-runtime's too), GET reads it, bad words and methods are
// refused and change nothing.
func TestLevelHandler(t *testing.T) {
	var buf testenv.SyncBuffer
	log, level, err := NewLeveled(&buf, "info", "speaker")
	if err != nil {
		t.Fatal(err)
	}
	h := LevelHandler(level, log)
	log.Debug("before")
	if code, body := do(t, h, http.MethodGet, LevelPath, ""); code != 200 || body != "info\n" {
		t.Fatalf("GET = %d %q, want 200 info", code, body)
	}
	if code, body := do(t, h, http.MethodPut, LevelPath, "debug\n"); code != 200 || body != "debug\n" {
		t.Fatalf("PUT debug = %d %q", code, body)
	}
	log.Debug("after")
	ctrl.Log.V(1).Info("controller-runtime verbose") // slog level -1: shown at debug
	out := buf.String()
	if strings.Contains(out, `"msg":"before"`) || !strings.Contains(out, `"msg":"after"`) || !strings.Contains(out, `"msg":"controller-runtime verbose"`) {
		t.Fatalf("debug lines before/after the PUT:\n%s", out)
	}
	if !strings.Contains(out, `"level":"WARN","msg":"log level changed","component":"speaker","from":"info","to":"debug"`) {
		t.Errorf("change not logged:\n%s", out)
	}
	if code, body := do(t, h, http.MethodPut, LevelPath+"?level=WARN", ""); code != 200 || body != "warn\n" {
		t.Fatalf("PUT ?level=WARN = %d %q", code, body)
	}
	if code, body := do(t, h, http.MethodPut, LevelPath, "verbose"); code != 400 || !strings.Contains(body, "must be one of all, debug, info, warn, error, none") {
		t.Errorf("PUT verbose = %d %q, want 400 naming the words", code, body)
	}
	if code, _ := do(t, h, http.MethodPut, LevelPath, ""); code != 400 {
		t.Errorf("PUT without a level = %d, want 400", code)
	}
	if code, _ := do(t, h, http.MethodPost, LevelPath, "debug"); code != 405 {
		t.Errorf("POST = %d, want 405", code)
	}
	if got := LevelName(level.Level()); got != LevelWarn {
		t.Errorf("level %s after refused requests, want warn", got)
	}
	log.Info("hidden at warn")
	if strings.Contains(buf.String(), "hidden at warn") {
		t.Error("info line logged at warn")
	}
	// Lowering verbosity past warn is logged too (before the change).
	if code, _ := do(t, h, http.MethodPut, LevelPath, "error"); code != 200 {
		t.Fatalf("PUT error = %d", code)
	}
	if !strings.Contains(buf.String(), `"msg":"log level changed","component":"speaker","from":"warn","to":"error"`) {
		t.Errorf("change to error not logged:\n%s", buf.String())
	}
}

func TestStepAndLevelName(t *testing.T) {
	tests := []struct {
		word string
		step int
		want string
	}{
		{"info", 1, "debug"}, {"debug", 1, "all"}, {"all", 1, "all"},
		{"info", -1, "warn"}, {"error", -1, "none"}, {"none", -1, "none"},
		{"bogus", 1, "debug"},
	}
	for _, tt := range tests {
		if got := Step(tt.word, tt.step); got != tt.want {
			t.Errorf("Step(%q, %d) = %q, want %q", tt.word, tt.step, got, tt.want)
		}
	}
	for _, w := range ladder {
		l, err := ParseLevel(w)
		if err != nil {
			t.Fatal(err)
		}
		if got := LevelName(l); got != w {
			t.Errorf("LevelName(ParseLevel(%q)) = %q", w, got)
		}
	}
}

// TestHandleSignals: SIGUSR1 to the running process makes it one step more
// verbose, SIGUSR2 one step less.
func TestHandleSignals(t *testing.T) {
	var buf testenv.SyncBuffer
	log, level, err := NewLeveled(&buf, "info", "controller")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	HandleSignals(ctx, level, log)
	expect := func(sig syscall.Signal, want string) {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), sig); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, 10*time.Second, "level "+want, func() error {
			if got := LevelName(level.Level()); got != want {
				return fmt.Errorf("level %s", got)
			}
			return nil
		})
	}
	expect(syscall.SIGUSR1, LevelDebug)
	log.Debug("visible")
	expect(syscall.SIGUSR2, LevelInfo)
	log.Debug("invisible")
	out := buf.String()
	if !strings.Contains(out, `"msg":"visible"`) || strings.Contains(out, "invisible") {
		t.Errorf("debug lines:\n%s", out)
	}
	if !strings.Contains(out, `"to":"debug","by":"user defined signal 1"`) {
		t.Errorf("signal change not logged:\n%s", out)
	}
}

package members

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
)

type recordHandler struct {
	mu   sync.Mutex
	recs []string
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Level.String()+" "+r.Message)
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

func TestStdLoggerBridge(t *testing.T) {
	t.Parallel()
	h := &recordHandler{}
	l := newStdLogger(slog.New(h))
	l.Printf("[DEBUG] memberlist: Stream connection from=%s", "127.0.0.1:1")
	l.Printf("[WARN] memberlist: Refuting a suspect message (from: %s)", "n2")
	l.Printf("[ERR] memberlist: failed to decrypt: %s", "no installed keys could decrypt the message")
	l.Printf("no level at all")
	want := []string{
		"DEBUG Stream connection from=127.0.0.1:1",
		"DEBUG Refuting a suspect message (from: n2)",
		"WARN failed to decrypt: no installed keys could decrypt the message",
		"DEBUG no level at all",
	}
	if !slices.Equal(h.recs, want) {
		t.Errorf("records:\n%q\nwant\n%q", h.recs, want)
	}
}

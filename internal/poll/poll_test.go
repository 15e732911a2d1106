package poll

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB that records Fatalf instead of stopping.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestUntil(t *testing.T) {
	t.Run("error condition holds after a few checks", func(t *testing.T) {
		n := 0
		r := &recorder{TB: t}
		Until(r, time.Minute, "three checks", func() error {
			if n++; n < 3 {
				return fmt.Errorf("check %d", n)
			}
			return nil
		})
		if r.failed != "" || n != 3 {
			t.Errorf("failed %q after %d checks, want success after 3", r.failed, n)
		}
	})
	t.Run("bool condition holds after a few checks", func(t *testing.T) {
		n := 0
		r := &recorder{TB: t}
		Until(r, time.Minute, "three checks", func() bool { n++; return n == 3 })
		if r.failed != "" || n != 3 {
			t.Errorf("failed %q after %d checks, want success after 3", r.failed, n)
		}
	})
	t.Run("timeout reports what and the last error", func(t *testing.T) {
		r := &recorder{TB: t}
		Until(r, 0, "the pool", func() error { return errors.New("status empty") })
		if !strings.Contains(r.failed, "the pool") || !strings.Contains(r.failed, "status empty") {
			t.Errorf("failure %q does not name what was awaited and what was seen", r.failed)
		}
	})
	t.Run("bool timeout", func(t *testing.T) {
		r := &recorder{TB: t}
		Until(r, 0, "never", func() bool { return false })
		if !strings.Contains(r.failed, "never") {
			t.Errorf("failure %q does not name what was awaited", r.failed)
		}
	})
}

func TestWaitStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	last := errors.New("not yet")
	_, err := Wait(ctx, time.Hour, "cancelled", func() error { return last })
	if !errors.Is(err, last) || !strings.Contains(err.Error(), "cancelled") {
		t.Errorf("Wait after cancel = %v, want an error naming what, wrapping the last error", err)
	}
}

func TestStopEndsTheWait(t *testing.T) {
	exited := errors.New("process exited")
	n := 0
	_, err := Wait(context.Background(), time.Hour, "process", func() error {
		n++
		return fmt.Errorf("checking: %w", Stop(exited))
	})
	if n != 1 || err == nil || err.Error() != "process exited" || !errors.Is(err, exited) {
		t.Errorf("Wait = %v after %d checks, want the stopped error itself after 1", err, n)
	}
	r := &recorder{TB: t}
	Until(r, time.Hour, "process", func() error { return Stop(exited) })
	if r.failed != "process exited" {
		t.Errorf("Until failed with %q, want the stopped error", r.failed)
	}
}

func TestEveryChecksAtAFixedInterval(t *testing.T) {
	// Counted, not timed: with Every(1h) a second check would come after an
	// hour, so a wait that ends by its context checks twice (at the start
	// and once more when the context ends); with the growing interval (1 ms,
	// 2 ms, ...) it checks many times meanwhile.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	done := make(chan error)
	go func() {
		_, err := Wait(ctx, time.Hour, "", func() error { n++; return errors.New("not yet") }, Every(time.Hour))
		done <- err
	}()
	time.AfterFunc(20*time.Millisecond, cancel)
	err := <-done
	if n != 2 {
		t.Errorf("Every(1h): %d checks, want 2 (the first, the last when the context ended)", n)
	}
	if err == nil || err.Error() != "after 1h0m0s: not yet" {
		t.Errorf("Wait with what empty = %v, want %q", err, "after 1h0m0s: not yet")
	}
}

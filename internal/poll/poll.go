// Package poll is the tests' one way to wait for a condition instead of
// sleeping: [Until] checks the condition, at first every millisecond and then
// at growing intervals up to 50 ms, until it holds or a timeout passes.
//
//	poll.Until(t, 10*time.Second, "pool status", func() error {
//		if got := ...; got != want {
//			return fmt.Errorf("status %v", got) // what was seen, for the failure
//		}
//		return nil
//	})
//	poll.Until(t, 10*time.Second, "bursts to end", a.idle) // a func() bool
//
// It imports only the standard library, so any package's tests may use it.
package poll

import (
	"errors"
	"testing"
	"time"
)

// Cond is a condition to wait for: a func() error holds when it returns nil
// (its last error says what was seen instead), a func() bool when it
// returns true.
type Cond interface {
	func() error | func() bool
}

// maxInterval bounds the interval between two checks.
const maxInterval = 50 * time.Millisecond

// errFalse is the last error of a func() bool condition that never held.
var errFalse = errors.New("condition false")

// Until calls cond until it holds and returns how long that took (for the
// test's log). If it does not hold within timeout, Until fails t (Fatalf,
// so only from the test's goroutine) with what and cond's last error.
func Until[C Cond](t testing.TB, timeout time.Duration, what string, cond C) time.Duration {
	t.Helper()
	check := func() error { return nil }
	switch c := any(cond).(type) {
	case func() error:
		check = c
	case func() bool:
		check = func() error {
			if c() {
				return nil
			}
			return errFalse
		}
	}
	start := time.Now()
	interval := time.Millisecond
	for {
		err := check()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
			return time.Since(start)
		}
		time.Sleep(interval)
		interval = min(2*interval, maxInterval)
	}
}

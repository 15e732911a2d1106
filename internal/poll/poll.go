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
// [Every] checks at a fixed interval instead (a condition that costs a
// process or a request, as in the lab), and a condition returns [Stop](err)
// to end the wait at once (a process it waits on has exited).
//
// It imports only the standard library, so any package's tests may use it;
// [Wait] is the same loop for code without a test.
package poll

import (
	"context"
	"errors"
	"fmt"
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

// Option changes how [Until] and [Wait] check.
type Option func(*options)

type options struct {
	every time.Duration // fixed interval between checks; 0: growing up to maxInterval
}

// Every makes the wait check cond every d (d > 0) instead of at intervals
// growing from 1 ms to 50 ms.
func Every(d time.Duration) Option { return func(o *options) { o.every = d } }

// stopError marks an error that ends a wait at once.
type stopError struct{ err error }

func (e stopError) Error() string { return e.err.Error() }
func (e stopError) Unwrap() error { return e.err }

// Stop marks err (non-nil) as permanent: a condition that returns Stop(err)
// is not checked again, and [Wait] returns err itself (unwrapped, without
// the timeout), [Until] fails with it.
func Stop(err error) error { return stopError{err} }

// Until calls cond until it holds and returns how long that took (for the
// test's log). If it does not hold within timeout, Until fails t (Fatalf,
// so only from the test's goroutine) with what and cond's last error.
func Until[C Cond](t testing.TB, timeout time.Duration, what string, cond C, opts ...Option) time.Duration {
	t.Helper()
	took, err := Wait(context.Background(), timeout, what, cond, opts...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return took
}

// Wait is Until for code without a test (the chaos scenarios): it returns
// how long cond took to hold, or an error naming what and cond's last
// error once timeout passed or ctx ended ("<what>: not within <timeout>:
// <last error>"; "after <timeout>: <last error>" if what is empty, for a
// caller that names the wait itself), or the error cond passed to [Stop].
func Wait[C Cond](ctx context.Context, timeout time.Duration, what string, cond C, opts ...Option) (time.Duration, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
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
	if o.every > 0 {
		interval = o.every
	}
	for {
		err := check()
		if err == nil {
			return time.Since(start), nil
		}
		if se := (stopError{}); errors.As(err, &se) {
			return time.Since(start), se.err
		}
		if time.Since(start) > timeout || ctx.Err() != nil {
			if what == "" {
				return time.Since(start), fmt.Errorf("after %s: %w", timeout, err)
			}
			return time.Since(start), fmt.Errorf("%s: not within %s: %w", what, timeout, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
		if o.every == 0 {
			interval = min(2*interval, maxInterval)
		}
	}
}

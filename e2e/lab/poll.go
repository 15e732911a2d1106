package lab

import (
	"context"
	"errors"
	"fmt"
	"time"
)

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// permanent marks an error that ends a poll at once.
func permanent(err error) error { return permanentError{err} }

// poll calls fn every 100 ms until it returns nil, a permanent error, ctx
// ends or timeout passes; then it returns fn's last error.
func poll(ctx context.Context, timeout time.Duration, fn func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		err := fn()
		if err == nil {
			return nil
		}
		var pe permanentError
		if errors.As(err, &pe) {
			return pe.err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("after %s: %w", timeout, err)
		case <-t.C:
		}
	}
}

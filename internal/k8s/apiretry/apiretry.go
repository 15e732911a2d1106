// Package apiretry keeps informers close behind an API server that comes
// back after an outage.
//
// client-go's Reflector backs off exponentially while the API server is
// unreachable: 0.8 s doubling to a cap of 30 s, each delay with up to 100 %
// jitter, reset only after 2 min without an error. After a 15 s outage its
// next attempt can be 30-60 s away, so a Service created right after the
// API server is back reached the speakers (and the wire) up to a minute
// later (measured in the e2e chaos scenario "API server stopped, then
// back": 34 s from the Service's address to its announcement). The
// Reflector's backoff is not configurable through SharedIndexInformer or
// controller-runtime, so [NewInformer] wraps the informer's ListerWatcher
// instead: List and Watch retry an unreachable API server themselves, with
// a short capped backoff ([FirstDelay] doubling to [MaxDelay], plus up to
// 50 % jitter), and the Reflector never sees those errors, so its own
// backoff never grows. Other errors (403 while the API server's
// authorizer warms up, 410 Gone, ...) go to the Reflector as before.
//
// [WaitReachable] holds a process that starts while the API server is
// unreachable until it answers, instead of letting it exit.
//
// The cost: during an outage each informer tries to connect every 2-3 s
// instead of every 30-60 s. A speaker has about a dozen informers, so a
// 1000-node cluster makes a few thousand connection attempts a second at
// an API server that is down; a watch that comes back resumes at its
// resourceVersion (no relist) when etcd kept its data.
package apiretry

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
)

// Retry timing while the API server is unreachable: the first retry after
// FirstDelay, each next one after twice the previous delay, at most
// MaxDelay; every delay gets up to 50 % jitter.
const (
	FirstDelay = 250 * time.Millisecond
	MaxDelay   = 2 * time.Second
)

// Unreachable reports whether err means the API server could not be
// reached or shed the request: connection refused or reset, an HTTP/2
// connection lost, a probable EOF, a network timeout, or HTTP 429 (Too
// Many Requests), 503 (Service Unavailable) or 504 (Gateway Timeout).
// Anything the API server decided (403, 404, 410, 500, ...) is not.
func Unreachable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var ne net.Error
	switch {
	case utilnet.IsConnectionRefused(err), utilnet.IsConnectionReset(err), utilnet.IsHTTP2ConnectionLost(err),
		utilnet.IsProbableEOF(err), utilnet.IsTimeout(err):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.As(err, &ne) && ne.Timeout():
		return true
	case apierrors.IsTooManyRequests(err), apierrors.IsServiceUnavailable(err), apierrors.IsTimeout(err):
		return true
	}
	return false
}

// Delays returns the retry delays of [FirstDelay] and [MaxDelay] without
// jitter: the first n delays, for documentation and tests.
func Delays(n int) []time.Duration {
	out := make([]time.Duration, 0, n)
	d := FirstDelay
	for range n {
		out = append(out, d)
		d = min(2*d, MaxDelay)
	}
	return out
}

// ListerWatcher is both client-go ListerWatcher interfaces (the Reflector
// uses the context ones when present).
type ListerWatcher interface {
	toolscache.ListerWatcher
	toolscache.ListerWatcherWithContext
}

// Wrap returns lw whose List and Watch (with a context) retry while the
// API server is [Unreachable], until they succeed, fail otherwise, or ctx
// ends (then ctx's error).
func Wrap(lw toolscache.ListerWatcher) ListerWatcher {
	return &listerWatcher{lw: toolscache.ToListerWatcherWithContext(lw), sleep: sleepCtx}
}

// NewInformer is a drop-in for controller-runtime's cache.Options
// NewInformer: client-go's NewSharedIndexInformer over Wrap(lw).
func NewInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	return toolscache.NewSharedIndexInformer(Wrap(lw), obj, resync, indexers)
}

type listerWatcher struct {
	lw    toolscache.ListerWatcherWithContext
	sleep func(context.Context, time.Duration) error
}

func (l *listerWatcher) List(opts metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), opts)
}

func (l *listerWatcher) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return l.WatchWithContext(context.Background(), opts)
}

func (l *listerWatcher) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	return retry(ctx, l.sleep, func() (runtime.Object, error) { return l.lw.ListWithContext(ctx, opts) })
}

func (l *listerWatcher) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return retry(ctx, l.sleep, func() (watch.Interface, error) { return l.lw.WatchWithContext(ctx, opts) })
}

// IsWatchListSemanticsUnSupported passes the wrapped ListerWatcher's
// answer on (client-go asks it to decide on streaming lists).
func (l *listerWatcher) IsWatchListSemanticsUnSupported() bool {
	u, ok := l.lw.(interface{ IsWatchListSemanticsUnSupported() bool })
	return ok && u.IsWatchListSemanticsUnSupported()
}

func retry[T any](ctx context.Context, sleep func(context.Context, time.Duration) error, call func() (T, error)) (T, error) {
	d := FirstDelay
	for {
		v, err := call()
		if !Unreachable(err) || ctx.Err() != nil {
			return v, err
		}
		if serr := sleep(ctx, d+rand.N(d/2)); serr != nil {
			return v, err
		}
		d = min(2*d, MaxDelay)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

package apiretry

import (
	"time"

	"k8s.io/client-go/util/workqueue"
)

// Retry timing of a failed write (a status object, a Service's status): the
// first retry after WriteFirstDelay, doubling per failure of the same item,
// at most WriteMaxDelay.
const (
	WriteFirstDelay = 20 * time.Millisecond
	WriteMaxDelay   = 5 * time.Second
)

// NewWriteRateLimiter returns the per-item rate limiter of Herald's write
// queues: exponential from WriteFirstDelay to WriteMaxDelay, nothing else.
//
// client-go's default controller limiter doubles from 5 ms up to 1000 s and
// adds an overall 10 retries/s bucket: after a one-minute API server outage
// an item that failed all along waits minutes more (2^n × 5 ms, ~20 failures
// in a minute), and a thousand failed items drain at 10 a second, so status
// objects stayed stale long after the API server was back (the controller's
// own limiter capped at 30 s). With WriteMaxDelay every failed write is
// retried within 5 s of the API server's return. The requests themselves
// are bounded by the client's QPS limit, which protects an API server that
// just came back.
func NewWriteRateLimiter[T comparable]() workqueue.TypedRateLimiter[T] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[T](WriteFirstDelay, WriteMaxDelay)
}

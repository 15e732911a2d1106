package apiretry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
)

// refusedErr is what client-go returns for an API server whose port is
// closed: a real request to a loopback port nobody listens on.
func refusedErr(t *testing.T) error {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "http://" + addr, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.CoreV1().Services("").Watch(context.Background(), metav1.ListOptions{})
	if err == nil {
		t.Fatal("watch of a closed port succeeded")
	}
	return err
}

func TestUnreachable(t *testing.T) {
	gr := schema.GroupResource{Resource: "services"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"connection refused (real request)", refusedErr(t), true},
		{"EOF", fmt.Errorf("watch: %w", io.ErrUnexpectedEOF), true},
		{"429", apierrors.NewTooManyRequests("slow down", 1), true},
		{"503", apierrors.NewServiceUnavailable("starting"), true},
		{"504", apierrors.NewTimeoutError("slow", 1), true},
		{"403 (authorizer warming up, or RBAC)", apierrors.NewForbidden(gr, "", errors.New("no")), false},
		{"410 Gone", apierrors.NewResourceExpired("too old"), false},
		{"500", apierrors.NewInternalError(errors.New("boom")), false},
		{"canceled", context.Canceled, false},
	} {
		if got := Unreachable(tc.err); got != tc.want {
			t.Errorf("%s: Unreachable(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// script is a ListerWatcher whose calls fail with errs in turn, then
// succeed.
type script struct {
	errs  []error
	calls int
}

func (s *script) next() error {
	s.calls++
	if len(s.errs) == 0 {
		return nil
	}
	err := s.errs[0]
	s.errs = s.errs[1:]
	return err
}

func (s *script) List(metav1.ListOptions) (runtime.Object, error) {
	if err := s.next(); err != nil {
		return nil, err
	}
	return &metav1.List{}, nil
}

func (s *script) Watch(metav1.ListOptions) (watch.Interface, error) {
	if err := s.next(); err != nil {
		return nil, err
	}
	return watch.NewEmptyWatch(), nil
}

// While the API server is unreachable, List and Watch retry with delays
// that double from FirstDelay and stay at most MaxDelay (+50 % jitter),
// however long the outage: client-go's Reflector reached 30-60 s. Other
// errors and the end of the context go back to the caller at once.
func TestRetry(t *testing.T) {
	refused := refusedErr(t)
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "", errors.New("no"))
	for _, tc := range []struct {
		name      string
		errs      []error
		watch     bool
		wantErr   error
		wantCalls int
	}{
		{"list through a 60 s outage", repeat(refused, 40), false, nil, 41},
		{"watch through a 60 s outage", repeat(refused, 40), true, nil, 41},
		{"watch: 429 then 503, then back", []error{apierrors.NewTooManyRequests("x", 1), apierrors.NewServiceUnavailable("x")}, true, nil, 3},
		{"watch: forbidden goes to the reflector", []error{refused, forbidden}, true, forbidden, 2},
		{"list: ok at once", nil, false, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &script{errs: tc.errs}
			var slept []time.Duration
			lw := &listerWatcher{lw: toolscache.ToListerWatcherWithContext(s), sleep: func(_ context.Context, d time.Duration) error {
				slept = append(slept, d)
				return nil
			}}
			var err error
			if tc.watch {
				_, err = lw.WatchWithContext(context.Background(), metav1.ListOptions{})
			} else {
				_, err = lw.ListWithContext(context.Background(), metav1.ListOptions{})
			}
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("error %v, want %v", err, tc.wantErr)
			}
			if s.calls != tc.wantCalls {
				t.Errorf("%d calls, want %d", s.calls, tc.wantCalls)
			}
			base := Delays(len(slept))
			for i, d := range slept {
				if d < base[i] || d > base[i]+base[i]/2 {
					t.Errorf("delay %d = %s, want in [%s, %s]", i, d, base[i], base[i]+base[i]/2)
				}
				if d > MaxDelay*3/2 {
					t.Errorf("delay %d = %s, over the cap %s", i, d, MaxDelay*3/2)
				}
			}
		})
	}
	t.Run("context ends during the outage", func(t *testing.T) {
		s := &script{errs: repeat(refused, 1000)}
		ctx, cancel := context.WithCancel(context.Background())
		n := 0
		lw := &listerWatcher{lw: toolscache.ToListerWatcherWithContext(s), sleep: func(ctx context.Context, _ time.Duration) error {
			if n++; n == 3 {
				cancel()
			}
			return ctx.Err()
		}}
		if _, err := lw.WatchWithContext(ctx, metav1.ListOptions{}); err == nil {
			t.Fatal("watch succeeded after the context ended")
		}
		if s.calls != 3 {
			t.Errorf("%d calls, want 3 (none after the context ended)", s.calls)
		}
	})
}

func TestDelays(t *testing.T) {
	got := fmt.Sprint(Delays(6))
	if want := "[250ms 500ms 1s 2s 2s 2s]"; got != want {
		t.Errorf("Delays(6) = %s, want %s", got, want)
	}
}

func repeat(err error, n int) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

// TestWriteRateLimiter: a write that keeps failing through a long outage is
// retried at most WriteMaxDelay after the previous attempt, and one item's
// failures do not delay another.
func TestWriteRateLimiter(t *testing.T) {
	rl := NewWriteRateLimiter[string]()
	var last time.Duration
	for i := range 40 { // > a minute of failures
		d := rl.When("a")
		if i == 0 && d != WriteFirstDelay {
			t.Errorf("first retry after %v, want %v", d, WriteFirstDelay)
		}
		if d > WriteMaxDelay || d < last {
			t.Fatalf("failure %d: retry after %v (previous %v), want non-decreasing up to %v", i+1, d, last, WriteMaxDelay)
		}
		last = d
	}
	if last != WriteMaxDelay {
		t.Errorf("after 40 failures retry after %v, want the cap %v", last, WriteMaxDelay)
	}
	if d := rl.When("b"); d != WriteFirstDelay {
		t.Errorf("another item's first retry after %v, want %v", d, WriteFirstDelay)
	}
	rl.Forget("a")
	if d := rl.When("a"); d != WriteFirstDelay {
		t.Errorf("after Forget, retry after %v, want %v", d, WriteFirstDelay)
	}
}

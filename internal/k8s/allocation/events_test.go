package allocation

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/herald-lb/herald/internal/k8s/eventrec"
	"github.com/herald-lb/herald/internal/poll"
)

// eventGate holds the requests that write Events until opened, in front of
// the real API server: an API server that takes no events for a while.
type eventGate struct {
	rt   http.RoundTripper
	held chan struct{}
	open chan struct{}
	once sync.Once
}

func (g *eventGate) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet && strings.Contains(req.URL.Path, "/events") {
		select {
		case <-g.open:
		default:
			select {
			case g.held <- struct{}{}:
			default:
			}
			select {
			case <-g.open:
			case <-req.Context().Done():
				return nil, req.Context().Err()
			}
		}
	}
	return g.rt.RoundTrip(req)
}

func (g *eventGate) release() { g.once.Do(func() { close(g.open) }) }

// While the API server takes no events, new Services still get their
// addresses (the fast path never waits for the recorder), and their
// IPAllocated events wait in the low-priority queue for room in the
// recorder's queue instead of being dropped: with a queue of 2 and 8 new
// Services, all 8 events are written once the API server takes them, and
// herald_events_dropped_total stays 0.
func TestEventsWaitForRoom(t *testing.T) {
	f := newFixture(t)
	f.pool("pool-a", []string{"198.51.100.10-198.51.100.29"})
	g := &eventGate{held: make(chan struct{}, 1), open: make(chan struct{})}
	cfg := rest.CopyConfig(srv.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { g.rt = rt; return g }
	reg := prometheus.NewRegistry()
	rec, err := eventrec.New(cfg, srv.Scheme, eventrec.Options{Component: eventrec.Controller, QueueSize: 2, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g.release()
		rec.Stop(context.Background())
	})
	f.start(func(o *Options) { o.Recorder = rec })

	// The first Services' events fill the recorder's queue and hold its
	// writer; later Services still get their addresses.
	const n = 8
	ips := map[string]string{}
	addressed := func(from, to int) {
		for i := from; i < to; i++ {
			name := fmt.Sprintf("s%d", i)
			poll.Until(t, 30*time.Second, name+" addressed while the API server takes no events", func() error {
				got := ingressStrings(f.get(name))
				if len(got) != 1 {
					return fmt.Errorf("ingress %v", got)
				}
				ips[name] = got[0]
				return nil
			})
		}
	}
	for i := range n / 2 {
		f.svc(fmt.Sprintf("s%d", i))
	}
	addressed(0, n/2)
	// The recorder's first write waits for the API server.
	poll.Until(t, time.Minute, "the recorder writing the first event", func() bool {
		select {
		case <-g.held:
			return true
		default:
			return false
		}
	})
	for i := n / 2; i < n; i++ {
		f.svc(fmt.Sprintf("s%d", i))
	}
	addressed(n/2, n)
	g.release()
	for name, ip := range ips {
		f.waitEvent(name, EventIPAllocated, fmt.Sprintf(`Assigned IP [%q]`, ip))
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if v := m.GetCounter().GetValue(); v != 0 {
				t.Errorf("%s%v = %v, want 0", mf.GetName(), m.GetLabel(), v)
			}
		}
	}
}

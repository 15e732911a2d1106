package members

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the package's Prometheus collectors. MetalLB exports no
// memberlist metrics, so these names are Herald's own.
type metrics struct {
	events *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, l *List) (*metrics, error) {
	m, cs := newCollectors(l)
	var errs []error
	for _, c := range cs {
		errs = append(errs, reg.Register(c))
	}
	return m, errors.Join(errs...)
}

// MetricDescs describes the memberlist metrics as the speaker registers
// them (herald_memberlist_*: names and variable labels, for documentation
// and dashboard checks; the descriptors belong to no running List).
func MetricDescs() []*prometheus.Desc {
	_, cs := newCollectors(&List{})
	ch := make(chan *prometheus.Desc)
	go func() {
		for _, c := range cs {
			c.Describe(ch)
		}
		close(ch)
	}()
	var out []*prometheus.Desc
	for d := range ch {
		out = append(out, d)
	}
	return out
}

// newCollectors builds the metrics of l and every collector to register.
func newCollectors(l *List) (*metrics, []prometheus.Collector) {
	m := &metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_memberlist_member_events_total",
			Help: "Membership changes of other speakers seen by this speaker, by event: join, leave (graceful), failed (detected dead).",
		}, []string{"event"}),
	}
	for _, ev := range []string{"join", "leave", "failed"} {
		m.events.WithLabelValues(ev)
	}
	members := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "herald_memberlist_members",
		Help: "Speakers this speaker considers alive (alive or suspect), itself included.",
	}, func() float64 {
		n := 0
		for _, alive := range l.Live() {
			if alive {
				n++
			}
		}
		return float64(n)
	})
	health := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "herald_memberlist_health_score",
		Help: "memberlist's local health (Lifeguard awareness) score: 0 is healthy, higher means this speaker misses probe deadlines and stretches its timeouts.",
	}, func() float64 {
		l.mu.Lock()
		ml := l.ml
		l.mu.Unlock()
		if ml == nil {
			return 0
		}
		return float64(ml.GetHealthScore())
	})
	joined := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "herald_memberlist_joined",
		Help: "1 once this speaker has joined the other speakers (or learned it is alone) and takes part in layer 2 election, else 0 (start-up gate).",
	}, func() float64 {
		if l.Joined() {
			return 1
		}
		return 0
	})
	return m, append([]prometheus.Collector{m.events, members, health, joined}, keyMetrics(l)...)
}

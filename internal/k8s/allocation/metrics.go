package allocation

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the controller's own metrics (beyond MetalLB's set).
type metrics struct {
	// duration: Service creation or request change until its IPs are
	// written to status, in seconds.
	duration prometheus.Histogram
	// pending: Services waiting for an address.
	pending prometheus.Gauge
	// writeErrors: refused Service status writes, by API status reason.
	writeErrors *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "herald_allocation_duration_seconds",
			Help:    "Time from a Service's creation (or a change of its request) until its LoadBalancer IPs are written to its status, in seconds.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14), // 5 ms .. ~41 s
		}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "herald_services_pending",
			Help: "Number of LoadBalancer Services waiting for an address (allocation failed; retried when addresses free up or the configuration changes).",
		}),
		writeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_service_status_write_errors_total",
			Help: "Service status writes the API server refused, by reason (Conflict: the Service changed since it was read, re-read and decided again; Forbidden, Invalid, ...: retried).",
		}, []string{"reason"}),
	}
	if reg != nil {
		for _, col := range []prometheus.Collector{m.duration, m.pending, m.writeErrors} {
			if err := reg.Register(col); err != nil {
				return nil, fmt.Errorf("allocation: register metrics: %w", err)
			}
		}
	}
	return m, nil
}

// MetricDescs describes the controller's allocation metrics as it registers
// them: MetalLB's metallb_allocator_* pool gauges and Herald's
// herald_services_pending, herald_allocation_duration_seconds and
// herald_service_status_write_errors_total (names and variable labels, for
// documentation and dashboard checks; the descriptors belong to no running
// controller).
func MetricDescs() []*prometheus.Desc {
	m, _ := newMetrics(nil)
	cs := []prometheus.Collector{m.duration, m.pending, m.writeErrors}
	for _, g := range newPoolGauges() {
		cs = append(cs, g)
	}
	return describe(cs...)
}

// describe collects the descriptors of cs.
func describe(cs ...prometheus.Collector) []*prometheus.Desc {
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

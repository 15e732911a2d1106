package layer2

import (
	"fmt"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics holds the layer 2 counters under MetalLB's names
// (metallb_layer2_*), labelled by the announced IP, and Herald's own
// herald_layer2_conflicts_total{ip,interface}.
type metrics struct {
	requests   *prometheus.CounterVec
	responses  *prometheus.CounterVec
	gratuitous *prometheus.CounterVec
	conflicts  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "metallb", Subsystem: "layer2", Name: "requests_received",
			Help: "Number of ARP requests and neighbor solicitations received for an announced IP.",
		}, []string{"ip"}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "metallb", Subsystem: "layer2", Name: "responses_sent",
			Help: "Number of ARP replies and neighbor advertisements sent in answer to a request for an announced IP.",
		}, []string{"ip"}),
		gratuitous: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "metallb", Subsystem: "layer2", Name: "gratuitous_sent",
			Help: "Number of gratuitous ARP packets and unsolicited neighbor advertisements sent for an announced IP.",
		}, []string{"ip"}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "herald", Subsystem: "layer2", Name: "conflicts_total",
			Help: "Number of received ARP packets and neighbor advertisements in which another MAC address claims an IP announced on the interface.",
		}, []string{"ip", "interface"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.responses, m.gratuitous, m.conflicts} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register layer2 metrics: %w", err)
		}
	}
	return m, nil
}

// MetricDescs describes the announcer's metrics as the speaker registers
// them: MetalLB's metallb_layer2_* counters and Herald's
// herald_layer2_conflicts_total (names and variable labels, for
// documentation and dashboard checks; the descriptors belong to no running
// announcer).
func MetricDescs() []*prometheus.Desc {
	m, _ := newMetrics(nil)
	return describe(m.requests, m.responses, m.gratuitous, m.conflicts)
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

// forget drops the series of an IP that is no longer announced, so that the
// label set does not grow with every IP the node ever announced.
func (m *metrics) forget(ip netip.Addr) {
	l := prometheus.Labels{"ip": ip.String()}
	m.requests.Delete(l)
	m.responses.Delete(l)
	m.gratuitous.Delete(l)
	m.conflicts.DeletePartialMatch(l)
}

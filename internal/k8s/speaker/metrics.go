package speaker

import (
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Values of the change label of herald_layer2_announcer_changes_total.
const (
	changeGained = "gained"
	changeLost   = "lost"
)

// announcedMetric is metallb_speaker_announced{service,protocol,node,ip}: 1
// for every IP this node announces, per protocol ("layer2" or "bgp"), and
// Herald's herald_layer2_announcer_changes_total{node,change}: the layer 2
// addresses this node started ("gained") and stopped ("lost") announcing.
//
// The gauge is 1 for as long as a series exists, so changes() or
// increase() of it counts nothing when the announcing node moves: the
// series of the old node disappears and the new node's appears at 1. The
// counter is the series a failover panel or alert reads.
//
// The gauge's series are made when collected, from the announced IPs of
// each Service (set): a GaugeVec would keep every series' label values
// and pairs, about 600 B per Service at rest.
type announcedMetric struct {
	desc    *prometheus.Desc
	node    string
	changes *prometheus.CounterVec

	mu sync.Mutex
	// bySvc: service ("namespace/name") -> its announced IPs, sorted; not
	// modified after set.
	bySvc map[string][]announcedIP
}

// newAnnouncedMetric builds the speaker's metrics for node and registers
// them with reg (nil: not registered). Both change series of node start at
// 0, so increase() sees the first failover to or from it.
func newAnnouncedMetric(reg prometheus.Registerer, node string) (*announcedMetric, error) {
	m := &announcedMetric{
		desc: prometheus.NewDesc("metallb_speaker_announced",
			"Services being announced from this node. This is desired state, it does not guarantee that the routing protocols have converged.",
			[]string{"service", "protocol", "node", "ip"}, nil),
		node: node,
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "herald",
			Subsystem: "layer2",
			Name:      "announcer_changes_total",
			Help:      "Layer 2 addresses this node started (change=gained: elected, a failover to it, a new Service, this speaker started) or stopped (change=lost: another node elected, withdrawn, Service deleted) announcing, counted once per Service and address.",
		}, []string{"node", "change"}),
		bySvc: map[string][]announcedIP{},
	}
	for _, c := range []string{changeGained, changeLost} {
		m.changes.WithLabelValues(node, c)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.gauge(), m.changes} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// gauge returns the collector of metallb_speaker_announced.
func (m *announcedMetric) gauge() prometheus.Collector { return announcedGauge{m} }

// announcedGauge collects metallb_speaker_announced from an announcedMetric.
type announcedGauge struct{ m *announcedMetric }

func (g announcedGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.m.desc }

func (g announcedGauge) Collect(ch chan<- prometheus.Metric) {
	m := g.m
	m.mu.Lock()
	defer m.mu.Unlock()
	for svc, as := range m.bySvc {
		for _, a := range as {
			ch <- prometheus.MustNewConstMetric(m.desc, prometheus.GaugeValue, 1, svc, a.protocol.String(), m.node, a.ip.String())
		}
	}
}

// MetricDescs describes the speaker glue's metrics (metallb_speaker_announced,
// herald_layer2_announcer_changes_total and herald_layer2_handovers_total) as the speaker registers them:
// names and variable labels for documentation and dashboard checks. The
// descriptors belong to no running speaker.
func MetricDescs() []*prometheus.Desc {
	m, _ := newAnnouncedMetric(nil, "")
	return describe(m.gauge(), m.changes, newHandoverCounter())
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

// announcement is one (protocol, IP) of a Service in a decision's
// reasons for not announcing (notAnnouncedOf, handOver): protocol is
// protoL2 or protoBGP, ip the address as a string ("" for the Service as a
// whole).
type announcement struct {
	protocol string
	ip       string
}

// set makes the series of service equal to now, given the previous set
// (both sorted; set keeps now, which must not be modified afterwards), and
// counts the layer 2 announcements gained and lost.
func (m *announcedMetric) set(service string, prev, now []announcedIP) {
	for _, a := range prev {
		if _, found := slices.BinarySearchFunc(now, a, compareAnnounced); !found && a.protocol == protocolL2 {
			m.changes.WithLabelValues(m.node, changeLost).Inc()
		}
	}
	for _, a := range now {
		if _, found := slices.BinarySearchFunc(prev, a, compareAnnounced); !found && a.protocol == protocolL2 {
			m.changes.WithLabelValues(m.node, changeGained).Inc()
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(now) == 0 {
		delete(m.bySvc, service)
	} else {
		m.bySvc[service] = now
	}
}

// notAnnouncedMetric is herald_speaker_not_announced{node,protocol,reason}:
// how many Service IPs (per protocol) this node decided not to announce,
// by reason (announce.Reason's names, plus the glue's memberlistNotJoined
// and interfacesNotListed). A Service refused before any IP is looked at
// (noIPAllocated, invalidIP) counts once with no IP. Services that are not
// Herald's (notLoadBalancer, otherLoadBalancerClass) are not counted.
type notAnnouncedMetric struct {
	vec  *prometheus.GaugeVec
	node string
}

func newNotAnnouncedMetric(reg prometheus.Registerer, node string) (*notAnnouncedMetric, error) {
	m := &notAnnouncedMetric{node: node, vec: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "herald",
		Subsystem: "speaker",
		Name:      "not_announced",
		Help:      "Service IPs this node does not announce, per protocol and reason (the speaker's decision; notOwner: another node won the layer 2 election).",
	}, []string{"node", "protocol", "reason"})}
	if reg != nil {
		if err := reg.Register(m.vec); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *notAnnouncedMetric) add(protocol, reason string, delta float64) {
	m.vec.WithLabelValues(m.node, protocol, reason).Add(delta)
}

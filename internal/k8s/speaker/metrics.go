package speaker

import (
	"github.com/prometheus/client_golang/prometheus"
)

// announcedMetric is metallb_speaker_announced{service,protocol,node,ip}: 1
// for every IP this node announces, per protocol ("layer2" or "bgp").
type announcedMetric struct {
	vec *prometheus.GaugeVec
}

func newAnnouncedMetric(reg prometheus.Registerer) (*announcedMetric, error) {
	m := &announcedMetric{vec: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "metallb",
		Subsystem: "speaker",
		Name:      "announced",
		Help:      "Services being announced from this node. This is desired state, it does not guarantee that the routing protocols have converged.",
	}, []string{"service", "protocol", "node", "ip"})}
	if reg != nil {
		if err := reg.Register(m.vec); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// announcement is one (protocol, IP) a Service is announced with.
type announcement struct {
	protocol string
	ip       string
}

// set makes the series of service equal to now, given the previous set.
func (m *announcedMetric) set(service, node string, prev, now map[announcement]bool) {
	for a := range prev {
		if !now[a] {
			m.vec.DeleteLabelValues(service, a.protocol, node, a.ip)
		}
	}
	for a := range now {
		m.vec.WithLabelValues(service, a.protocol, node, a.ip).Set(1)
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

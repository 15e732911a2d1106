package bfdnet

import (
	"fmt"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"
)

// defaultVRF is the vrf label value: Herald's BFD sessions all run in the
// default VRF, which MetalLB's FRR mode labels "default".
const defaultVRF = "default"

// metrics holds the per-session series under MetalLB's FRR-mode names
// (metallb_bfd_*, labels peer = the peer's IP and vrf) and Herald's own
// herald_bfd_control_packets_dropped_total{reason}. MetalLB's
// echo_packet_* and zebra_notifications have no counterpart here: Herald
// has no Echo function and no zebra.
type metrics struct {
	up        *prometheus.GaugeVec
	in, out   *prometheus.CounterVec
	upEvents  *prometheus.CounterVec
	downEvent *prometheus.CounterVec
	dropped   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	labels := []string{"peer", "vrf"}
	m := &metrics{
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "metallb", Subsystem: "bfd", Name: "session_up",
			Help: "BFD session state (1 is up, 0 is down)",
		}, labels),
		in: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "metallb", Subsystem: "bfd", Name: "control_packet_input",
			Help: "Number of received BFD control packets",
		}, labels),
		out: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "metallb", Subsystem: "bfd", Name: "control_packet_output",
			Help: "Number of sent BFD control packets",
		}, labels),
		upEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "metallb", Subsystem: "bfd", Name: "session_up_events",
			Help: "Number of BFD session up events",
		}, labels),
		downEvent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "metallb", Subsystem: "bfd", Name: "session_down_events",
			Help: "Number of BFD session down events",
		}, labels),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "herald", Subsystem: "bfd", Name: "control_packets_dropped_total",
			Help: "Number of received BFD control packets discarded, by reason (malformed, auth, ttl, no-session, source).",
		}, []string{"reason"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.up, m.in, m.out, m.upEvents, m.downEvent, m.dropped} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register bfd metrics: %w", err)
		}
	}
	return m, nil
}

// MetricDescs describes the BFD metrics as the speaker registers them:
// MetalLB's metallb_bfd_* and Herald's herald_bfd_control_packets_dropped_total
// (names and variable labels, for documentation and dashboard checks; the
// descriptors belong to no running manager).
func MetricDescs() []*prometheus.Desc {
	m, _ := newMetrics(nil)
	return describe(m.up, m.in, m.out, m.upEvents, m.downEvent, m.dropped)
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

func peerLabels(peer netip.Addr) prometheus.Labels {
	return prometheus.Labels{"peer": peer.String(), "vrf": defaultVRF}
}

// forget drops a removed session's series.
func (m *metrics) forget(peer netip.Addr) {
	l := peerLabels(peer)
	m.up.Delete(l)
	m.in.Delete(l)
	m.out.Delete(l)
	m.upEvents.Delete(l)
	m.downEvent.Delete(l)
}

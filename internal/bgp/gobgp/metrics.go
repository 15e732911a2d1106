package gobgp

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/herald-lb/herald/internal/bgp"
)

// collector exports MetalLB's BGP metrics (label peer = "IP:port"). It is a
// scrape-time collector: every Collect reads gobgp's ListPeer (session
// state, UPDATE counter, advertised prefixes) and the speaker's desired
// paths, so values are never stale and no event bookkeeping is needed.
//
//   - metallb_bgp_session_up (gauge): 1 if Established, else 0.
//   - metallb_bgp_updates_total (counter): UPDATE messages sent on the
//     current session object (resets when the peer is recreated).
//   - metallb_bgp_announced_prefixes_total (gauge): prefixes in the peer's
//     Adj-RIB-Out (gobgp's advertised count).
//   - metallb_bgp_pending_prefixes_total (gauge): desired prefixes for the
//     peer minus announced, floored at 0 (all of them while the session is down).
type collector struct {
	s                                  *Speaker
	sessionUp, updates, announced, pnd *prometheus.Desc
}

func newCollector(s *Speaker) *collector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName("metallb", "bgp", name), help, []string{"peer"}, nil)
	}
	return &collector{
		s:         s,
		sessionUp: d("session_up", "BGP session state (1 is up, 0 is down)"),
		updates:   d("updates_total", "Number of BGP UPDATE messages sent"),
		announced: d("announced_prefixes_total", "Number of prefixes currently being advertised on the BGP session"),
		pnd:       d("pending_prefixes_total", "Number of prefixes that should be advertised on the BGP session"),
	}
}

// MetricDescs describes MetalLB's metallb_bgp_* metrics as the speaker
// registers them (names and variable labels, for documentation and
// dashboard checks; the descriptors belong to no running speaker).
func MetricDescs() []*prometheus.Desc {
	ch := make(chan *prometheus.Desc, 4)
	newCollector(&Speaker{}).Describe(ch)
	close(ch)
	var out []*prometheus.Desc
	for d := range ch {
		out = append(out, d)
	}
	return out
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.sessionUp
	ch <- c.updates
	ch <- c.announced
	ch <- c.pnd
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	want := c.s.pathsPerPeer()
	for _, ps := range c.s.PeerStates() {
		up := 0.0
		if ps.State == bgp.StateEstablished {
			up = 1
		}
		pending := max(float64(want[ps.Name])-float64(ps.Advertised), 0)
		ch <- prometheus.MustNewConstMetric(c.sessionUp, prometheus.GaugeValue, up, ps.Peer)
		ch <- prometheus.MustNewConstMetric(c.updates, prometheus.CounterValue, float64(ps.UpdatesSent), ps.Peer)
		ch <- prometheus.MustNewConstMetric(c.announced, prometheus.GaugeValue, float64(ps.Advertised), ps.Peer)
		ch <- prometheus.MustNewConstMetric(c.pnd, prometheus.GaugeValue, pending, ps.Peer)
	}
}

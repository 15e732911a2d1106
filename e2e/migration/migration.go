// Package migration is the migration test with the real MetalLB (e2e
// TestMigration is its short form, `make bench-migration` its full form):
// MetalLB v0.16.2's controller and speaker, built from their Go module,
// installed in a lab from MetalLB's own manifests (native BGP mode), with
// layer 2 Services (IPv4, a shared address, a dual-stack Service) and BGP
// Services, and a client polling every address; then the documented
// in-place migration (docs/migrating-from-metallb.md, "Node by node"):
// Herald's manifests for metallb-system in the migration mode
// (manifests/metallb-migration), the controller swapped, then the speakers
// node by node, each node drained first (labeled
// node.kubernetes.io/exclude-from-external-load-balancers until nothing is
// announced from it, the speaker swapped, the label removed); then the
// rollback to MetalLB the same way, node by node, and the controller. Run
// measures each of the two switches: Services whose address changed, layer
// 2 addresses without an answerer or with two, BGP paths the router lost,
// and the client's requests lost.
package migration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/herald-lb/herald/e2e/lab"
	"github.com/herald-lb/herald/internal/poll"
)

// Manifests is the kustomize directory of Herald in metallb-system in the
// migration mode.
const Manifests = "manifests/metallb-migration"

// HelmValues is the chart's values file for the same migration mode, the
// overlay's Helm twin (docs/migrating-from-metallb.md, "Node by node with
// Helm").
const HelmValues = "manifests/metallb-migration/helm-values.yaml"

// Options shape a run.
type Options struct {
	// Interval is the pause between two requests of one address's poller;
	// 0 means 100 ms.
	Interval time.Duration
	// Observe is how long the client keeps polling after each node's swap
	// once everything converged, before the next node; 0 means 2 s.
	Observe time.Duration
	// Rounds is how many migrate-and-roll-back rounds run; 0 means 1.
	Rounds int
	// Log receives progress; nil discards it.
	Log *slog.Logger
	// Helm installs Herald with its chart and HelmValues (after
	// hack/adopt-metallb-crds.sh herald metallb-system) instead of the
	// kustomize overlay Manifests.
	Helm bool
}

func (o *Options) defaults() {
	if o.Interval == 0 {
		o.Interval = 100 * time.Millisecond
	}
	if o.Observe == 0 {
		o.Observe = 2 * time.Second
	}
	if o.Rounds == 0 {
		o.Rounds = 1
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
}

// Phase names.
const (
	// PhaseBaseline is MetalLB's own speaker rollout, for comparison: a
	// plain DaemonSet rollout (each speaker restarted on its node, no
	// drain), the baseline a MetalLB user has today.
	PhaseBaseline = "MetalLB → MetalLB (its own rollout, no drain, for comparison)"
	PhaseMigrate  = "MetalLB → Herald"
	PhaseRollback = "Herald → MetalLB (rollback)"
)

// Row is one measure of one phase.
type Row struct {
	Phase, Measure, Value, Target string
	// Met reports whether Value meets Target ("reported" rows always do).
	Met bool
}

// Result is what a run measured.
type Result struct {
	Rows  []Row
	Notes []string
}

// Table renders the result as Markdown, preceded by the date and machine
// line the caller passes (see docs/migrating-from-metallb.md).
func (r Result) Table() string {
	var b strings.Builder
	fmt.Fprintln(&b, "| switch | measure | value | target | met |")
	fmt.Fprintln(&b, "|---|---|---|---|---|")
	for _, row := range r.Rows {
		met := "yes"
		if !row.Met {
			met = "**no**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", row.Phase, row.Measure, row.Value, row.Target, met)
	}
	if len(r.Notes) > 0 {
		fmt.Fprintln(&b)
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

// target is one polled address.
type target struct {
	svc  string // namespace/name
	ip   netip.Addr
	bgp  bool
	port int
}

// The two rows of probes answered by two nodes while one of them was a
// MetalLB speaker shutting down (it leaves memberlist first and answers
// until its process exits), by who took the address over.
const (
	// MeasureStoppingHerald: the taker was Herald's speaker, which probes
	// the address until the MetalLB speaker is silent before it answers
	// (docs/l2-failover.md, "Hand-over"): target 0.
	MeasureStoppingHerald = "layer 2: ARP probes (× address) answered by two nodes, one a MetalLB speaker shutting down (it leaves memberlist, then answers until it exits), the other Herald's (it probes first)"
	// MeasureStoppingMetalLB: the taker was another MetalLB speaker,
	// which answers at once (MetalLB's behaviour, as in its own rollout):
	// reported.
	MeasureStoppingMetalLB = "layer 2: ARP probes (× address) answered by two nodes, one a MetalLB speaker shutting down (it leaves memberlist, then answers until it exits), the other a MetalLB speaker"
)

// The two rows of probes answered by two running speakers (neither
// shutting down), by who took the address: the node that answers and did
// not answer the address's last probe with a single answerer (every
// answerer when there was none in the phase).
const (
	// MeasureDoubleHerald: a taker was Herald's speaker, which waits for
	// the holder's release or probes a MetalLB holder before it answers
	// (docs/l2-failover.md, "Hand-over"): target 0.
	MeasureDoubleHerald = "layer 2: ARP probes (× address) answered by two running speakers, the taker Herald's (it hands over)"
	// MeasureDoubleMetalLB: the taker was a MetalLB speaker, which answers
	// at once, while the holder stops only once it has processed the same
	// Node event or memberlist join (MetalLB's behaviour, also in its own
	// rollout, and rolling back from Herald): reported.
	MeasureDoubleMetalLB = "layer 2: ARP probes (× address) answered by two running speakers, the taker a MetalLB speaker (it answers at once)"
)

// sample is one observation of the monitor.
type sample struct {
	at time.Time
	// arp: per layer 2 IPv4 address, the nodes that answered one probe.
	arp map[netip.Addr][]string
	// paths: per BGP prefix, the nodes the router has a path from (nil
	// when this sample is an ARP one).
	paths map[string][]string
}

// request is one HTTP request of a poller.
type request struct {
	at   time.Time
	ok   bool
	node string
	err  string
}

// monitor polls every address over HTTP, probes every layer 2 IPv4
// address with ARP and reads the router's table, recording everything
// with timestamps; phases are cut out of the records afterwards.
type monitor struct {
	l       *lab.Lab
	o       Options
	targets []target
	v4L2    []netip.Addr
	bgp     []string
	ns      string
	want    map[string][]string // Service -> ingress IPs before
	mu      sync.Mutex
	reqs    map[netip.Addr][]request
	samples []sample
	changed map[string]string // Service -> first changed addresses seen
	// stopping are, per node, the times its MetalLB speaker was shutting
	// down (SIGTERM until the process exited).
	stopping map[string][][2]time.Time
	// herald are, per node, the times Herald's speaker may have run there
	// (from just before it was started until it was removed; a zero end:
	// still running).
	herald map[string][][2]time.Time
	// drains are the times each drain took (the label set until the node
	// answered nothing and the router had no path from it).
	drains [][2]time.Time
	errs   []error
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (m *monitor) start(ctx context.Context) {
	ctx, m.cancel = context.WithCancel(ctx)
	for _, t := range m.targets {
		m.wg.Go(func() {
			for ctx.Err() == nil {
				rctx, cancel := context.WithTimeout(ctx, time.Second)
				at := time.Now()
				r, err := m.l.Get(rctx, m.l.ClientNamespace(), t.ip, t.port)
				cancel()
				if ctx.Err() != nil {
					return
				}
				q := request{at: at, ok: err == nil, node: r.Node}
				if err != nil {
					q.err = err.Error()
				}
				m.mu.Lock()
				m.reqs[t.ip] = append(m.reqs[t.ip], q)
				m.mu.Unlock()
				sleep(ctx, m.o.Interval)
			}
		})
	}
	m.wg.Go(func() { // who answers ARP for each layer 2 IPv4 address
		for ctx.Err() == nil {
			at := time.Now()
			who, err := m.l.ProbeARP(ctx, m.v4L2, 150*time.Millisecond)
			if ctx.Err() != nil {
				return
			}
			m.mu.Lock()
			if err != nil {
				m.errs = append(m.errs, err)
			} else {
				m.samples = append(m.samples, sample{at: at, arp: who})
			}
			m.mu.Unlock()
			sleep(ctx, 100*time.Millisecond)
		}
	})
	m.wg.Go(func() { // the router's paths, and the Services' addresses
		for ctx.Err() == nil {
			at := time.Now()
			routes, err := m.l.BGPRoutes(ctx, "ipv4")
			if ctx.Err() != nil {
				return
			}
			paths := map[string][]string{}
			for _, p := range m.bgp {
				paths[p] = []string{}
				for _, bp := range routes[p] {
					for _, n := range m.l.Nodes {
						if pathFrom(bp, n.IPv4) && !slices.Contains(paths[p], n.Name) {
							paths[p] = append(paths[p], n.Name)
						}
					}
				}
				sort.Strings(paths[p])
			}
			got, serr := serviceIPs(ctx, m.l, m.ns)
			m.mu.Lock()
			if err != nil {
				m.errs = append(m.errs, err)
			} else {
				m.samples = append(m.samples, sample{at: at, paths: paths})
			}
			if serr == nil {
				for svc, ips := range m.want {
					if !slices.Equal(got[svc], ips) && m.changed[svc] == "" {
						m.changed[svc] = fmt.Sprintf("%v at %s", got[svc], at.UTC().Format("15:04:05.000"))
					}
				}
			}
			m.mu.Unlock()
			sleep(ctx, 200*time.Millisecond)
		}
	})
}

// stopMetalLBSpeaker stops node's MetalLB speaker and records how long it
// took.
func (m *monitor) stopMetalLBSpeaker(ctx context.Context, ml *lab.MetalLB, node string) error {
	from := time.Now()
	err := ml.StopSpeaker(ctx, node)
	m.mu.Lock()
	m.stopping[node] = append(m.stopping[node], [2]time.Time{from, time.Now()})
	m.mu.Unlock()
	return err
}

// shuttingDown returns the nodes of who whose MetalLB speaker was
// shutting down at at (or up to slack before).
func (m *monitor) shuttingDown(who []string, at time.Time, slack time.Duration) []string {
	var out []string
	for _, n := range who {
		for _, iv := range m.stopping[n] {
			if !at.Before(iv[0]) && !at.After(iv[1].Add(slack)) {
				out = append(out, n)
				break
			}
		}
	}
	return out
}

// drained records a drain that ran from from to to.
func (m *monitor) drained(from, to time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.drains = append(m.drains, [2]time.Time{from, to})
}

// heraldSpeaker records that Herald's speaker on node is about to start
// (running) or has been removed.
func (m *monitor) heraldSpeaker(node string, running bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.herald == nil {
		m.herald = map[string][][2]time.Time{}
	}
	ivs := m.herald[node]
	switch {
	case running:
		m.herald[node] = append(ivs, [2]time.Time{time.Now()})
	case len(ivs) > 0 && ivs[len(ivs)-1][1].IsZero():
		ivs[len(ivs)-1][1] = time.Now()
	}
}

// heraldAt reports whether Herald's speaker may have run on node at at.
func (m *monitor) heraldAt(node string, at time.Time) bool {
	for _, iv := range m.herald[node] {
		if !at.Before(iv[0]) && (iv[1].IsZero() || !at.After(iv[1])) {
			return true
		}
	}
	return false
}

// heraldTook reports whether one of who (the nodes answering a probe at
// at) that is not among from (the previous holder, or the MetalLB speaker
// shutting down) ran Herald's speaker then: Herald's took the address.
func (m *monitor) heraldTook(who, from []string, at time.Time) bool {
	for _, n := range who {
		if !slices.Contains(from, n) && m.heraldAt(n, at) {
			return true
		}
	}
	return false
}

func (m *monitor) stop() {
	m.cancel()
	m.wg.Wait()
}

// measure computes the rows of one phase, from the records between from
// and to.
func (m *monitor) measure(phase string, from, to time.Time, changedBefore map[string]string) ([]Row, []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var rows []Row
	var notes []string
	// Services whose address changed during the phase.
	var changed []string
	for svc, v := range m.changed {
		if _, old := changedBefore[svc]; !old {
			changed = append(changed, svc+" → "+v)
		}
	}
	sort.Strings(changed)
	rows = append(rows, countRow(phase, "Services whose address changed", len(changed), len(m.want)))
	notes = append(notes, prefixAll(phase+": address changed: ", changed)...)

	// Layer 2, from the ARP probes: the longest time an address had no
	// answerer (from the last probe answered before to the first answered
	// after), and probes answered by two nodes or more.
	var longest time.Duration
	var longestAddr netip.Addr
	var longestFrom time.Time
	probes, double, doubleHerald, doubleStopping, doubleStoppingHerald := 0, 0, 0, 0, 0
	for _, a := range m.v4L2 {
		lastOK, lastAt := from, from
		var holder []string // the answerer of the last probe with one answerer
		for _, s := range m.samples {
			if s.arp == nil || s.at.Before(from) || s.at.After(to) {
				continue
			}
			probes++
			lastAt = s.at
			who := s.arp[a]
			if len(who) >= 2 {
				// The probe collects replies for 150 ms after s.at.
				if stopping := m.shuttingDown(who, s.at, 200*time.Millisecond); len(stopping) > 0 {
					// Who took the address over: Herald's speaker probes
					// before it answers (announce.Handover), MetalLB's
					// answers at once.
					if m.heraldTook(who, stopping, s.at) {
						doubleStoppingHerald++
						notes = append(notes, fmt.Sprintf("%s: %s answered by %v at %s, while MetalLB's speaker on %v was shutting down and Herald's had taken over",
							phase, a, who, s.at.UTC().Format("15:04:05.000"), stopping))
					} else if doubleStopping++; doubleStopping <= 2 {
						notes = append(notes, fmt.Sprintf("%s: %s answered by %v at %s, while MetalLB's speaker on %v was shutting down and another MetalLB speaker had taken over",
							phase, a, who, s.at.UTC().Format("15:04:05.000"), stopping))
					}
				} else {
					if m.heraldTook(who, holder, s.at) {
						doubleHerald++
						notes = append(notes, fmt.Sprintf("%s: %s answered by %v at %s, Herald's speaker taking it from %v", phase, a, who, s.at.UTC().Format("15:04:05.000"), holder))
					} else if double++; double <= 3 {
						notes = append(notes, fmt.Sprintf("%s: %s answered by %v at %s, a MetalLB speaker taking it from %v", phase, a, who, s.at.UTC().Format("15:04:05.000"), holder))
					}
				}
			}
			if len(who) == 1 {
				holder = who
			}
			if len(who) > 0 {
				if d := s.at.Sub(lastOK); d > longest {
					longest, longestAddr, longestFrom = d, a, lastOK
				}
				lastOK = s.at
			}
		}
		if d := lastAt.Sub(lastOK); d > longest { // unanswered until the end
			longest, longestAddr, longestFrom = d, a, lastOK
		}
	}
	rows = append(rows,
		Row{Phase: phase, Measure: "layer 2 (ARP probes every ~0.25 s): longest time between two answered probes of one address",
			Value: fmt.Sprintf("%.3f s", longest.Seconds()), Target: "≤ 1 s", Met: longest <= time.Second},
		countRow(phase, MeasureDoubleHerald, doubleHerald, probes),
		Row{Phase: phase, Measure: MeasureDoubleMetalLB,
			Value: fmt.Sprintf("%d of %d", double, probes), Target: "reported (MetalLB's takeover)", Met: true},
		countRow(phase, MeasureStoppingHerald, doubleStoppingHerald, probes),
		Row{Phase: phase, Measure: MeasureStoppingMetalLB,
			Value: fmt.Sprintf("%d of %d", doubleStopping, probes), Target: "reported (MetalLB's shutdown order)", Met: true})
	// How long MetalLB's speakers took to shut down (SIGTERM to exit):
	// they answer until they exit, so a Herald speaker that takes over
	// waits about that long (at most --l2-handover-timeout).
	var stops []time.Duration
	for _, ivs := range m.stopping {
		for _, iv := range ivs {
			if !iv[0].Before(from) && !iv[1].After(to) {
				stops = append(stops, iv[1].Sub(iv[0]))
			}
		}
	}
	if len(stops) > 0 {
		slices.Sort(stops)
		notes = append(notes, fmt.Sprintf("%s: MetalLB speakers' shutdowns (SIGTERM to exit): %d, %s to %s", phase, len(stops),
			stops[0].Round(time.Millisecond), stops[len(stops)-1].Round(time.Millisecond)))
	}
	var drains []time.Duration
	for _, iv := range m.drains {
		if !iv[0].Before(from) && !iv[1].After(to) {
			drains = append(drains, iv[1].Sub(iv[0]))
		}
	}
	if len(drains) > 0 {
		slices.Sort(drains)
		notes = append(notes, fmt.Sprintf("%s: drains (node labeled until it announced nothing, as the monitor saw it): %d, %s to %s", phase, len(drains),
			drains[0].Round(time.Millisecond), drains[len(drains)-1].Round(time.Millisecond)))
	}
	if longestAddr.IsValid() {
		notes = append(notes, fmt.Sprintf("%s: longest layer 2 gap on %s, after the probe at %s", phase, longestAddr,
			longestFrom.UTC().Format("15:04:05.000")))
	}

	// BGP, from the router's table: paths of a node that disappeared
	// (withdrawn or its session closed) and reads where a prefix had no
	// path at all.
	withdrawn, reads, empty := 0, 0, 0
	prev := map[string][]string{}
	for _, s := range m.samples {
		if s.paths == nil || s.at.Before(from) || s.at.After(to) {
			continue
		}
		for _, p := range m.bgp {
			reads++
			if len(s.paths[p]) == 0 {
				empty++
			}
			if old, ok := prev[p]; ok {
				for _, n := range old {
					if !slices.Contains(s.paths[p], n) {
						withdrawn++
					}
				}
			}
			prev[p] = s.paths[p]
		}
	}
	rows = append(rows,
		Row{Phase: phase, Measure: "BGP: paths withdrawn from the router (prefix × node, a node's path gone between two reads)",
			Value: fmt.Sprint(withdrawn), Target: "reported (a drained or restarted node's paths; no graceful restart in MetalLB's native mode)", Met: true},
		countRow(phase, "BGP: router table reads (× prefix) with no path at all", empty, reads))

	// The client's requests.
	for _, bgp := range []bool{false, true} {
		sent, lost := 0, 0
		var gap time.Duration
		var gapAddr netip.Addr
		var firstLost string
		for _, t := range m.targets {
			if t.bgp != bgp {
				continue
			}
			lastOK := from
			for _, q := range m.reqs[t.ip] {
				if q.at.Before(from) || q.at.After(to) {
					continue
				}
				sent++
				if !q.ok {
					lost++
					if firstLost == "" {
						firstLost = fmt.Sprintf("%s: first lost request to %s (%s) at %s: %s", phase, t.ip, t.svc, q.at.UTC().Format("15:04:05.000"), q.err)
					}
					continue
				}
				if d := q.at.Sub(lastOK); d > gap {
					gap, gapAddr = d, t.ip
				}
				lastOK = q.at
			}
		}
		kind := "layer 2"
		if bgp {
			kind = "BGP"
		}
		rows = append(rows,
			Row{Phase: phase, Measure: kind + ": client requests lost", Value: fmt.Sprintf("%d of %d", lost, sent), Target: "reported", Met: true},
			Row{Phase: phase, Measure: kind + ": longest time between two answered requests of one address",
				Value: fmt.Sprintf("%.3f s", gap.Seconds()), Target: "reported", Met: true})
		if firstLost != "" {
			notes = append(notes, firstLost)
		}
		if gapAddr.IsValid() {
			notes = append(notes, fmt.Sprintf("%s: longest %s request gap on %s", phase, kind, gapAddr))
		}
	}
	return rows, notes
}

func countRow(phase, measure string, n, of int) Row {
	v := fmt.Sprint(n)
	if of > 0 {
		v = fmt.Sprintf("%d of %d", n, of)
	}
	return Row{Phase: phase, Measure: measure, Value: v, Target: "0", Met: n == 0}
}

func prefixAll(p string, ss []string) []string {
	var out []string
	for _, s := range ss {
		out = append(out, p+s)
	}
	return out
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// pathFrom reports whether a path of the router's table was learnt from
// the node at addr.
func pathFrom(p lab.BGPPath, addr netip.Addr) bool {
	if p.PeerID == addr.String() {
		return true
	}
	for _, nh := range p.NextHops {
		if nh.IP == addr.String() {
			return true
		}
	}
	return false
}

// Namespace is where the run's Services live.
const Namespace = "migration"

// Addresses of the run's pools.
var (
	l2Pool  = "198.51.100.200-198.51.100.209"
	l2Pool6 = "2001:db8:100::200-2001:db8:100::209"
	// sharedIP is held by two Services (allow-shared-ip).
	sharedIP = "198.51.100.205"
	bgpPool  = "203.0.113.10-203.0.113.19"
)

// configYAML is the MetalLB configuration the run applies, as a MetalLB
// user writes it (native BGP mode: no graceful restart, no connectTime).
func configYAML() string {
	return fmt.Sprintf(`apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: l2, namespace: %[1]s}
spec:
  addresses: [%[2]s, %[3]s]
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: l2, namespace: %[1]s}
spec:
  ipAddressPools: [l2]
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: bgp, namespace: %[1]s}
spec:
  addresses: [%[4]s]
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: bgp, namespace: %[1]s}
spec:
  ipAddressPools: [bgp]
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: router, namespace: %[1]s}
spec:
  myASN: %[5]d
  peerASN: %[6]d
  peerAddress: %[7]s
  holdTime: 9s
`, lab.MetalLBNamespace, l2Pool, l2Pool6, bgpPool, lab.NodeASN, lab.RouterASN, lab.RouterAddr)
}

// services are the run's LoadBalancer Services, all with
// externalTrafficPolicy Cluster and a ready endpoint on every node: none
// loses its announcement while a node is drained (an
// externalTrafficPolicy Local Service whose endpoints all run on the
// drained node would: docs/migrating-from-metallb.md says so).
func services() []*corev1.Service {
	svc := func(name, pool string, port int32) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace,
				Annotations: map[string]string{"metallb.io/address-pool": pool}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
				Ports: []corev1.ServicePort{{Name: "web", Port: port, Protocol: corev1.ProtocolTCP,
					TargetPort: intstr.FromInt32(int32(lab.BackendPort))}}},
		}
	}
	l2a, l2b := svc("l2-a", "l2", 80), svc("l2-b", "l2", 80)
	shA, shB := svc("shared-a", "l2", 80), svc("shared-b", "l2", 8080)
	for _, s := range []*corev1.Service{shA, shB} {
		s.Annotations["metallb.io/allow-shared-ip"] = "web"
		s.Annotations["metallb.io/loadBalancerIPs"] = sharedIP
	}
	ds := svc("dual", "l2", 80)
	ds.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
	ds.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	return []*corev1.Service{l2a, l2b, shA, shB, ds, svc("bgp-a", "bgp", 80), svc("bgp-b", "bgp", 80)}
}

// serviceIPs returns every LoadBalancer Service of ns with its ingress
// IPs, in order.
func serviceIPs(ctx context.Context, l *lab.Lab, ns string) (map[string][]string, error) {
	list, err := l.Client().CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, s := range list.Items {
		var ips []string
		for _, in := range s.Status.LoadBalancer.Ingress {
			ips = append(ips, in.IP)
		}
		out[s.Namespace+"/"+s.Name] = ips
	}
	return out, nil
}

// Run installs MetalLB, creates the configuration and Services, waits until
// MetalLB announces every address, then migrates to Herald and rolls back
// (o.Rounds times) while the monitor records, and returns the figures of
// each switch. The lab must be fresh (no Herald, no MetalLB).
func Run(ctx context.Context, l *lab.Lab, o Options) (res Result, err error) {
	o.defaults()
	log := o.Log
	start := time.Now()
	ml, err := l.InstallMetalLB(ctx, nil)
	if err != nil {
		return res, withLogs(err, ml, nil)
	}
	log.Info("metallb installed", "took", time.Since(start).Round(time.Millisecond))
	var h *lab.Herald
	defer func() {
		if err != nil {
			err = withLogs(err, ml, h)
		}
	}()
	cfg := filepath.Join(l.StateDir(), "migration-config.yaml")
	if err := os.WriteFile(cfg, []byte(configYAML()), 0o644); err != nil {
		return res, err
	}
	_, err = l.Apply(ctx, cfg) // through MetalLB's webhook
	// The state directory keeps only logs and binaries after the lab.
	if rerr := os.Remove(cfg); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		return res, fmt.Errorf("apply the MetalLB configuration: %w", err)
	}
	if err := l.EnsureNamespace(ctx, Namespace); err != nil {
		return res, err
	}
	var eps []lab.Endpoint
	for _, n := range l.Nodes {
		eps = append(eps, lab.Endpoint{Node: n.Name, Ready: true})
	}
	for _, s := range services() {
		if _, err := l.Client().CoreV1().Services(Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return res, fmt.Errorf("create service %s: %w", s.Name, err)
		}
		if err := l.SetEndpoints(ctx, Namespace, s.Name, eps); err != nil {
			return res, err
		}
	}
	m := &monitor{l: l, o: o, ns: Namespace, reqs: map[netip.Addr][]request{}, changed: map[string]string{}, stopping: map[string][][2]time.Time{}}
	if m.want, err = waitAddresses(ctx, l, m); err != nil {
		return res, fmt.Errorf("metallb: %w", err)
	}
	log.Info("services have their addresses", "addresses", m.want)
	if err := waitConverged(ctx, l, m, nil, "", 90*time.Second); err != nil {
		return res, fmt.Errorf("metallb announcing: %w", err)
	}
	log.Info("metallb announces every address")
	m.start(ctx)
	defer m.stop()
	sleep(ctx, o.Observe)

	record := func(phase string, from time.Time, before map[string]string) {
		rows, notes := m.measure(phase, from, time.Now(), before)
		res.Rows = append(res.Rows, rows...)
		res.Notes = append(res.Notes, notes...)
	}
	snapshotChanged := func() map[string]string {
		m.mu.Lock()
		defer m.mu.Unlock()
		return maps.Clone(m.changed)
	}
	// For comparison: MetalLB's speakers restarted node by node, as a
	// MetalLB DaemonSet rollout does (no drain: the baseline).
	from, before := time.Now(), snapshotChanged()
	for _, n := range l.Nodes {
		if err := m.stopMetalLBSpeaker(ctx, ml, n.Name); err != nil {
			return res, fmt.Errorf("%s: %w", PhaseBaseline, err)
		}
		if err := ml.StartSpeaker(ctx, n.Name); err != nil {
			return res, fmt.Errorf("%s: %w", PhaseBaseline, err)
		}
		if err := waitConverged(ctx, l, m, m, "", 60*time.Second); err != nil {
			return res, fmt.Errorf("%s: after %s: %w", PhaseBaseline, n.Name, err)
		}
		log.Info("speaker restarted", "node", n.Name, "as", "metallb")
		sleep(ctx, o.Observe)
	}
	record(PhaseBaseline, from, before)
	for round := range o.Rounds {
		phase, rb := PhaseMigrate, PhaseRollback
		if o.Rounds > 1 {
			phase, rb = fmt.Sprintf("%s (round %d)", phase, round+1), fmt.Sprintf("%s (round %d)", rb, round+1)
		}
		from, before = time.Now(), snapshotChanged()
		if h, err = migrate(ctx, l, ml, h, m, o); err != nil {
			return res, fmt.Errorf("%s: %w", phase, err)
		}
		record(phase, from, before)
		from, before = time.Now(), snapshotChanged()
		if err := rollback(ctx, l, ml, h, m, o); err != nil {
			return res, fmt.Errorf("%s: %w", rb, err)
		}
		record(rb, from, before)
	}
	m.mu.Lock()
	if len(m.errs) > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("monitor errors (probes or router reads that failed; not counted): %d, first: %v", len(m.errs), m.errs[0]))
	}
	m.mu.Unlock()
	return res, nil
}

// migrate is the documented in-place procedure, node by node: Herald's
// manifests for metallb-system in the migration mode are applied (the
// metallb.io CRDs become Herald's), MetalLB's controller is stopped and
// its webhook configuration deleted, Herald's controller started (it
// imports every address), then on each node MetalLB's speaker Pod is
// deleted and Herald's started (swap: with the node drained), waiting each
// time until every address is answered by one node and the router has a
// path from every node again.
func migrate(ctx context.Context, l *lab.Lab, ml *lab.MetalLB, h *lab.Herald, m *monitor, o Options) (*lab.Herald, error) {
	if err := ml.StopController(ctx); err != nil {
		return h, err
	}
	if _, err := l.Kubectl(ctx, "delete", "validatingwebhookconfiguration", lab.MetalLBWebhookConfig, "--ignore-not-found"); err != nil {
		return h, err
	}
	var err error
	switch {
	case h == nil && o.Helm:
		// hack/adopt-metallb-crds.sh herald metallb-system, then helm
		// install herald charts/herald -n metallb-system -f
		// manifests/metallb-migration/helm-values.yaml, then Herald's
		// controller.
		h, err = l.InstallHerald(ctx, lab.InstallOptions{Method: lab.InstallHelm, HelmValues: []string{HelmValues}, AdoptMetalLBCRDs: true,
			Namespace: lab.MetalLBNamespace, SpeakerNodes: []string{}})
	case h == nil:
		// kubectl apply --server-side --force-conflicts -k manifests/metallb-migration,
		// then Herald's controller.
		h, err = l.InstallHerald(ctx, lab.InstallOptions{Manifests: Manifests, Namespace: lab.MetalLBNamespace, SpeakerNodes: []string{}})
	case o.Helm:
		if err = h.UpgradeChart(ctx); err == nil {
			err = h.StartController(ctx)
		}
	default:
		if _, err = l.ApplyKustomize(ctx, mustRoot(Manifests)); err == nil {
			err = h.StartController(ctx)
		}
	}
	if err != nil {
		return h, fmt.Errorf("install herald: %w", err)
	}
	if err := h.WaitConfigValid(ctx, "controller"); err != nil {
		return h, err
	}
	o.Log.Info("controller swapped: Herald's runs")
	for _, n := range l.Nodes {
		err := swap(ctx, l, m, n.Name, func() error {
			if err := m.stopMetalLBSpeaker(ctx, ml, n.Name); err != nil {
				return err
			}
			m.heraldSpeaker(n.Name, true)
			return h.AddSpeaker(ctx, n.Name)
		})
		if err != nil {
			return h, err
		}
		o.Log.Info("speaker swapped", "node", n.Name, "to", "herald")
		sleep(ctx, o.Observe)
	}
	return h, nil
}

// ExcludeLabel is the well-known node label both MetalLB's speaker (unless
// --ignore-exclude-lb) and Herald's honour: a node carrying it is no layer
// 2 candidate and announces no BGP path.
const ExcludeLabel = "node.kubernetes.io/exclude-from-external-load-balancers"

// swap replaces node's speaker (replace: stop one, start the other and
// wait until it is ready) with the node drained: the node is labeled
// ExcludeLabel (kubectl label node N ExcludeLabel=true) and swap waits
// until it answers no layer 2 address and the router has no path from it
// (every address moved to another node, between two running speakers);
// then replace runs; then the label is removed and swap waits until every
// address is answered by one node and the router has a path from every
// node again. Without the drain the address of the swapped node has no
// answerer from the old speaker's exit until the new one answers (the
// Pod's restart: seconds on a real kubelet).
func swap(ctx context.Context, l *lab.Lab, m *monitor, node string, replace func() error) error {
	from := time.Now()
	if _, err := l.Kubectl(ctx, "label", "node", node, ExcludeLabel+"=true", "--overwrite"); err != nil {
		return fmt.Errorf("drain %s: %w", node, err)
	}
	if err := waitConverged(ctx, l, m, m, node, 60*time.Second); err != nil {
		return fmt.Errorf("drain %s: %w", node, err)
	}
	// What the guide tells users to wait for: no ServiceL2Status or
	// ServiceBGPStatus names the node (both speakers write them).
	_, err := poll.Wait(ctx, 60*time.Second, "", func() error {
		out, err := l.Kubectl(ctx, "-n", lab.MetalLBNamespace, "get", "servicel2statuses,servicebgpstatuses",
			"-l", "metallb.io/node="+node, "-o", "name")
		if err != nil {
			return err
		}
		if out = strings.TrimSpace(out); out != "" {
			return fmt.Errorf("still announced from %s: %s", node, strings.ReplaceAll(out, "\n", " "))
		}
		return nil
	}, poll.Every(200*time.Millisecond))
	if err != nil {
		return fmt.Errorf("drain %s: %w", node, err)
	}
	m.drained(from, time.Now())
	if err := replace(); err != nil {
		return err
	}
	if _, err := l.Kubectl(ctx, "label", "node", node, ExcludeLabel+"-"); err != nil {
		return fmt.Errorf("undrain %s: %w", node, err)
	}
	if err := waitConverged(ctx, l, m, m, "", 60*time.Second); err != nil {
		return fmt.Errorf("after %s: %w", node, err)
	}
	return nil
}

// rollback undoes migrate: on each node, drained as in migrate, Herald's
// speaker is stopped (Pod deleted) and MetalLB's started; then Herald's
// controller is stopped, its webhook configuration deleted, MetalLB's
// manifests applied again (its CRDs, with the conversion webhook pointing
// at MetalLB's Service) and MetalLB's controller started.
func rollback(ctx context.Context, l *lab.Lab, ml *lab.MetalLB, h *lab.Herald, m *monitor, o Options) error {
	for _, n := range l.Nodes {
		err := swap(ctx, l, m, n.Name, func() error {
			err := h.RemoveSpeaker(ctx, n.Name)
			m.heraldSpeaker(n.Name, false)
			if err != nil {
				return err
			}
			return ml.StartSpeaker(ctx, n.Name)
		})
		if err != nil {
			return err
		}
		o.Log.Info("speaker swapped", "node", n.Name, "to", "metallb")
		sleep(ctx, o.Observe)
	}
	if err := h.StopController(); err != nil {
		return err
	}
	if _, err := l.Kubectl(ctx, "delete", "validatingwebhookconfiguration", "herald-webhook-configuration", "--ignore-not-found"); err != nil {
		return err
	}
	if err := ml.ApplyManifests(ctx); err != nil {
		return err
	}
	if err := ml.StartController(ctx); err != nil {
		return err
	}
	o.Log.Info("controller swapped: MetalLB's runs")
	sleep(ctx, o.Observe)
	return nil
}

func mustRoot(p string) string {
	root, err := lab.ModuleRoot()
	if err != nil {
		return p
	}
	return filepath.Join(root, p)
}

// waitAddresses waits until every Service has its addresses (two for the
// dual-stack one), fills m's targets and returns the addresses.
func waitAddresses(ctx context.Context, l *lab.Lab, m *monitor) (map[string][]string, error) {
	var got map[string][]string
	deadline := time.Now().Add(90 * time.Second)
	for {
		var err error
		got, err = serviceIPs(ctx, l, Namespace)
		if err == nil {
			missing := 0
			for _, s := range services() {
				want := 1
				if s.Spec.IPFamilyPolicy != nil {
					want = 2
				}
				if len(got[Namespace+"/"+s.Name]) < want {
					missing++
				}
			}
			if missing == 0 {
				break
			}
			err = fmt.Errorf("%d Services without all their addresses: %v", missing, got)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, err
		}
		sleep(ctx, 200*time.Millisecond)
	}
	seen := map[netip.Addr]bool{}
	for _, s := range services() {
		key := Namespace + "/" + s.Name
		for _, a := range got[key] {
			ip := netip.MustParseAddr(a)
			if seen[ip] {
				continue // the shared address is polled once
			}
			seen[ip] = true
			bgp := s.Annotations["metallb.io/address-pool"] == "bgp"
			m.targets = append(m.targets, target{svc: key, ip: ip, bgp: bgp, port: lab.BackendPort})
			switch {
			case bgp:
				m.bgp = append(m.bgp, ip.String()+"/32")
			case ip.Is4():
				m.v4L2 = append(m.v4L2, ip)
			}
		}
	}
	return got, nil
}

// waitConverged waits until every layer 2 IPv4 address has exactly one ARP
// answerer, every layer 2 IPv6 address answers HTTP, and the router has a
// path from every node for every BGP prefix. With drained set, that node
// must answer no address and the router must have no path from it (and a
// path from every other node). With a running monitor mon it reads the
// monitor's latest samples instead of probing itself.
func waitConverged(ctx context.Context, l *lab.Lab, m, mon *monitor, drained string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		last = converged(ctx, l, m, mon, drained)
		if last == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("not converged within %s: %w", timeout, last)
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

func converged(ctx context.Context, l *lab.Lab, m, mon *monitor, drained string) error {
	since := time.Now()
	var arp map[netip.Addr][]string
	var paths map[string][]string
	if mon != nil {
		// Wait for a fresh ARP sample and router read, taken after now.
		for arp == nil || paths == nil {
			mon.mu.Lock()
			for i := len(mon.samples) - 1; i >= 0 && mon.samples[i].at.After(since); i-- {
				if mon.samples[i].arp != nil && arp == nil {
					arp = mon.samples[i].arp
				}
				if mon.samples[i].paths != nil && paths == nil {
					paths = mon.samples[i].paths
				}
			}
			mon.mu.Unlock()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if arp == nil || paths == nil {
				sleep(ctx, 50*time.Millisecond)
			}
		}
	} else {
		var err error
		if arp, err = l.ProbeARP(ctx, m.v4L2, 300*time.Millisecond); err != nil {
			return err
		}
		routes, err := l.BGPRoutes(ctx, "ipv4")
		if err != nil {
			return err
		}
		paths = map[string][]string{}
		for _, p := range m.bgp {
			for _, bp := range routes[p] {
				for _, n := range l.Nodes {
					if pathFrom(bp, n.IPv4) && !slices.Contains(paths[p], n.Name) {
						paths[p] = append(paths[p], n.Name)
					}
				}
			}
		}
	}
	for _, a := range m.v4L2 {
		if len(arp[a]) != 1 || arp[a][0] == drained {
			return fmt.Errorf("%s answered by %v", a, arp[a])
		}
	}
	want := len(l.Nodes)
	if drained != "" {
		want--
	}
	for _, p := range m.bgp {
		if len(paths[p]) != want || slices.Contains(paths[p], drained) {
			return fmt.Errorf("router has %s from %v", p, paths[p])
		}
	}
	for _, t := range m.targets {
		if t.ip.Is6() {
			if _, err := l.Get(ctx, l.ClientNamespace(), t.ip, t.port); err != nil {
				return err
			}
		}
	}
	return nil
}

func withLogs(err error, ml *lab.MetalLB, h *lab.Herald) error {
	var b strings.Builder
	if ml != nil {
		b.WriteString(ml.Logs(20))
	}
	if h != nil {
		b.WriteString(h.Logs(20))
	}
	return errors.Join(err, errors.New(b.String()))
}

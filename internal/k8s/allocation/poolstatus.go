package allocation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/ipam"
	"github.com/herald-lb/herald/internal/k8s/fieldmanager"
)

// DefaultPoolStatusDelay is the debounce delay when Options.PoolStatusDelay
// is 0.
const DefaultPoolStatusDelay = 500 * time.Millisecond

// poolStatusOptions configure a poolStatusWriter. Client, Reader, Namespace
// and Stats are required.
type poolStatusOptions struct {
	// Client patches IPAddressPool status.
	Client client.Client
	// Reader lists IPAddressPools (normally the manager's cache).
	Reader client.Reader
	// Namespace is Herald's namespace, where the pools live.
	Namespace string
	// Stats returns the current counters (ipam.Allocator.Stats).
	Stats func() []ipam.PoolStats
	// Delay is the debounce delay (DefaultPoolStatusDelay when 0).
	Delay time.Duration
	// Log receives write failures; nil discards them.
	Log *slog.Logger
	// Registerer receives the metallb_allocator_* gauges; nil registers
	// nothing.
	Registerer prometheus.Registerer
}

// poolStatusWriter publishes the allocator's per-pool address counters:
// into each IPAddressPool's status (assignedIPv4, availableIPv4,
// assignedIPv6, availableIPv6) and into MetalLB's allocator metrics
// (metallb_allocator_addresses_total, _ipv4_addresses_total,
// _ipv6_addresses_total and the three _in_use_total variants, label pool).
// The Controller runs it (start) while it leads.
//
// Writes are debounced: notify marks the counters dirty and the writer
// publishes at most once per Options.PoolStatusDelay, so a burst of
// allocations costs one status patch per changed pool, not one per Service.
type poolStatusWriter struct {
	opts   poolStatusOptions
	log    *slog.Logger
	dirty  chan struct{}
	gauges [6]*prometheus.GaugeVec
	known  map[string]bool // pools with metric series
}

// newPoolStatus builds a poolStatusWriter and registers its metrics.
func newPoolStatus(opts poolStatusOptions) (*poolStatusWriter, error) {
	if opts.Client == nil || opts.Reader == nil || opts.Stats == nil {
		return nil, errors.New("allocation: pool status: Client, Reader and Stats are required")
	}
	if opts.Delay <= 0 {
		opts.Delay = DefaultPoolStatusDelay
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &poolStatusWriter{opts: opts, log: log, dirty: make(chan struct{}, 1), known: map[string]bool{}}
	w.gauges = newPoolGauges()
	if opts.Registerer != nil {
		for _, g := range w.gauges {
			if err := opts.Registerer.Register(g); err != nil {
				return nil, fmt.Errorf("allocation: pool status: register metrics: %w", err)
			}
		}
	}
	return w, nil
}

// newPoolGauges builds MetalLB's metallb_allocator_* gauges, labelled by pool.
func newPoolGauges() [6]*prometheus.GaugeVec {
	var gauges [6]*prometheus.GaugeVec
	for i, d := range []struct{ name, help string }{
		{"addresses_total", "Number of usable IP addresses in the pool, both families (saturated at the int64 maximum)."},
		{"ipv4_addresses_total", "Number of usable IPv4 addresses in the pool."},
		{"ipv6_addresses_total", "Number of usable IPv6 addresses in the pool (saturated at the int64 maximum)."},
		{"addresses_in_use_total", "Number of IP addresses of the pool assigned to Services, both families."},
		{"ipv4_addresses_in_use_total", "Number of IPv4 addresses of the pool assigned to Services."},
		{"ipv6_addresses_in_use_total", "Number of IPv6 addresses of the pool assigned to Services."},
	} {
		gauges[i] = prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "metallb", Subsystem: "allocator", Name: d.name, Help: d.help,
		}, []string{"pool"})
	}
	return gauges
}

// notify marks the counters dirty. It never blocks.
func (w *poolStatusWriter) notify() {
	select {
	case w.dirty <- struct{}{}:
	default:
	}
}

// start publishes the counters after every notify (at most once per Delay)
// until ctx ends.
func (w *poolStatusWriter) start(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.dirty:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(w.opts.Delay):
		}
		if err := w.publish(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("publish pool counters; retrying", "error", err)
			w.notify()
		}
	}
}

// publish writes the current counters to the metrics and to every
// IPAddressPool whose status differs, each write on the condition that the
// pool is still at the resourceVersion read. Pools the allocator does not know
// (not yet in a valid configuration) are left alone.
func (w *poolStatusWriter) publish(ctx context.Context) error {
	stats := w.opts.Stats()
	byName := make(map[string]ipam.PoolStats, len(stats))
	for _, s := range stats {
		byName[s.Pool] = s
		vals := [6]int64{s.Total(), s.TotalIPv4, s.TotalIPv6, s.InUse(), s.AssignedIPv4, s.AssignedIPv6}
		for i, g := range w.gauges {
			g.WithLabelValues(s.Pool).Set(float64(vals[i]))
		}
	}
	for name := range w.known {
		if _, ok := byName[name]; !ok {
			for _, g := range w.gauges {
				g.DeleteLabelValues(name)
			}
			delete(w.known, name)
		}
	}
	for name := range byName {
		w.known[name] = true
	}

	var pools v1beta1.IPAddressPoolList
	if err := w.opts.Reader.List(ctx, &pools, client.InNamespace(w.opts.Namespace)); err != nil {
		return fmt.Errorf("list IPAddressPools: %w", err)
	}
	var errs []error
	for i := range pools.Items {
		p := &pools.Items[i]
		s, ok := byName[p.Name]
		if !ok {
			continue
		}
		want := v1beta1.IPAddressPoolStatus{
			AssignedIPv4: s.AssignedIPv4, AssignedIPv6: s.AssignedIPv6,
			AvailableIPv4: s.AvailableIPv4, AvailableIPv6: s.AvailableIPv6,
		}
		if p.Status == want {
			continue
		}
		// At the resourceVersion read: a replica that lost its leadership
		// without noticing, or read an old cache, cannot overwrite newer
		// counters (a Conflict is retried after the next Delay).
		body, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": p.ResourceVersion}, "status": want})
		if err != nil {
			return err
		}
		target := &v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}}
		if err := w.opts.Client.Status().Patch(ctx, target, client.RawPatch(types.MergePatchType, body),
			client.FieldOwner(fieldmanager.Controller)); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("patch IPAddressPool %s/%s status: %w", p.Namespace, p.Name, err))
		}
	}
	return errors.Join(errs...)
}

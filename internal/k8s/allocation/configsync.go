package allocation

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/config"
	"github.com/herald-lb/herald/internal/k8s/configload"
)

// EventInvalidConfiguration is the reason of the Warning event on a
// configuration object the controller rejected.
const EventInvalidConfiguration = "InvalidConfiguration"

// syncConfig reloads the configuration. The first valid one initialises the
// allocator (pools, then every existing assignment); later ones re-validate
// the holdings and re-address only the Services that lost an address. A
// rejected configuration changes nothing but the reports.
func (c *Controller) syncConfig(ctx context.Context, _ string) error {
	res, err := configload.Read(ctx, c.opts.Cache, c.opts.Namespace)
	if err != nil {
		return errors.Join(err, c.report(ctx, err, true))
	}
	snap, outcome, buildErr := c.tracker.Update(res)
	if m := c.opts.ConfigMetrics; m != nil {
		m.Observe(snap, outcome)
	}
	// A failed report is retried (the item is re-queued); the rest of the
	// work is idempotent: the retry finds the configuration Unchanged.
	reportErr := c.report(ctx, buildErr, false)
	switch outcome {
	case configload.Rejected:
		c.log.Error("configuration rejected; the last valid one stays in force", "error", buildErr)
		c.eventRejected(ctx, buildErr)
		return reportErr
	case configload.Unchanged:
		c.mu.Lock()
		c.lastRej = ""
		c.mu.Unlock()
		if c.initialized.Load() {
			return reportErr
		}
	}
	c.mu.Lock()
	c.lastRej = ""
	c.mu.Unlock()
	keys, err := c.alloc.SetPools(PoolsFor(snap))
	if err != nil {
		// config.Build already validated the pools; this is a bug.
		c.log.Error("set pools", "error", err)
		return reportErr
	}
	c.log.Info("configuration loaded", "pools", len(snap.Pools()), "reassess", len(keys))
	for _, w := range snap.Warnings() {
		c.log.Warn("configuration accepted with a warning", "warning", w)
	}
	if !c.initialized.Load() {
		if err := c.importAll(ctx); err != nil {
			return errors.Join(err, reportErr) // retried; nothing allocated before
		}
		c.initialized.Store(true)
		c.enqueueAll(ctx)
		c.statsChanged()
		return reportErr
	}
	c.book.Reassess(keys, "the address is no longer in a pool that may serve the Service after a configuration change")
	c.wakePending()
	c.statsChanged()
	return reportErr
}

// importAll records the ingress IPs of every handled Service, in key order,
// before anything is allocated (restart safety).
func (c *Controller) importAll(ctx context.Context) error {
	// From the API server, not the cache: a new leader must see every
	// address the previous one wrote, also writes its cache has not
	// delivered yet.
	var list corev1.ServiceList
	if err := c.reader().List(ctx, &list); err != nil {
		return fmt.Errorf("list Services for import: %w", err)
	}
	slices.SortFunc(list.Items, func(a, b corev1.Service) int {
		if a.Namespace != b.Namespace {
			if a.Namespace < b.Namespace {
				return -1
			}
			return 1
		}
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	nsLabels := map[string]map[string]string{}
	var nss corev1.NamespaceList
	if err := c.opts.Cache.List(ctx, &nss); err == nil {
		for _, ns := range nss.Items {
			nsLabels[ns.Name] = ns.Labels
		}
	}
	imported := 0
	for i := range list.Items {
		svc := &list.Items[i]
		if !Handled(svc, c.opts.LBClass) {
			continue
		}
		key := Key(svc)
		req, err := RequestFor(svc, nsLabels[svc.Namespace])
		fp := requestFingerprint(req)
		c.book.See(key, fp)
		ips := IngressIPs(svc)
		c.alloc.SetStatus(key, ips) // reserved for it until a write changes it
		if err != nil || len(ips) == 0 {
			continue
		}
		_, ierr := c.alloc.Import(key, ips, req)
		c.noteImport(key, fp, ierr)
		imported++
	}
	c.log.Info("imported existing assignments", "services", imported)
	return nil
}

// enqueueAll queues every Service.
func (c *Controller) enqueueAll(ctx context.Context) {
	var list corev1.ServiceList
	if err := c.opts.Cache.List(ctx, &list); err != nil {
		c.log.Error("list Services", "error", err)
		return
	}
	for i := range list.Items {
		c.svcQueue.Add(Key(&list.Items[i]))
	}
}

// report writes the ConfigurationState "controller".
func (c *Controller) report(ctx context.Context, err error, infra bool) error {
	if c.opts.Reporter == nil {
		return nil
	}
	if rerr := c.opts.Reporter.Report(ctx, err, infra); rerr != nil {
		return fmt.Errorf("report configuration state: %w", rerr)
	}
	return nil
}

// eventRejected emits a Warning event on every object a rejected
// configuration names, once per distinct error.
func (c *Controller) eventRejected(ctx context.Context, err error) {
	summary := configload.Summary(err)
	c.mu.Lock()
	same := c.lastRej == summary
	c.lastRej = summary
	c.mu.Unlock()
	if same || c.opts.Recorder == nil {
		return
	}
	invalid, transient := config.Split(err)
	type named struct{ kind, ns, name, msg string }
	var objs []named
	for _, e := range invalid {
		objs = append(objs, named{e.Kind, e.Namespace, e.Name, e.Error()})
	}
	for _, e := range transient {
		objs = append(objs, named{e.Kind, e.Namespace, e.Name, e.Error()})
	}
	for _, o := range objs {
		obj := objectFor(o.kind)
		if obj == nil || o.name == "" {
			continue
		}
		if err := c.opts.Cache.Get(ctx, client.ObjectKey{Namespace: o.ns, Name: o.name}, obj); err != nil {
			continue
		}
		c.event(obj, corev1.EventTypeWarning, EventInvalidConfiguration, o.msg)
	}
}

// objectFor returns an empty object of a configuration kind.
func objectFor(kind string) client.Object {
	switch kind {
	case config.KindIPAddressPool:
		return &v1beta1.IPAddressPool{}
	case config.KindL2Advertisement:
		return &v1beta1.L2Advertisement{}
	case config.KindBGPAdvertisement:
		return &v1beta1.BGPAdvertisement{}
	case config.KindBGPPeer:
		return &v1beta2.BGPPeer{}
	case config.KindCommunity:
		return &v1beta1.Community{}
	case config.KindBFDProfile:
		return &v1beta1.BFDProfile{}
	}
	return nil
}

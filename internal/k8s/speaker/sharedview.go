package speaker

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/herald-lb/herald/internal/announce"
)

// sharedViews keeps, per shared address, the Services holding it as every
// decision of one of them reads them (announce.SharedService with
// announce.SharingEndpoints): built once from the cache by the first
// decision that needs it, then reused by the decisions of the other
// holders until an event changes one of them (issue #16).
//
// Without it, a change of one of k Services sharing an address queues the
// k holders (mapService, mapSlice), and each decision listed and converted
// the EndpointSlices of all k: k² reads per change, k³ to build an address
// of k holders (bench-speaker-mem's 10,000 Services by 40 took over half
// an hour on one speaker). With it, a change costs one rebuild (k reads)
// plus one read of each decided Service's own endpoints: 2k. Reading each
// holder's endpoints once per batch of queued requests was the other way;
// it needs batches, which the work queue does not give (it hands the
// worker one key at a time, the holders of an address as separate keys),
// while a view also serves decisions queued apart (reconcileAll's pass
// over every Service, the holders of an address decided at different
// times) for as long as nothing of the address changes.
//
// Invalidation: mapService and mapSlice, which run on the informers'
// goroutines after the informer's store holds the change and before they
// queue the holders, call invalidate with the addresses of the changed
// Service (old and new objects of an update are both mapped, so a Service
// whose address changed leaves its old address's view too; a deleted
// Service or EndpointSlice maps its last state; an EndpointSlice moved to
// another Service maps both). The holders' decisions therefore run after
// the invalidation and rebuild from a store that holds the change.
//
// A rebuild can race an invalidation (the worker reads the cache while an
// informer updates it). Each build registers a token (a new *sharedView) in
// the map before reading, and its result is stored only if the token is
// still there afterwards: invalidate deletes it, so a build that overlapped
// an invalidation serves its own decision only (whose Service is queued
// again by the same event) and is not kept. The token is a per-address
// generation that vanishes with the address.
//
// Memory: one entry per address held by two Services or more (an address
// with one holder has no one to share with and is not kept); per holder
// its announce.Service (the labels map is the cache's) and the nodes it
// can serve on, the node lists of a view's holders deduplicated: about
// 150 B per Service in bench-speaker-mem's shape (BenchmarkSpeakerHeap at
// 2,000 Services, 40 per address: 6,900 B per Service before, 7,040 B).
type sharedViews struct {
	mu    sync.Mutex
	views map[netip.Addr]*sharedView
}

// sharedView is the view of one address; ready once built.
type sharedView struct {
	ready   bool
	holders []announce.SharedService // every Service holding the address
}

// lookup returns the address's view when ready, else a token to build it
// with (store).
func (v *sharedViews) lookup(ip netip.Addr) (holders []announce.SharedService, token *sharedView) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if w := v.views[ip]; w != nil && w.ready {
		return w.holders, nil
	}
	if v.views == nil {
		v.views = map[netip.Addr]*sharedView{}
	}
	token = &sharedView{}
	v.views[ip] = token
	return nil, token
}

// store keeps holders as ip's view if token is still ip's (no invalidate
// since lookup) and the address is shared; otherwise it drops token.
func (v *sharedViews) store(ip netip.Addr, token *sharedView, holders []announce.SharedService) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.views[ip] != token {
		return
	}
	if len(holders) < 2 {
		delete(v.views, ip)
		return
	}
	token.holders, token.ready = holders, true
}

// invalidate forgets the views of ips.
func (v *sharedViews) invalidate(ips []netip.Addr) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, ip := range ips {
		delete(v.views, ip)
	}
}

// count returns how many addresses have a view or a build under way.
func (v *sharedViews) count() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.views)
}

// holders returns the Services holding ip (sharedViews), from its view or
// built from the cache. An address held by one Service gives nil after
// one Service List.
func (s *Controller) holders(ctx context.Context, ip netip.Addr) ([]announce.SharedService, error) {
	hs, token := s.shared.lookup(ip)
	if token == nil {
		return hs, nil
	}
	list, err := s.servicesWithIP(ip)
	if err != nil {
		return nil, fmt.Errorf("list Services with IP %s: %w", ip, err)
	}
	if len(list) < 2 {
		s.shared.store(ip, token, nil)
		return nil, nil
	}
	hs = make([]announce.SharedService, 0, len(list))
	var nodeSets [][]announce.Endpoint // distinct endpoint summaries of this view
	for _, o := range list {
		eps, err := s.endpoints(ctx, o.namespace, o.name)
		if err != nil {
			return nil, err
		}
		sum := announce.SharingEndpoints(eps)
		if j := slices.IndexFunc(nodeSets, func(e []announce.Endpoint) bool { return slices.Equal(e, sum) }); j >= 0 {
			sum = nodeSets[j]
		} else if len(nodeSets) < 8 {
			nodeSets = append(nodeSets, sum)
		}
		hs = append(hs, announce.SharedService{Service: o.svc, Endpoints: sum})
	}
	s.shared.store(ip, token, hs)
	return hs, nil
}

// sharing returns the other Services holding one of svc's IPs (Input.Sharing),
// from the addresses' views (sharedViews).
func (s *Controller) sharing(ctx context.Context, svc *announce.Service) ([]announce.SharedService, error) {
	var out []announce.SharedService
	for i, ip := range svc.IPs {
		hs, err := s.holders(ctx, ip)
		if err != nil {
			return nil, err
		}
		for _, h := range hs {
			// A Service holding two of the IPs is listed once (a
			// dual-stack Service has two, so this is short).
			if h.Service.Key == svc.Key ||
				(i > 0 && slices.ContainsFunc(out, func(o announce.SharedService) bool { return o.Service.Key == h.Service.Key })) {
				continue
			}
			out = append(out, h)
		}
	}
	return out, nil
}

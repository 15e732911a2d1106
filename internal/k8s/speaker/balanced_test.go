package speaker

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/announce"
	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

// countingL2 is fakeL2 counting SetOwner calls per owner (a call is a
// re-announcement: the real announcer sends a gratuitous burst for a new
// target).
type countingL2 struct {
	*fakeL2
	mu    sync.Mutex
	calls map[string]int
}

func (c *countingL2) SetOwner(owner string, targets []announce.L2Target) error {
	c.mu.Lock()
	c.calls[owner]++
	c.mu.Unlock()
	return c.fakeL2.SetOwner(owner, targets)
}

func (c *countingL2) callCounts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.calls)
}

// startBalancedSpeaker starts a speaker with the balanced layer 2 election
// (--l2-election=balanced) and its own cache, so each speaker elects on its
// own view of the API server.
func startBalancedSpeaker(t *testing.T, env *testenv.Env, ns, node string, live *liveness) (*testSpeaker, *countingL2) {
	t.Helper()
	m := live.member(node)
	var cl *countingL2
	s := startSpeakerProbed(t, env, ns, node, m, 7946, "0", func(s *testSpeaker, o *Options) {
		cl = &countingL2{fakeL2: s.l2, calls: map[string]int{}}
		o.L2, o.BalancedL2 = cl, true
	})
	s.members = m
	return s, cl
}

// skewedAddresses returns 5 addresses of 203.0.113.0/24 that the plain
// election (every node an equal candidate) puts 4 on one node of nodes, and
// 1 elsewhere: a set the balanced election must spread.
func skewedAddresses(t *testing.T, nodes []string) []netip.Addr {
	t.Helper()
	var cands []announce.Candidate
	for _, n := range nodes {
		cands = append(cands, announce.Candidate{Node: n, Serves: 1})
	}
	byNode := map[string][]netip.Addr{}
	for i := 1; i < 255; i++ {
		a := netip.AddrFrom4([4]byte{203, 0, 113, byte(i)})
		w := announce.Elect(a, cands)[0]
		byNode[w] = append(byNode[w], a)
		if len(byNode[w]) == 4 {
			for n, as := range byNode {
				if n != w && len(as) > 0 {
					return append(byNode[w], as[0])
				}
			}
		}
	}
	t.Fatal("no skewed address set in 203.0.113.0/24")
	return nil
}

// TestBalancedElectionSpeakers: three speakers with --l2-election=balanced,
// each on its own cache, and 5 Services whose addresses the plain election
// puts 4 on one node. Every address is announced by exactly one speaker
// (they agree without coordination), no node holds more than
// ⌈5/3⌉+1 = 3, each ServiceL2Status names the announcer; a Service event
// that moves no winner re-announces nothing and rewrites no status; when
// the busiest node's speaker dies, only its addresses move (plus at most
// one, the bound's rebalancing). With the plain election (BalancedL2 off)
// the 3-per-node check fails.
func TestBalancedElectionSpeakers(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	c := env.Client
	ns := env.Namespace(t)
	svcNS := env.Namespace(t)
	nodes := []string{"n1", "n2", "n3"}
	for _, n := range nodes {
		createReadyNode(t, c, n, "")
	}
	must(t, c.Create(ctx, &v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns},
		Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"203.0.113.0/24"}}}))
	must(t, c.Create(ctx, &v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "l2", Namespace: ns}}))

	live := &liveness{live: map[string]bool{"n1": true, "n2": true, "n3": true}}
	speakers := map[string]*testSpeaker{}
	counts := map[string]*countingL2{}
	for _, n := range nodes {
		speakers[n], counts[n] = startBalancedSpeaker(t, env, ns, n, live)
	}
	addrs := skewedAddresses(t, nodes)
	keyOf := map[netip.Addr]string{}
	for i, a := range addrs {
		name := fmt.Sprintf("s%d", i)
		keyOf[a] = svcNS + "/" + name
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: svcNS},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
		must(t, c.Create(ctx, svc))
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: a.String()}}
		must(t, c.Status().Update(ctx, svc))
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Namespace: svcNS, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
		}
		for _, n := range nodes {
			slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, NodeName: &n})
		}
		must(t, c.Create(ctx, slice))
	}

	// owners waits until every address has exactly one announcer among the
	// live speakers, no node above capacity, and each Service one
	// ServiceL2Status naming its announcer; it returns address -> node.
	owners := func(what string, liveNodes []string, capacity int) map[netip.Addr]string {
		t.Helper()
		var got map[netip.Addr]string
		poll.Until(t, 60*time.Second, what, func() error {
			got = map[netip.Addr]string{}
			load := map[string]int{}
			for _, a := range addrs {
				for _, n := range liveNodes {
					if slices.Contains(speakers[n].l2.announced(keyOf[a]), a.String()) {
						if prev, dup := got[a]; dup {
							return fmt.Errorf("%s announced by %s and %s", a, prev, n)
						}
						got[a] = n
						load[n]++
					}
				}
				if got[a] == "" {
					return fmt.Errorf("%s announced by nobody", a)
				}
			}
			for n, l := range load {
				if l > capacity {
					return fmt.Errorf("%s announces %d of %d addresses, capacity %d (%v)", n, l, len(addrs), capacity, got)
				}
			}
			var list v1beta1.ServiceL2StatusList
			if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
				return err
			}
			status := map[string][]string{}
			for _, o := range list.Items {
				k := o.Status.ServiceNamespace + "/" + o.Status.ServiceName
				status[k] = append(status[k], o.Status.Node)
			}
			for a, n := range got {
				if s := status[keyOf[a]]; len(s) != 1 || s[0] != n {
					return fmt.Errorf("ServiceL2Status of %s on %v, announcer %s", keyOf[a], s, n)
				}
			}
			return nil
		})
		return got
	}
	before := owners("5 addresses balanced on 3 nodes", nodes, 3)
	t.Logf("winners: %v", before)

	// A Service event that moves no winner: nothing is re-announced, no
	// status rewritten. The label change passes the Service predicate and
	// schedules a recompute on every speaker.
	calls := map[string]map[string]int{}
	recomputes := map[string]uint64{}
	for _, n := range nodes {
		calls[n] = counts[n].callCounts()
		recomputes[n] = speakers[n].spk.balanced.recomputes.Load()
	}
	var statusBefore v1beta1.ServiceL2StatusList
	must(t, c.List(ctx, &statusBefore, client.InNamespace(ns)))
	first := &corev1.Service{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: svcNS, Name: "s0"}, first))
	first.Labels = map[string]string{"touched": "yes"}
	must(t, c.Update(ctx, first))
	poll.Until(t, 30*time.Second, "every speaker recomputed after the label change", func() error {
		for _, n := range nodes {
			if speakers[n].spk.balanced.recomputes.Load() <= recomputes[n] {
				return fmt.Errorf("%s has not recomputed", n)
			}
		}
		return nil
	})
	for _, n := range nodes {
		if got := counts[n].callCounts(); !maps.Equal(got, calls[n]) {
			t.Errorf("%s: SetOwner calls %v after an event that moved no winner, were %v", n, got, calls[n])
		}
	}
	var statusAfter v1beta1.ServiceL2StatusList
	must(t, c.List(ctx, &statusAfter, client.InNamespace(ns)))
	rv := func(l *v1beta1.ServiceL2StatusList) map[string]string {
		out := map[string]string{}
		for _, o := range l.Items {
			out[o.Name] = o.ResourceVersion
		}
		return out
	}
	if !maps.Equal(rv(&statusBefore), rv(&statusAfter)) {
		t.Errorf("ServiceL2Status rewritten: %v -> %v", rv(&statusBefore), rv(&statusAfter))
	}

	// The busiest node's speaker dies: its addresses move, at most one other.
	load := map[string]int{}
	for _, n := range before {
		load[n]++
	}
	lost := nodes[0]
	for _, n := range nodes {
		if load[n] > load[lost] {
			lost = n
		}
	}
	live.set(lost, false)
	var rest []string
	for _, n := range nodes {
		if n != lost {
			rest = append(rest, n)
		}
	}
	after := owners("after "+lost+" died", rest, announce.BalancedCapacity(5, 2))
	others := 0
	for a, n := range before {
		if n != lost && after[a] != n {
			others++
		}
	}
	if others > 1 {
		t.Errorf("%s died: %d addresses of other nodes moved (before %v, after %v)", lost, others, before, after)
	}
}

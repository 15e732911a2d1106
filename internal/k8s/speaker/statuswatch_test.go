package speaker

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

// statusRepairTimeout bounds how long a repair may take: the speaker
// restores its status objects within a second of the change (docs); the
// margin is for a loaded machine.
const statusRepairTimeout = 15 * time.Second

// statusObjects lists the ServiceL2Status and ServiceBGPStatus objects in
// ns, sorted by name.
func statusObjects(c client.Client, ns string) ([]v1beta1.ServiceL2Status, []v1beta1.ServiceBGPStatus, error) {
	ctx := context.Background()
	var l2 v1beta1.ServiceL2StatusList
	var bgps v1beta1.ServiceBGPStatusList
	if err := c.List(ctx, &l2, client.InNamespace(ns)); err != nil {
		return nil, nil, err
	}
	if err := c.List(ctx, &bgps, client.InNamespace(ns)); err != nil {
		return nil, nil, err
	}
	sortByName(l2.Items, func(o *v1beta1.ServiceL2Status) string { return o.Name })
	sortByName(bgps.Items, func(o *v1beta1.ServiceBGPStatus) string { return o.Name })
	return l2.Items, bgps.Items, nil
}

// summary names objs with their labels, for failure messages.
func summary[T any, PT interface {
	*T
	client.Object
}](objs []T) []string {
	var out []string
	for i := range objs {
		o := PT(&objs[i])
		out = append(out, fmt.Sprintf("%s%v", o.GetName(), o.GetLabels()))
	}
	return out
}

// TestStatusObjectsRepaired: the speaker watches its own status objects
// and restores them when someone else deletes or edits them, removes the
// node label from one, or leaves a stale one of this node behind; its own
// writes do not make it write again.
func TestStatusObjectsRepaired(t *testing.T) {
	f := newL2Fixture(t, "n1")
	ctx := context.Background()
	c := f.c
	ip := netip.MustParseAddr("198.51.100.10")
	f.service("web", ip, "n1")
	s := startSpeaker(t, f.env, f.ns, "n1", &liveness{live: map[string]bool{"n1": true}})
	svcLabels := map[string]string{v1beta1.LabelNode: "n1", v1beta1.LabelServiceName: "web", v1beta1.LabelServiceNamespace: f.svcN}
	common := v1beta1.ServiceStatusCommon{Node: "n1", ServiceName: "web", ServiceNamespace: f.svcN}

	// converged waits until ns holds exactly one ServiceL2Status and one
	// ServiceBGPStatus, both of web on n1, labelled and with the status the
	// speaker wants (peers: peers), and returns them.
	converged := func(t *testing.T, what string, peers ...string) (v1beta1.ServiceL2Status, v1beta1.ServiceBGPStatus) {
		t.Helper()
		var l2 v1beta1.ServiceL2Status
		var bgp v1beta1.ServiceBGPStatus
		poll.Until(t, statusRepairTimeout, what, func() error {
			l2s, bgps, err := statusObjects(c, f.ns)
			if err != nil {
				return err
			}
			if len(l2s) != 1 || len(bgps) != 1 {
				return fmt.Errorf("%d ServiceL2Status %v, %d ServiceBGPStatus %v; want one of each", len(l2s), summary(l2s), len(bgps), summary(bgps))
			}
			l2, bgp = l2s[0], bgps[0]
			for _, m := range []metav1.ObjectMeta{l2.ObjectMeta, bgp.ObjectMeta} {
				for k, v := range svcLabels {
					if m.Labels[k] != v {
						return fmt.Errorf("%s: labels %v, want %v", m.Name, m.Labels, svcLabels)
					}
				}
			}
			if l2.Status.ServiceStatusCommon != common || len(l2.Status.Interfaces) != 1 {
				return fmt.Errorf("%s: status %+v", l2.Name, l2.Status)
			}
			if bgp.Status.ServiceStatusCommon != common || !slices.Equal(bgp.Status.Peers, peers) {
				return fmt.Errorf("%s: status %+v, want peers %v", bgp.Name, bgp.Status, peers)
			}
			return nil
		})
		return l2, bgp
	}
	converged(t, "the status objects of web", "p1")

	t.Run("cache holds statusRefs", func(t *testing.T) {
		// What the informers hold and hand to the watch's handlers: a
		// new handler is sent every object of the store.
		l2, bgp := converged(t, "the status objects of web", "p1")
		for _, o := range []client.Object{&l2, &bgp} {
			inf, err := s.mgr.GetCache().GetInformer(ctx, o)
			must(t, err)
			var mu sync.Mutex
			var got []any
			reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
				mu.Lock()
				got = append(got, obj)
				mu.Unlock()
			}})
			must(t, err)
			poll.Until(t, statusRepairTimeout, "the cache sends "+o.GetName(), func() error {
				mu.Lock()
				defer mu.Unlock()
				for _, obj := range got {
					r, ok := obj.(*statusRef)
					if !ok {
						t.Fatalf("the informer of %T holds a %T, want a *statusRef", o, obj)
					}
					if r.GetName() == o.GetName() && r.GetNamespace() == o.GetNamespace() && r.GetResourceVersion() == o.GetResourceVersion() {
						if g, w := statusKeyOf(r), statusKeyOf(o); g != w || g != f.svcN+"/web" {
							t.Errorf("%s: statusKeyOf of the cached record %q, of the object %q", o.GetName(), g, w)
						}
						return nil
					}
				}
				return fmt.Errorf("not among %d objects", len(got))
			})
			must(t, inf.RemoveEventHandler(reg))
		}
	})

	t.Run("deleted", func(t *testing.T) {
		l2, _ := converged(t, "the status objects of web", "p1")
		must(t, c.Delete(ctx, &l2))
		again, _ := converged(t, "a deleted ServiceL2Status recreated", "p1")
		if again.UID == l2.UID {
			t.Fatalf("ServiceL2Status %s not deleted", l2.Name)
		}
	})

	t.Run("status edited", func(t *testing.T) {
		_, bgp := converged(t, "the status objects of web", "p1")
		bgp.Status.Peers = []string{"forged"}
		must(t, c.Status().Update(ctx, &bgp))
		_, again := converged(t, "an edited ServiceBGPStatus restored", "p1")
		if again.UID != bgp.UID {
			t.Errorf("ServiceBGPStatus %s replaced by %s, want it restored in place", bgp.Name, again.Name)
		}
	})

	t.Run("node label removed", func(t *testing.T) {
		l2, _ := converged(t, "the status objects of web", "p1")
		patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, v1beta1.LabelNode))
		must(t, c.Patch(ctx, &l2, client.RawPatch("application/merge-patch+json", patch)))
		again, _ := converged(t, "the node label restored, no second object", "p1")
		if again.UID != l2.UID {
			t.Errorf("ServiceL2Status %s replaced by %s, want its label restored", l2.Name, again.Name)
		}
	})

	t.Run("stale objects", func(t *testing.T) {
		converged(t, "the status objects of web", "p1")
		// An object of this node for a Service it does not announce, and a
		// second object of web.
		stale := &v1beta1.ServiceL2Status{ObjectMeta: metav1.ObjectMeta{Name: "l2-stale", Namespace: f.ns,
			Labels: map[string]string{v1beta1.LabelNode: "n1", v1beta1.LabelServiceName: "gone", v1beta1.LabelServiceNamespace: f.svcN}}}
		must(t, c.Create(ctx, stale))
		stale.Status.ServiceStatusCommon = v1beta1.ServiceStatusCommon{Node: "n1", ServiceName: "gone", ServiceNamespace: f.svcN}
		// The speaker may delete it by its labels before its status is
		// written: that is the outcome the test waits for.
		if err := c.Status().Update(ctx, stale); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		extra := &v1beta1.ServiceBGPStatus{ObjectMeta: metav1.ObjectMeta{Name: "bgp-extra", Namespace: f.ns, Labels: svcLabels}}
		must(t, c.Create(ctx, extra))
		converged(t, "the stale objects deleted", "p1")
	})

	t.Run("own writes do not loop", func(t *testing.T) {
		converged(t, "the status objects of web", "p1")
		foreign, unknown := s.logs.count(logStatusForeign), s.logs.count(logStatusUnknown)
		// Every kind of write of the speaker: a new Service (creates and
		// status writes), a new peer (status updates), a Service deleted
		// (deletes).
		f.service("api", netip.MustParseAddr("198.51.100.11"), "n1")
		must(t, c.Create(ctx, &v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "p2", Namespace: f.ns},
			Spec: v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64514, PeerAddress: "203.0.113.2"}}))
		poll.Until(t, statusRepairTimeout, "api's objects written, the peers updated", func() error {
			l2s, bgps, err := statusObjects(c, f.ns)
			if err != nil {
				return err
			}
			if len(l2s) != 2 || len(bgps) != 2 {
				return fmt.Errorf("%d ServiceL2Status, %d ServiceBGPStatus", len(l2s), len(bgps))
			}
			for _, o := range bgps {
				if !slices.Equal(o.Status.Peers, []string{"p1", "p2"}) {
					return fmt.Errorf("%s: peers %v", o.Name, o.Status.Peers)
				}
			}
			return nil
		})
		must(t, c.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: f.svcN}}))
		converged(t, "api's objects deleted", "p1", "p2")
		// Then quiet: no status object changes for a few seconds.
		events := countStatusEvents(t, f.env, f.ns)
		time.Sleep(3 * time.Second)
		if n := events(); n != 0 {
			t.Fatalf("%d status object events in 3 s with nothing changing", n)
		}
		// None of the speaker's own writes was taken for someone else's.
		if f, u := s.logs.count(logStatusForeign)-foreign, s.logs.count(logStatusUnknown)-unknown; f != 0 || u != 0 {
			t.Errorf("the speaker's own writes were judged foreign %d times, of an unknown Service %d times", f, u)
		}
		// And every echo was used up: no watch state is left behind.
		w := s.spk.status
		w.mu.Lock()
		defer w.mu.Unlock()
		for key, e := range w.entries {
			if e.watch != nil || e.undecided {
				t.Errorf("%s: watch state %+v, undecided %v left after the writes settled", key, e.watch, e.undecided)
			}
		}
	})
}

// countStatusEvents watches the status objects in ns and returns a
// function that tells how many events arrived so far (the initial
// objects' ADDED events not counted).
func countStatusEvents(t *testing.T, env *testenv.Env, ns string) func() int {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var mu sync.Mutex
	n := 0
	for _, list := range []client.ObjectList{&v1beta1.ServiceL2StatusList{}, &v1beta1.ServiceBGPStatusList{}} {
		must(t, wc.List(ctx, list, client.InNamespace(ns)))
		rv := list.GetResourceVersion()
		fresh := list.DeepCopyObject().(client.ObjectList)
		w, err := wc.Watch(ctx, fresh, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
		must(t, err)
		t.Cleanup(w.Stop)
		go func() {
			for ev := range w.ResultChan() {
				if ev.Type == watch.Bookmark {
					continue
				}
				mu.Lock()
				n++
				mu.Unlock()
			}
		}()
	}
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// TestStatusWatchAccounts: the events of the writer's own writes (a create
// and its status write, in order or with the first skipped by a re-list, a
// delete) are accounted for and use their echoes up; an event the writer
// did not cause (another resourceVersion, an object its record does not
// hold, a deletion of one it holds) is not.
func TestStatusWatchAccounts(t *testing.T) {
	ev := func(name, rv string) statusEvent { return statusEvent{kind: kindBGP, name: name, rv: rv} }
	gone := func(name string) statusEvent { return statusEvent{kind: kindBGP, name: name, gone: true, left: true} }
	written := func() *statusEntry {
		// The writer created bgp-a (version 1), wrote its status (2) and
		// deleted bgp-old.
		e := &statusEntry{}
		e.bgp = statusRecord[v1beta1.ServiceBGPStatusStatus]{known: true,
			objs: []statusObject[v1beta1.ServiceBGPStatusStatus]{{name: "bgp-a", resourceVersion: "2"}}}
		e.watch = &statusWatch{}
		e.watch.settle(e, []statusEvent{ev("bgp-a", "1"), ev("bgp-a", "2"), {kind: kindBGP, name: "bgp-old", gone: true}}, true, true)
		return e
	}
	tests := []struct {
		name   string
		events []statusEvent
		want   []bool
	}{
		{"own events in order", []statusEvent{ev("bgp-a", "1"), ev("bgp-a", "2"), gone("bgp-old")}, []bool{true, true, true}},
		{"the first skipped by a re-list", []statusEvent{ev("bgp-a", "2"), gone("bgp-old")}, []bool{true, true}},
		{"then someone edits it", []statusEvent{ev("bgp-a", "1"), ev("bgp-a", "2"), ev("bgp-a", "3")}, []bool{true, true, false}},
		{"then someone deletes it", []statusEvent{ev("bgp-a", "2"), gone("bgp-a")}, []bool{true, false}},
		{"an object the writer does not hold", []statusEvent{ev("bgp-x", "5")}, []bool{false}},
		{"another kind", []statusEvent{{kind: kindL2, name: "bgp-a", rv: "2"}}, []bool{false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := written()
			for i, x := range tc.events {
				if got := e.accounts(x); got != tc.want[i] {
					t.Fatalf("event %d %+v: accounted %v, want %v", i, x, got, tc.want[i])
				}
			}
			if slices.Equal(tc.want, []bool{true, true, true}) || slices.Equal(tc.want, []bool{true, true}) {
				if len(e.watch.echo) != 0 {
					t.Errorf("echoes left after every own event: %+v", e.watch.echo)
				}
			}
		})
	}
}

package sessiongc

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/herald-lb/herald/api/v1alpha1"
	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	const grace = time.Minute
	for _, tc := range []struct {
		name        string
		s           Speaker
		absentSince time.Time
		now         time.Time
		grace       time.Duration
		want        Decision
	}{
		{"present", SpeakerPresent, time.Time{}, t0, grace, Decision{}},
		{"present again resets the clock", SpeakerPresent, t0.Add(-time.Hour), t0, grace, Decision{}},
		{"first seen absent", SpeakerNone, time.Time{}, t0, grace, Decision{AbsentSince: t0, After: grace}},
		{"first seen terminating", SpeakerTerminating, time.Time{}, t0, grace, Decision{AbsentSince: t0, After: grace}},
		{"absent within the grace", SpeakerNone, t0.Add(-20 * time.Second), t0, grace, Decision{AbsentSince: t0.Add(-20 * time.Second), After: 40 * time.Second}},
		{"terminating within the grace", SpeakerTerminating, t0.Add(-59 * time.Second), t0, grace, Decision{AbsentSince: t0.Add(-59 * time.Second), After: time.Second}},
		{"absent for the grace", SpeakerNone, t0.Add(-grace), t0, grace, Decision{AbsentSince: t0.Add(-grace), Delete: true}},
		{"terminating beyond the grace", SpeakerTerminating, t0.Add(-time.Hour), t0, grace, Decision{AbsentSince: t0.Add(-time.Hour), Delete: true}},
		{"clock went back", SpeakerNone, t0.Add(time.Hour), t0, grace, Decision{AbsentSince: t0, After: grace}},
		{"zero grace is the default", SpeakerNone, t0.Add(-30 * time.Second), t0, 0, Decision{AbsentSince: t0.Add(-30 * time.Second), After: DefaultGrace - 30*time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Decide(tc.s, tc.absentSince, tc.now, tc.grace); got != tc.want {
				t.Errorf("Decide(%v, %v, %v, %v) = %+v, want %+v", tc.s, tc.absentSince, tc.now, tc.grace, got, tc.want)
			}
		})
	}
}

// decision is one observed call of Decide by the reconciler.
type decision struct {
	s   Speaker
	now time.Time
	d   Decision
}

type observed struct {
	mu sync.Mutex
	by map[string][]decision
}

func (o *observed) add(node string, s Speaker, now time.Time, d Decision) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.by[node] = append(o.by[node], decision{s, now, d})
}

// find returns the first decision on node matching f.
func (o *observed) find(node string, f func(decision) bool) (decision, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, d := range o.by[node] {
		if f(d) {
			return d, true
		}
	}
	return decision{}, false
}

// TestSpeakerGone runs the reconciler against a real API server: the
// objects of a node with a speaker Pod stay, those of a node whose speaker
// Pod is deleted go once the grace has passed, and a Pod re-created within
// the grace keeps them.
func TestSpeakerGone(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	const grace = 2 * time.Second
	speakerLabels := map[string]string{"app.kubernetes.io/component": "speaker"}

	inNS := cache.ByObject{Namespaces: map[string]cache.Config{ns: {}}}
	mgr, err := manager.New(env.Config, manager.Options{
		Scheme:  env.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: inNS, &v1alpha1.BGPSessionState{}: inNS,
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	obs := &observed{by: map[string][]decision{}}
	if err := Setup(mgr, Options{
		Namespace: ns, SpeakerSelector: labels.SelectorFromSet(speakerLabels), Grace: grace,
		observe: obs.add,
	}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	c := env.Client
	createPod := func(name, node string, l map[string]string) {
		t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: l},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "speaker", Image: "speaker"}}},
		}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	deletePod := func(name string) {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		// No kubelet: delete at once instead of waiting for one.
		if err := c.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	}
	createStates := func(node string) {
		t.Helper()
		for _, peer := range []string{"peer-a", "peer-b"} {
			st := &v1alpha1.BGPSessionState{ObjectMeta: metav1.ObjectMeta{
				Name: node + "-" + peer, Namespace: ns,
				Labels: map[string]string{v1alpha1.LabelNode: node, v1alpha1.LabelBGPPeer: peer},
			}}
			if err := c.Create(ctx, st); err != nil {
				t.Fatal(err)
			}
		}
	}
	count := func(node string) int {
		t.Helper()
		var l v1alpha1.BGPSessionStateList
		if err := c.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelNode: node}); err != nil {
			t.Fatal(err)
		}
		return len(l.Items)
	}

	// node-stay keeps its speaker; node-gone loses it; node-rollout's is
	// deleted and re-created within the grace. A Pod that is not a
	// speaker does not count.
	createPod("speaker-stay", "node-stay", speakerLabels)
	createPod("speaker-gone", "node-gone", speakerLabels)
	createPod("speaker-rollout", "node-rollout", speakerLabels)
	createPod("other-gone", "node-gone", map[string]string{"app": "other"})
	for _, n := range []string{"node-stay", "node-gone", "node-rollout"} {
		createStates(n)
	}
	present := func(d decision) bool { return d.s == SpeakerPresent }
	for _, n := range []string{"node-stay", "node-gone", "node-rollout"} {
		poll.Until(t, 30*time.Second, n+" seen with its speaker", func() bool { _, ok := obs.find(n, present); return ok })
	}

	// node-rollout's speaker is seen absent before node-gone's, so its
	// grace has passed when node-gone's objects are deleted.
	deletePod("speaker-rollout")
	absent := func(d decision) bool { return d.s != SpeakerPresent }
	poll.Until(t, 30*time.Second, "node-rollout seen without speaker", func() bool { _, ok := obs.find("node-rollout", absent); return ok })
	deletePod("speaker-gone")
	createPod("speaker-rollout-2", "node-rollout", speakerLabels)

	poll.Until(t, 30*time.Second, "node-gone's objects deleted", func() error {
		if n := count("node-gone"); n != 0 {
			return fmt.Errorf("%d objects left", n)
		}
		return nil
	})
	gone, _ := obs.find("node-gone", func(d decision) bool { return d.d.Delete })
	if first, _ := obs.find("node-gone", absent); gone.now.Sub(first.now) < grace {
		t.Errorf("node-gone's objects deleted %v after its speaker was first seen absent, before the grace %v", gone.now.Sub(first.now), grace)
	}
	// A change of one of node-rollout's objects, after its grace, has
	// it looked at again: its new Pod keeps them.
	firstAbsent, _ := obs.find("node-rollout", absent)
	if gone.now.Sub(firstAbsent.now) < grace {
		t.Fatalf("node-gone deleted %v after node-rollout's speaker was seen absent, less than the grace", gone.now.Sub(firstAbsent.now))
	}
	var st v1alpha1.BGPSessionState
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "node-rollout-peer-a"}, &st); err != nil {
		t.Fatal(err)
	}
	st.Annotations = map[string]string{"test": "touch"}
	if err := c.Update(ctx, &st); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "node-rollout looked at after its grace", func() bool {
		_, ok := obs.find("node-rollout", func(d decision) bool { return present(d) && d.now.Sub(firstAbsent.now) >= grace })
		return ok
	})
	if _, ok := obs.find("node-rollout", func(d decision) bool { return d.d.Delete }); ok {
		t.Error("node-rollout's objects deleted although its speaker Pod was re-created within the grace")
	}
	for _, n := range []string{"node-stay", "node-rollout"} {
		if got := count(n); got != 2 {
			t.Errorf("%s: %d BGPSessionStates, want 2 (its speaker runs)", n, got)
		}
	}
	var p corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "speaker-gone"}, &p); !apierrors.IsNotFound(err) {
		t.Errorf("speaker-gone still exists: %v", err)
	}
}

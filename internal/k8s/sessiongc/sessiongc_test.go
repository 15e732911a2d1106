package sessiongc

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/herald-lb/herald/api/v1alpha1"
	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	const grace = time.Minute
	ago := func(d time.Duration) time.Time { return t0.Add(-d) }
	var zero time.Time
	for _, tc := range []struct {
		name                   string
		s                      Speaker
		downSince, absentSince time.Time
		grace                  time.Duration
		want                   Decision
	}{
		{"ready", SpeakerReady, zero, zero, grace, Decision{}},
		{"ready again resets the clocks", SpeakerReady, ago(time.Hour), ago(time.Hour), grace, Decision{}},
		// A running container that is not Ready yet writes its own states.
		{"starting is not marked", SpeakerStarting, zero, zero, grace, Decision{}},
		{"starting after a crash resets the clock", SpeakerStarting, ago(time.Minute), zero, grace, Decision{}},
		{"first seen not running", SpeakerNotRunning, zero, zero, grace, Decision{DownSince: t0, Mark: true}},
		{"not running for long: marked, never deleted", SpeakerNotRunning, ago(time.Hour), zero, grace, Decision{DownSince: ago(time.Hour), Mark: true}},
		{"Pod back after absence: absence clock reset", SpeakerNotRunning, ago(2 * time.Minute), ago(time.Minute), grace, Decision{DownSince: ago(2 * time.Minute), Mark: true}},
		{"first seen absent", SpeakerNone, zero, zero, grace, Decision{DownSince: t0, AbsentSince: t0, Mark: true, After: grace}},
		{"first seen terminating", SpeakerTerminating, zero, zero, grace, Decision{DownSince: t0, AbsentSince: t0, Mark: true, After: grace}},
		{"absent after not running: down clock kept, grace from absence", SpeakerNone, ago(time.Hour), zero, grace, Decision{DownSince: ago(time.Hour), AbsentSince: t0, Mark: true, After: grace}},
		{"absent within the grace", SpeakerNone, ago(20 * time.Second), ago(20 * time.Second), grace, Decision{DownSince: ago(20 * time.Second), AbsentSince: ago(20 * time.Second), Mark: true, After: 40 * time.Second}},
		{"terminating within the grace", SpeakerTerminating, ago(59 * time.Second), ago(59 * time.Second), grace, Decision{DownSince: ago(59 * time.Second), AbsentSince: ago(59 * time.Second), Mark: true, After: time.Second}},
		{"absent for the grace", SpeakerNone, ago(grace), ago(grace), grace, Decision{DownSince: ago(grace), AbsentSince: ago(grace), Delete: true}},
		{"terminating beyond the grace", SpeakerTerminating, ago(time.Hour), ago(time.Hour), grace, Decision{DownSince: ago(time.Hour), AbsentSince: ago(time.Hour), Delete: true}},
		{"clock went back", SpeakerNone, t0.Add(time.Hour), t0.Add(time.Hour), grace, Decision{DownSince: t0, AbsentSince: t0, Mark: true, After: grace}},
		{"clock went back, not running", SpeakerNotRunning, t0.Add(time.Hour), zero, grace, Decision{DownSince: t0, Mark: true}},
		{"zero grace is the default", SpeakerNone, ago(30 * time.Second), ago(30 * time.Second), 0, Decision{DownSince: ago(30 * time.Second), AbsentSince: ago(30 * time.Second), Mark: true, After: DefaultGrace - 30*time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Decide(tc.s, tc.downSince, tc.absentSince, t0, tc.grace); got != tc.want {
				t.Errorf("Decide(%v, %v, %v, %v, %v) = %+v, want %+v", tc.s, tc.downSince, tc.absentSince, t0, tc.grace, got, tc.want)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	now := metav1.Now()
	ready := func(st corev1.ConditionStatus) corev1.PodCondition {
		return corev1.PodCondition{Type: corev1.PodReady, Status: st}
	}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	waiting := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
	terminated := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}
	pod := func(node string, deleting bool, conds []corev1.PodCondition, cs ...corev1.ContainerStatus) corev1.Pod {
		p := corev1.Pod{Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Conditions: conds, ContainerStatuses: cs}}
		if deleting {
			p.DeletionTimestamp = &now
		}
		return p
	}
	speaker := func(st corev1.ContainerState) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: ContainerName, State: st}
	}
	sidecar := corev1.ContainerStatus{Name: "sidecar", State: running}
	for _, tc := range []struct {
		name string
		pods []corev1.Pod
		want Speaker
	}{
		{"none", nil, SpeakerNone},
		{"other node's Pod", []corev1.Pod{pod("n2", false, []corev1.PodCondition{ready(corev1.ConditionTrue)})}, SpeakerNone},
		{"ready", []corev1.Pod{pod("n1", false, []corev1.PodCondition{ready(corev1.ConditionTrue)}, speaker(running))}, SpeakerReady},
		{"ready but being deleted", []corev1.Pod{pod("n1", true, []corev1.PodCondition{ready(corev1.ConditionTrue)}, speaker(running))}, SpeakerTerminating},
		{"running, not Ready yet", []corev1.Pod{pod("n1", false, []corev1.PodCondition{ready(corev1.ConditionFalse)}, speaker(running))}, SpeakerStarting},
		{"crash loop", []corev1.Pod{pod("n1", false, []corev1.PodCondition{ready(corev1.ConditionFalse)}, speaker(waiting))}, SpeakerNotRunning},
		{"exited", []corev1.Pod{pod("n1", false, []corev1.PodCondition{ready(corev1.ConditionFalse)}, speaker(terminated))}, SpeakerNotRunning},
		{"speaker exited, sidecar runs", []corev1.Pod{pod("n1", false, []corev1.PodCondition{ready(corev1.ConditionFalse)}, sidecar, speaker(terminated))}, SpeakerNotRunning},
		{"unnamed container runs", []corev1.Pod{pod("n1", false, nil, sidecar)}, SpeakerStarting},
		{"pending, no status", []corev1.Pod{pod("n1", false, nil)}, SpeakerNotRunning},
		{"rollout: old terminating, new ready", []corev1.Pod{pod("n1", true, nil), pod("n1", false, []corev1.PodCondition{ready(corev1.ConditionTrue)})}, SpeakerReady},
		{"rollout: old terminating, new pending", []corev1.Pod{pod("n1", true, nil), pod("n1", false, nil)}, SpeakerNotRunning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(tc.pods, "n1"); got != tc.want {
				t.Errorf("Classify = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMark(t *testing.T) {
	since := time.Date(2026, 12, 1, 12, 0, 0, 500, time.UTC)
	sinceS := metav1.NewTime(since.Truncate(time.Second))
	old := metav1.NewTime(since.Add(-time.Hour))
	est := v1alpha1.BGPSessionStateStatus{
		Node: "n3", Peer: "192.0.2.1", BGPPeer: "router", BGPStatus: "Established", BFDStatus: "Up",
		LastTransitionTime: &old, LastError: "hold timer expired", LastErrorTime: &old,
		PrefixesAdvertised: 3, PrefixesReceived: 1,
	}
	got, changed := Mark(est, "n3", since, SpeakerNotRunning)
	want := est
	want.BGPStatus, want.BFDStatus = StatusUnknown, StatusUnknown
	want.LastTransitionTime, want.LastErrorTime = &sinceS, &sinceS
	want.LastError = "speaker on node n3 not running since 2026-12-01T12:00:00Z: speaker container not running"
	if !changed || !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("Mark(Established) = %+v, %v; want %+v, true", got, changed, want)
	}
	// Marked already: kept, with its time (a restarted controller's
	// clock is later).
	if again, changed := Mark(got, "n3", since.Add(time.Hour), SpeakerNone); changed || !equality.Semantic.DeepEqual(again, got) {
		t.Errorf("Mark(marked) = %+v, %v; want it unchanged", again, changed)
	}
	// BFD not configured stays N/A; a speaker's Unknown (no state seen
	// yet) is marked.
	noBFD := est
	noBFD.BGPStatus, noBFD.BFDStatus = StatusUnknown, v1alpha1.BFDStatusNotConfigured
	if got, changed := Mark(noBFD, "n3", since, SpeakerTerminating); !changed || got.BFDStatus != v1alpha1.BFDStatusNotConfigured || !strings.HasSuffix(got.LastError, "speaker Pod being deleted") {
		t.Errorf("Mark(no BFD) = %+v, %v", got, changed)
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
	// setPod writes a Pod's status as a kubelet would (there is none):
	// Ready with its speaker container running, not Ready with it
	// running (starting), or not Ready with it waiting (crash loop).
	setPod := func(name string, s Speaker) {
		t.Helper()
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		state := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
		ready := corev1.ConditionFalse
		switch s {
		case SpeakerReady:
			ready = corev1.ConditionTrue
		case SpeakerNotRunning:
			state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: ready, LastTransitionTime: metav1.Now()}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, Image: "speaker", State: state, Ready: ready == corev1.ConditionTrue}}
		if err := c.Status().Update(ctx, &p); err != nil {
			t.Fatal(err)
		}
	}
	createPod := func(name, node string, l map[string]string) {
		t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: l},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: ContainerName, Image: "speaker"}}},
		}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		setPod(name, SpeakerReady)
	}
	deletePod := func(name string) {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		// No kubelet: delete at once instead of waiting for one.
		if err := c.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	}
	// speakerWrites writes what a speaker would: Established since t1.
	t1 := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	speakerWrites := func(node, peer string) {
		t.Helper()
		var st v1alpha1.BGPSessionState
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: node + "-" + peer}, &st); err != nil {
			t.Fatal(err)
		}
		st.Status = v1alpha1.BGPSessionStateStatus{
			Node: node, Peer: "192.0.2.1", BGPPeer: peer, BGPStatus: "Established", BFDStatus: v1alpha1.BFDStatusNotConfigured,
			LastTransitionTime: &t1,
		}
		if err := c.Status().Update(ctx, &st); err != nil {
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
			speakerWrites(node, peer)
		}
	}
	// bgpStatus lists the bgpStatus of node's objects, with the lastError
	// of those that are not Established.
	bgpStatus := func(node string) []string {
		t.Helper()
		var l v1alpha1.BGPSessionStateList
		if err := c.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelNode: node}); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, st := range l.Items {
			if st.Status.BGPStatus == "Established" {
				out = append(out, "Established")
			} else {
				out = append(out, st.Status.BGPStatus+" ("+st.Status.LastError+")")
			}
		}
		return out
	}
	allMarked := func(node string) error {
		got := bgpStatus(node)
		for _, s := range got {
			if !strings.HasPrefix(s, StatusUnknown+" ("+markPrefix(node)) {
				return fmt.Errorf("%s: %q, want every object marked", node, got)
			}
		}
		if len(got) != 2 {
			return fmt.Errorf("%s: %q, want 2 objects", node, got)
		}
		return nil
	}
	allEstablished := func(node string) error {
		if got := bgpStatus(node); len(got) != 2 || got[0] != "Established" || got[1] != "Established" {
			return fmt.Errorf("%s: %q, want 2 Established", node, got)
		}
		return nil
	}
	// touch changes an object's annotation, so its node is looked at.
	touch := func(name string) {
		t.Helper()
		var st v1alpha1.BGPSessionState
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &st); err != nil {
			t.Fatal(err)
		}
		st.Annotations = map[string]string{"test": time.Now().String()}
		if err := c.Update(ctx, &st); err != nil {
			t.Fatal(err)
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
	createPod("speaker-crash", "node-crash", speakerLabels)
	createPod("other-gone", "node-gone", map[string]string{"app": "other"})
	for _, n := range []string{"node-stay", "node-gone", "node-rollout", "node-crash"} {
		createStates(n)
	}
	present := func(d decision) bool { return d.s == SpeakerReady }
	for _, n := range []string{"node-stay", "node-gone", "node-rollout", "node-crash"} {
		poll.Until(t, 30*time.Second, n+" seen with its speaker", func() bool { _, ok := obs.find(n, present); return ok })
	}

	// node-crash's speaker crashes, its Pod stays (a crash loop): its
	// objects are marked at once. A write while no speaker runs (a
	// speaker's last, late write) is marked again.
	setPod("speaker-crash", SpeakerNotRunning)
	poll.Until(t, 30*time.Second, "node-crash's objects marked", func() error { return allMarked("node-crash") })
	crashed, _ := obs.find("node-crash", func(d decision) bool { return d.s == SpeakerNotRunning })
	speakerWrites("node-crash", "peer-a")
	poll.Until(t, 30*time.Second, "node-crash's late write marked again", func() error { return allMarked("node-crash") })

	// node-rollout's speaker is seen absent before node-gone's, so its
	// grace has passed when node-gone's objects are deleted.
	deletePod("speaker-rollout")
	absent := func(d decision) bool { return d.s == SpeakerNone || d.s == SpeakerTerminating }
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
	touch("node-rollout-peer-a")
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
	// node-rollout's objects were marked while it had no Pod; its new
	// speaker rewrites them and they stay so.
	if err := allMarked("node-rollout"); err != nil {
		t.Error(err)
	}
	for _, peer := range []string{"peer-a", "peer-b"} {
		speakerWrites("node-rollout", peer)
	}
	touched := time.Now()
	touch("node-rollout-peer-b")
	poll.Until(t, 30*time.Second, "node-rollout looked at after its speaker's writes", func() bool {
		_, ok := obs.find("node-rollout", func(d decision) bool { return d.now.After(touched) })
		return ok
	})
	if err := allEstablished("node-rollout"); err != nil {
		t.Error(err)
	}

	// node-crash's Pod stayed, its speaker not running, for longer than
	// the grace: marked, not deleted.
	touched = time.Now()
	touch("node-crash-peer-b")
	poll.Until(t, 30*time.Second, "node-crash looked at after its grace", func() bool {
		_, ok := obs.find("node-crash", func(d decision) bool { return d.now.After(touched) })
		return ok
	})
	if touched.Sub(crashed.now) < grace {
		t.Fatalf("node-crash looked at %v after its crash, less than the grace", touched.Sub(crashed.now))
	}
	if _, ok := obs.find("node-crash", func(d decision) bool { return d.d.Delete }); ok {
		t.Error("node-crash's objects deleted although its speaker Pod exists")
	}
	if err := allMarked("node-crash"); err != nil {
		t.Error(err)
	}
	// Its container runs again, not Ready yet: the speaker's writes are
	// not marked; nor once it is Ready.
	startedAt := time.Now()
	setPod("speaker-crash", SpeakerStarting)
	poll.Until(t, 30*time.Second, "node-crash seen starting", func() bool {
		_, ok := obs.find("node-crash", func(d decision) bool { return d.s == SpeakerStarting && d.now.After(startedAt) })
		return ok
	})
	for _, peer := range []string{"peer-a", "peer-b"} {
		speakerWrites("node-crash", peer)
	}
	touched = time.Now()
	touch("node-crash-peer-a")
	poll.Until(t, 30*time.Second, "node-crash looked at after its speaker's writes", func() bool {
		_, ok := obs.find("node-crash", func(d decision) bool { return d.now.After(touched) })
		return ok
	})
	if err := allEstablished("node-crash"); err != nil {
		t.Error(err)
	}
	readyAt := time.Now()
	setPod("speaker-crash", SpeakerReady)
	poll.Until(t, 30*time.Second, "node-crash seen Ready", func() bool {
		_, ok := obs.find("node-crash", func(d decision) bool { return d.s == SpeakerReady && d.now.After(readyAt) })
		return ok
	})
	if err := allEstablished("node-crash"); err != nil {
		t.Error(err)
	}
	// Its Pod is deleted: marked at once, deleted after the grace.
	deletePod("speaker-crash")
	poll.Until(t, 30*time.Second, "node-crash's objects marked or deleted", func() error {
		if count("node-crash") == 0 {
			return nil
		}
		return allMarked("node-crash")
	})
	poll.Until(t, 30*time.Second, "node-crash's objects deleted", func() error {
		if n := count("node-crash"); n != 0 {
			return fmt.Errorf("%d objects left", n)
		}
		return nil
	})

	var p corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "speaker-gone"}, &p); !apierrors.IsNotFound(err) {
		t.Errorf("speaker-gone still exists: %v", err)
	}
}

// racingClient is a client whose status updates lose a race: before each
// one, another writer changes the object (as a speaker writing its state
// does), so the real API server refuses the update with Conflict.
type racingClient struct {
	client.Client
	raced int
}

func (c *racingClient) Status() client.SubResourceWriter {
	return racingStatus{SubResourceWriter: c.Client.Status(), c: c}
}

type racingStatus struct {
	client.SubResourceWriter
	c *racingClient
}

func (w racingStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	var fresh v1alpha1.BGPSessionState
	if err := w.c.Get(ctx, client.ObjectKeyFromObject(obj), &fresh); err != nil {
		return err
	}
	fresh.Annotations = map[string]string{"raced": fmt.Sprint(w.c.raced)}
	if err := w.c.Update(ctx, &fresh); err != nil {
		return err
	}
	w.c.raced++
	return w.SubResourceWriter.Update(ctx, obj, opts...)
}

// TestMarkConflictRequeued: a mark that loses a resourceVersion conflict
// is a routine race, retried soon, not a reconcile error (which
// controller-runtime logs as ERROR "Reconciler error"); the next look
// marks the object.
func TestMarkConflictRequeued(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	const node = "node-race"
	st := &v1alpha1.BGPSessionState{ObjectMeta: metav1.ObjectMeta{
		Name: node + "-peer-a", Namespace: ns,
		Labels: map[string]string{v1alpha1.LabelNode: node, v1alpha1.LabelBGPPeer: "peer-a"},
	}}
	if err := env.Client.Create(ctx, st); err != nil {
		t.Fatal(err)
	}
	st.Status = v1alpha1.BGPSessionStateStatus{Node: node, Peer: "192.0.2.1", BGPPeer: "peer-a", BGPStatus: "Established",
		BFDStatus: v1alpha1.BFDStatusNotConfigured}
	if err := env.Client.Status().Update(ctx, st); err != nil {
		t.Fatal(err)
	}
	o := Options{Namespace: ns, SpeakerSelector: labels.SelectorFromSet(map[string]string{"app": "speaker"}),
		Grace: time.Hour, Now: time.Now, Log: slog.New(slog.DiscardHandler)}
	racing := &racingClient{Client: env.Client}
	r := &reconciler{c: racing, o: o, clocks: map[string]clock{}}
	req := reconcile.Request{NamespacedName: client.ObjectKey{Name: node}}

	res, err := r.Reconcile(ctx, req)
	if err != nil {
		t.Fatalf("Reconcile after a lost conflict: error %v, want none (a retry)", err)
	}
	if racing.raced != 1 {
		t.Fatalf("%d raced updates, want 1 (the test's race did not happen)", racing.raced)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > conflictRetry {
		t.Errorf("RequeueAfter %v after a lost conflict, want (0, %v]", res.RequeueAfter, conflictRetry)
	}

	r.c = env.Client
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.BGPSessionState
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(st), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.BGPStatus != StatusUnknown || !strings.HasPrefix(got.Status.LastError, markPrefix(node)) {
		t.Errorf("after the retry: bgpStatus %q lastError %q, want %s and the mark", got.Status.BGPStatus, got.Status.LastError, StatusUnknown)
	}
}

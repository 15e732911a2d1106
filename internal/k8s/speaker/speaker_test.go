package speaker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/announce"
	"github.com/herald-lb/herald/internal/bgp"
	"github.com/herald-lb/herald/internal/k8s/fieldmanager"
	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

// testSpeaker is one speaker process stand-in: the real reconcile loop on
// its own manager, with recording announcers.
type testSpeaker struct {
	name    string
	l2      *fakeL2
	bgp     *bgp.Fake
	rec     *fakeRecorder
	logs    countingHandler
	members *fakeMembers
	reg     *prometheus.Registry
	states  *bgp.StateChanges
	bfd     *fakeBFD
	bfdCh   chan BFDChange
	spk     *Controller
	mgr     manager.Manager
}

var speakerPods = labels.Set{"app": "herald-speaker"}

// testSessionStateInterval is the test speakers' Options.SessionStateInterval.
const testSessionStateInterval = time.Second

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

func startSpeaker(t testing.TB, env *testenv.Env, ns, node string, live *liveness) *testSpeaker {
	t.Helper()
	m := live.member(node)
	s := startSpeakerWith(t, env, ns, node, m, 7946)
	s.members = m
	return s
}

// startSpeakerWith starts a speaker whose memberlist is members (a real
// *members.List or a fake), with memberPort as every speaker's port.
func startSpeakerWith(t testing.TB, env *testenv.Env, ns, node string, members Members, memberPort int) *testSpeaker {
	t.Helper()
	return startSpeakerProbed(t, env, ns, node, members, memberPort, "0")
}

// startSpeakerProbed is startSpeakerWith with the manager's health probe
// server (/healthz, /readyz) on healthAddr ("0": none).
// mods may change the options before Setup (after the fakes exist).
func startSpeakerProbed(t testing.TB, env *testenv.Env, ns, node string, members Members, memberPort int, healthAddr string, mods ...func(*testSpeaker, *Options)) *testSpeaker {
	t.Helper()
	s := &testSpeaker{name: node, l2: &fakeL2{}, bgp: &bgp.Fake{}, rec: &fakeRecorder{},
		logs: newCountingHandler(), reg: prometheus.NewRegistry(),
		states: bgp.NewStateChanges(0), bfd: &fakeBFD{}, bfdCh: make(chan BFDChange, 8)}
	skip := true
	mgr, err := manager.New(env.Config, manager.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: healthAddr,
		Cache:                  CacheOptions(ns, node, speakerPods.AsSelector()),
		Client:                 client.Options{Cache: &client.CacheOptions{DisableFor: UncachedObjects()}},
		Controller:             ctrlconfig.Controller{SkipNameValidation: &skip},
	})
	if err != nil {
		t.Fatal(err)
	}
	// As speaker/main.go: the process's own checks, then Setup's.
	must(t, mgr.AddHealthzCheck("ping", healthz.Ping))
	must(t, mgr.AddReadyzCheck("ping", healthz.Ping))
	opts := Options{
		NodeName: node, Namespace: ns, PodName: "speaker-" + node,
		Logger: slog.New(s.logs), Registerer: s.reg, Recorder: s.rec,
		L2: s.l2, BGP: s.bgp, PeerStates: s.states, BFD: s.bfd, BFDChanges: s.bfdCh, SessionWarnAfter: 300 * time.Millisecond, SessionStateInterval: testSessionStateInterval, Members: members, MemberPort: memberPort, MemberSelector: speakerPods.AsSelector(),
	}
	for _, mod := range mods {
		mod(s, &opts)
	}
	if s.spk, err = Setup(mgr, opts); err != nil {
		t.Fatal(err)
	}
	s.mgr = mgr
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager of %s: %v", node, err)
		}
	})
	return s
}

func gauge(reg prometheus.Gatherer, name string, lbls map[string]string) (v float64, ok bool) {
	// The first series of name with lbls.
	eachSeries(reg, name, lbls, func(x float64) {
		if !ok {
			v, ok = x, true
		}
	})
	return v, ok
}

type world struct {
	t        *testing.T
	c        client.Client
	ns, svcN string
	ip       netip.Addr
	speakers map[string]*testSpeaker
}

// expectL2 waits until exactly the nodes in owners announce the Service IP
// in layer 2 and the ServiceL2Status objects say so.
func (w *world) expectL2(owners ...string) {
	w.t.Helper()
	key := w.svcN + "/web"
	poll.Until(w.t, 30*time.Second, fmt.Sprintf("layer 2 owners %v", owners), func() error {
		for name, s := range w.speakers {
			got := s.l2.announced(key)
			want := []string(nil)
			if slices.Contains(owners, name) {
				want = []string{w.ip.String()}
			}
			if !reflect.DeepEqual(got, want) {
				return fmt.Errorf("%s announces %v, want %v", name, got, want)
			}
		}
		var list v1beta1.ServiceL2StatusList
		if err := w.c.List(context.Background(), &list, client.InNamespace(w.ns)); err != nil {
			return err
		}
		var nodes []string
		for _, o := range list.Items {
			if o.Labels[v1beta1.LabelNode] != o.Status.Node || o.Labels[v1beta1.LabelServiceName] != "web" ||
				o.Labels[v1beta1.LabelServiceNamespace] != w.svcN || o.Status.ServiceName != "web" || o.Status.ServiceNamespace != w.svcN {
				return fmt.Errorf("ServiceL2Status %s has labels %v, status %+v", o.Name, o.Labels, o.Status)
			}
			if !reflect.DeepEqual(o.Status.Interfaces, []v1beta1.InterfaceInfo{{Name: "eth0"}}) {
				return fmt.Errorf("ServiceL2Status %s interfaces %v", o.Name, o.Status.Interfaces)
			}
			if len(o.OwnerReferences) != 1 || o.OwnerReferences[0].Name != "speaker-"+o.Status.Node {
				return fmt.Errorf("ServiceL2Status %s owners %v", o.Name, o.OwnerReferences)
			}
			nodes = append(nodes, o.Status.Node)
		}
		slices.Sort(nodes)
		want := slices.Sorted(slices.Values(owners))
		if !slices.Equal(nodes, want) {
			return fmt.Errorf("ServiceL2Status for nodes %v, want %v", nodes, want)
		}
		return nil
	})
}

// expectBGP waits until exactly the nodes in announcers advertise the
// Service's /32 to p1 and have a ServiceBGPStatus listing p1.
func (w *world) expectBGP(announcers ...string) {
	w.t.Helper()
	poll.Until(w.t, 30*time.Second, fmt.Sprintf("BGP announcers %v", announcers), func() error {
		for name, s := range w.speakers {
			var got []string
			for _, p := range s.bgp.Paths() {
				got = append(got, p.Prefix.String())
			}
			var want []string
			if slices.Contains(announcers, name) {
				want = []string{netip.PrefixFrom(w.ip, 32).String()}
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("%s advertises %v, want %v", name, got, want)
			}
		}
		var list v1beta1.ServiceBGPStatusList
		if err := w.c.List(context.Background(), &list, client.InNamespace(w.ns)); err != nil {
			return err
		}
		var nodes []string
		for _, o := range list.Items {
			if !slices.Equal(o.Status.Peers, []string{"p1"}) || o.Labels[v1beta1.LabelNode] != o.Status.Node {
				return fmt.Errorf("ServiceBGPStatus %s: labels %v status %+v", o.Name, o.Labels, o.Status)
			}
			nodes = append(nodes, o.Status.Node)
		}
		slices.Sort(nodes)
		if want := slices.Sorted(slices.Values(announcers)); !slices.Equal(nodes, want) {
			return fmt.Errorf("ServiceBGPStatus for nodes %v, want %v", nodes, want)
		}
		return nil
	})
}

func (w *world) update(obj client.Object, mutate func()) {
	w.t.Helper()
	ctx := context.Background()
	for i := 0; ; i++ {
		if err := w.c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			w.t.Fatal(err)
		}
		mutate()
		err := w.c.Update(ctx, obj)
		if err == nil {
			return
		}
		if i > 5 {
			w.t.Fatal(err)
		}
	}
}

// createReadyNode creates a Ready Node labelled with its hostname, with
// internalIP as its InternalIP unless empty.
func createReadyNode(t testing.TB, c client.Client, name, internalIP string) {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
	must(t, c.Create(ctx, n))
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if internalIP != "" {
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: internalIP}}
	}
	must(t, c.Status().Update(ctx, n))
}

// createSpeakerPod creates node's speaker Pod in ns (labelled
// speakerPods), Running with podIP.
func createSpeakerPod(t testing.TB, c client.Client, ns, node, podIP string) {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "speaker-" + node, Namespace: ns, Labels: speakerPods},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "speaker", Image: "herald"}}},
	}
	must(t, c.Create(ctx, p))
	p.Status.Phase, p.Status.PodIP = corev1.PodRunning, podIP
	must(t, c.Status().Update(ctx, p))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestSpeakerThroughAPIServer(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	c := env.Client
	ns := env.Namespace(t)
	svcNS := env.Namespace(t)

	// Nodes, Ready, with an IPv4 InternalIP each.
	for i, name := range []string{"n1", "n2"} {
		createReadyNode(t, c, name, fmt.Sprintf("198.51.100.%d", 11+i))
		createSpeakerPod(t, c, ns, name, fmt.Sprintf("198.51.100.%d", 11+i))
	}
	// Configuration: one pool announced in layer 2 and over BGP to p1.
	pool := &v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns},
		Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"198.51.100.0/28"}}}
	l2ad := &v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "l2", Namespace: ns},
		Spec: v1beta1.L2AdvertisementSpec{IPAddressPools: []string{"pool"}}}
	must(t, c.Create(ctx, pool))
	must(t, c.Create(ctx, l2ad))
	must(t, c.Create(ctx, &v1beta1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "bgp", Namespace: ns},
		Spec: v1beta1.BGPAdvertisementSpec{IPAddressPools: []string{"pool"}}}))
	must(t, c.Create(ctx, &v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: ns},
		Spec: v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64513, PeerAddress: "203.0.113.1"}}))

	live := &liveness{live: map[string]bool{"n1": true, "n2": true}}
	w := &world{t: t, c: c, ns: ns, svcN: svcNS, ip: netip.MustParseAddr("198.51.100.10"), speakers: map[string]*testSpeaker{}}
	for _, name := range []string{"n1", "n2"} {
		w.speakers[name] = startSpeaker(t, env, ns, name, live)
	}
	winner := announce.Elect(w.ip, []announce.Candidate{{Node: "n1", Serves: 1}, {Node: "n2", Serves: 1}})
	win, lose := winner[0], winner[1]

	// The Service, its IP (as the controller would write it) and one endpoint on n2.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: svcNS},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
	must(t, c.Create(ctx, svc))
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: w.ip.String()}}
	must(t, c.Status().Update(ctx, svc))
	n2, ready := "n2", true
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Namespace: svcNS, Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"203.0.113.50"}, NodeName: &n2,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}
	must(t, c.Create(ctx, slice))

	t.Run("announce", func(t *testing.T) {
		w.t = t
		w.expectL2(win)
		w.expectBGP("n1", "n2")
		// The Service informer keeps the Service as its record (transform.go),
		// with the decision's view of it.
		for _, sp := range w.speakers {
			o, ok, err := sp.spk.svcs.GetByKey(svcNS + "/web")
			r, isRec := o.(*serviceRecord)
			if err != nil || !ok || !isRec {
				t.Fatalf("%s: the Service informer holds %T (found %v, %v), want a *serviceRecord", sp.name, o, ok, err)
			}
			if r.svc.Key != svcNS+"/web" || !r.svc.LoadBalancer || !slices.Equal(r.svc.IPs, []netip.Addr{w.ip}) || r.uid != svc.UID {
				t.Errorf("%s: record %+v of Service %s", sp.name, r, svc.UID)
			}
		}
		poll.Until(t, 30*time.Second, "events and metric", func() error {
			if !w.speakers[win].rec.has(`Service/web Normal nodeAssigned: announcing from node "` + win + `" with protocol "layer2": 198.51.100.10`) {
				return errors.New("no layer2 nodeAssigned event from the winner")
			}
			if w.speakers[lose].rec.has(`protocol "layer2"`) {
				return errors.New("layer2 nodeAssigned event from the loser")
			}
			for _, s := range w.speakers {
				if !s.rec.has(`with protocol "bgp"`) {
					return fmt.Errorf("no bgp nodeAssigned event from %s", s.name)
				}
			}
			key := svcNS + "/web"
			if v, ok := gauge(w.speakers[win].reg, "metallb_speaker_announced", map[string]string{"service": key, "protocol": "layer2", "node": win, "ip": w.ip.String()}); !ok || v != 1 {
				return errors.New("metallb_speaker_announced for layer2 missing on the winner")
			}
			if _, ok := gauge(w.speakers[lose].reg, "metallb_speaker_announced", map[string]string{"protocol": "layer2"}); ok {
				return errors.New("metallb_speaker_announced for layer2 on the loser")
			}
			if v, ok := gauge(w.speakers[lose].reg, "metallb_k8s_client_config_loaded_bool", nil); !ok || v != 1 {
				return errors.New("config not loaded")
			}
			return nil
		})
		// Peers: translated with the node's InternalIP as router ID.
		poll.Until(t, 30*time.Second, "BGP peers", func() error {
			for i, name := range []string{"n1", "n2"} {
				peers := w.speakers[name].bgp.Peers()
				if len(peers) != 1 || peers[0].Name != "p1" || peers[0].RouterID != netip.MustParseAddr(fmt.Sprintf("198.51.100.%d", 11+i)) {
					return fmt.Errorf("%s peers %+v", name, peers)
				}
			}
			return nil
		})
		// Memberlist discovery from the speaker Pods.
		poll.Until(t, 30*time.Second, "memberlist peers", func() error {
			want := []netip.AddrPort{netip.MustParseAddrPort("198.51.100.11:7946"), netip.MustParseAddrPort("198.51.100.12:7946")}
			for _, s := range w.speakers {
				if got := s.members.getPeers(); !slices.Equal(got, want) {
					return fmt.Errorf("%s SetPeers %v, want %v", s.name, got, want)
				}
			}
			return nil
		})
		poll.Until(t, 30*time.Second, "ConfigurationState", func() error {
			var cs v1beta1.ConfigurationState
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "speaker-" + win}, &cs); err != nil {
				return err
			}
			if cs.Status.Result != v1beta1.ConfigurationResultValid {
				return fmt.Errorf("result %q", cs.Status.Result)
			}
			return nil
		})
	})

	t.Run("field manager", func(t *testing.T) {
		// Every object the speakers wrote names them in managedFields (the
		// test's own writes are not among these kinds).
		var l2 v1beta1.ServiceL2StatusList
		var bgp v1beta1.ServiceBGPStatusList
		var cs v1beta1.ConfigurationStateList
		for _, l := range []client.ObjectList{&l2, &bgp, &cs} {
			must(t, c.List(ctx, l, client.InNamespace(ns)))
		}
		var objs []client.Object
		for i := range l2.Items {
			objs = append(objs, &l2.Items[i])
		}
		for i := range bgp.Items {
			objs = append(objs, &bgp.Items[i])
		}
		for i := range cs.Items {
			objs = append(objs, &cs.Items[i])
		}
		if len(objs) < 5 { // one L2 status, two BGP statuses, two ConfigurationStates
			t.Fatalf("%d speaker objects, want at least 5", len(objs))
		}
		for _, o := range objs {
			for _, m := range o.GetManagedFields() {
				if m.Manager != fieldmanager.Speaker {
					t.Errorf("%T %s: %s by field manager %q, want %q", o, o.GetName(), m.Operation, m.Manager, fieldmanager.Speaker)
				}
			}
		}
	})

	t.Run("BGP peer events", func(t *testing.T) {
		s := w.speakers["n1"]
		s.states.Put(bgp.PeerState{Name: "p1", Peer: "203.0.113.1:179", State: bgp.StateActive})
		s.states.Put(bgp.PeerState{Name: "p1", Peer: "203.0.113.1:179", State: bgp.StateEstablished})
		s.states.Put(bgp.PeerState{Name: "p1", Peer: "203.0.113.1:179", State: bgp.StateIdle})
		poll.Until(t, 30*time.Second, "session events", func() error {
			if !s.rec.has("BGPPeer/p1 Normal sessionEstablished: session to 203.0.113.1:179 established on node n1") ||
				!s.rec.has("BGPPeer/p1 Warning sessionDown: session to 203.0.113.1:179 down on node n1 (state Idle)") {
				return errors.New("missing session events")
			}
			return nil
		})
		// Staying down is reported once, after SessionWarnAfter.
		notUp := "BGPPeer/p1 Warning sessionNotEstablished: session to 203.0.113.1:179 not established on node n1 for 300ms (state Idle)"
		poll.Until(t, 30*time.Second, "sessionNotEstablished event", func() error {
			if !s.rec.has(notUp) {
				return errors.New("no sessionNotEstablished event")
			}
			return nil
		})
		// Several more checks of the same stretch.
		checked := s.spk.sessionChecks.Load()
		poll.Until(t, 30*time.Second, "four more session checks", func() error {
			if n := s.spk.sessionChecks.Load() - checked; n < 4 {
				return fmt.Errorf("%d more session checks", n)
			}
			return nil
		})
		if n := s.rec.count(notUp); n != 1 {
			t.Errorf("%d sessionNotEstablished events for one stretch down, want 1", n)
		}
		s.states.Put(bgp.PeerState{Name: "p1", Peer: "203.0.113.1:179", State: bgp.StateEstablished})
		// The BGP speaker closed the session at the received-prefix limit.
		s.states.Put(bgp.PeerState{Name: "p1", Peer: "203.0.113.1:179", State: bgp.StateIdle, PrefixLimitFamily: "ipv6-unicast", PrefixLimit: 10000})
		poll.Until(t, 30*time.Second, "prefixLimitExceeded event", func() error {
			if !s.rec.has("BGPPeer/p1 Warning prefixLimitExceeded: session to 203.0.113.1:179 on node n1 closed: the peer sent more than 10000 ipv6-unicast prefixes") {
				return errors.New("no prefixLimitExceeded event")
			}
			return nil
		})
		s.states.Put(bgp.PeerState{Name: "p1", Peer: "203.0.113.1:179", State: bgp.StateEstablished})
		// A peer whose password Secret does not exist cannot be applied:
		// event on it, p1 stays.
		must(t, c.Create(ctx, &v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "nosecret", Namespace: ns},
			Spec: v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64513, PeerAddress: "203.0.113.2",
				PasswordSecret: &corev1.SecretReference{Name: "missing"}}}))
		poll.Until(t, 30*time.Second, "peerNotApplied event", func() error {
			if !s.rec.has("BGPPeer/nosecret Warning peerNotApplied") {
				return errors.New("no peerNotApplied event")
			}
			if peers := s.bgp.Peers(); len(peers) != 1 || peers[0].Name != "p1" {
				return fmt.Errorf("peers %+v", peers)
			}
			return nil
		})
		w.t = t
		w.expectBGP("n1", "n2") // ServiceBGPStatus lists only applied peers
		must(t, c.Delete(ctx, &v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "nosecret", Namespace: ns}}))
	})

	t.Run("memberlist failover", func(t *testing.T) {
		w.t = t
		// herald_layer2_announcer_changes_total counts each move on both
		// nodes (metallb_speaker_announced stays 1 wherever it exists, so
		// it cannot show a failover).
		changes := func(node, change string) float64 {
			v, ok := gauge(w.speakers[node].reg, "herald_layer2_announcer_changes_total", map[string]string{"node": node, "change": change})
			if !ok {
				t.Fatalf("no herald_layer2_announcer_changes_total{node=%q,change=%q}", node, change)
			}
			return v
		}
		expectChanges := func(node, change string, want float64) {
			poll.Until(t, 30*time.Second, "announcer changes", func() error {
				if got := changes(node, change); got != want {
					return fmt.Errorf("herald_layer2_announcer_changes_total{node=%q,change=%q} = %v, want %v", node, change, got, want)
				}
				return nil
			})
		}
		winLost, winGained := changes(win, "lost"), changes(win, "gained")
		loseLost, loseGained := changes(lose, "lost"), changes(lose, "gained")
		if winGained < 1 {
			t.Errorf("winner %s: %v layer 2 addresses gained, want at least 1 (it announces one)", win, winGained)
		}
		live.set(win, false)
		w.expectL2(lose)
		expectChanges(win, "lost", winLost+1)
		expectChanges(lose, "gained", loseGained+1)
		live.set(win, true)
		w.expectL2(win)
		expectChanges(win, "gained", winGained+1)
		expectChanges(lose, "lost", loseLost+1)
	})

	t.Run("config change re-decides only when the snapshot changes", func(t *testing.T) {
		w.t = t
		s := w.speakers[win]
		updates := func() float64 {
			v, _ := gauge(s.reg, "metallb_k8s_client_updates_total", nil)
			return v
		}
		before, redecided := updates(), s.logs.count("re-decided every Service")
		// A Secret nobody references: the configuration is read again, but
		// the snapshot is the same.
		must(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "unrelated", Namespace: ns}}))
		poll.Until(t, 30*time.Second, "config reloaded", func() error {
			if updates() <= before {
				return errors.New("no configuration reload yet")
			}
			return nil
		})
		if got := s.logs.count("re-decided every Service"); got != redecided {
			t.Fatalf("an unchanged snapshot re-decided every Service (%d -> %d)", redecided, got)
		}
		// A semantic change (the pool grows) re-decides.
		w.update(pool, func() { pool.Spec.Addresses = []string{"198.51.100.0/28", "203.0.113.0/28"} })
		poll.Until(t, 30*time.Second, "re-decided after a pool change", func() error {
			if s.logs.count("re-decided every Service") == redecided {
				return errors.New("not re-decided")
			}
			return nil
		})
		w.expectL2(win)
	})

	t.Run("exclude label", func(t *testing.T) {
		w.t = t
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: win}}
		w.update(node, func() { node.Labels[announce.ExcludeFromLBLabel] = "" })
		w.expectL2(lose)
		w.expectBGP(lose)
		w.update(node, func() { delete(node.Labels, announce.ExcludeFromLBLabel) })
		w.expectL2(win)
		w.expectBGP("n1", "n2")
	})

	t.Run("L2Advertisement node selector stops matching", func(t *testing.T) {
		w.t = t
		loser := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: lose}}
		w.update(loser, func() { loser.Labels["l2"] = "yes" })
		w.update(l2ad, func() {
			l2ad.Spec.NodeSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"l2": "yes"}}}
		})
		w.expectL2(lose)
		w.update(loser, func() { delete(loser.Labels, "l2") })
		w.expectL2()
		w.expectBGP("n1", "n2") // BGP is not affected
		w.update(l2ad, func() { l2ad.Spec.NodeSelectors = nil })
		w.expectL2(win)
	})

	t.Run("externalTrafficPolicy Local", func(t *testing.T) {
		w.t = t
		w.update(svc, func() { svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal })
		// The only endpoint runs on n2.
		w.expectL2("n2")
		w.expectBGP("n2")
	})

	t.Run("IP change names the new address", func(t *testing.T) {
		w.t = t
		// n2 announces alone (externalTrafficPolicy Local, its endpoint)
		// and goes on announcing the Service's new address: its newest
		// nodeAssigned events name that address.
		set := func(ip netip.Addr) {
			var cur corev1.Service
			must(t, c.Get(ctx, client.ObjectKeyFromObject(svc), &cur))
			cur.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip.String()}}
			must(t, c.Status().Update(ctx, &cur))
			w.ip = ip
		}
		old := w.ip
		set(netip.MustParseAddr("198.51.100.9"))
		w.expectL2("n2")
		w.expectBGP("n2")
		for _, proto := range []string{"layer2", "bgp"} {
			want := `Service/web Normal nodeAssigned: announcing from node "n2" with protocol "` + proto + `": 198.51.100.9`
			poll.Until(t, 30*time.Second, "nodeAssigned naming the new address over "+proto, func() error {
				if !w.speakers["n2"].rec.has(want) {
					return fmt.Errorf("no %q among %v", want, w.speakers["n2"].rec.all())
				}
				return nil
			})
		}
		set(old)
		w.expectL2("n2")
		w.expectBGP("n2")
	})

	t.Run("no endpoints withdraws everywhere", func(t *testing.T) {
		w.t = t
		must(t, c.Delete(ctx, slice))
		w.expectL2()
		w.expectBGP()
		for _, s := range w.speakers {
			if _, ok := gauge(s.reg, "metallb_speaker_announced", nil); ok {
				t.Fatalf("%s still reports metallb_speaker_announced", s.name)
			}
		}
	})

	t.Run("Service deleted", func(t *testing.T) {
		w.t = t
		w.update(svc, func() { svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster })
		slice.ResourceVersion = ""
		must(t, c.Create(ctx, slice))
		w.expectL2(win)
		w.expectBGP("n1", "n2")
		must(t, c.Delete(ctx, svc))
		w.expectL2()
		w.expectBGP()
	})
}

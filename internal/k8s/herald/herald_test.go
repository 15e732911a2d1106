package herald

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1alpha1"
	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/explain"
	"github.com/herald-lb/herald/internal/k8s/allocation"
	"github.com/herald-lb/herald/internal/testenv"
)

// fixture is a real API server with Herald's objects: nodes n1..n3 with
// Running and Ready speaker Pods, pool "demo-pool" (198.51.100.0/30), an
// L2Advertisement, and a Service "web" in its own namespace.
type fixture struct {
	t          *testing.T
	env        *testenv.Env
	c          client.Client
	heraldNS   string
	ns         string
	kubeconfig string
}

func newFixture(t *testing.T) *fixture {
	if testing.Short() {
		t.Skip("needs a real API server")
	}
	env := testenv.Start(t)
	f := &fixture{t: t, env: env, c: env.Client, heraldNS: env.Namespace(t), ns: env.Namespace(t)}
	f.kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(f.kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		f.create(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"kubernetes.io/hostname": n}}})
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "herald-speaker-" + n, Namespace: f.heraldNS,
			Labels: map[string]string{"app.kubernetes.io/name": "herald", labelComponent: "speaker"}},
			Spec: corev1.PodSpec{NodeName: n, Containers: []corev1.Container{{Name: "speaker", Image: "herald", Args: []string{"--log-level=info"},
				Env: []corev1.EnvVar{{Name: "METALLB_ML_BIND_ADDR", Value: "10.0.0.1"}, {Name: "METALLB_ML_LABELS", Value: "app.kubernetes.io/component=speaker"}}}}}}
		f.create(p)
		f.podReady(n, true)
	}
	f.create(&v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "demo-pool", Namespace: f.heraldNS},
		Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"198.51.100.0/30"}}})
	f.create(&v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "demo-l2", Namespace: f.heraldNS},
		Spec: v1beta1.L2AdvertisementSpec{IPAddressPools: []string{"demo-pool"}}})
	return f
}

func (f *fixture) create(o client.Object) {
	f.t.Helper()
	if err := f.c.Create(context.Background(), o); err != nil {
		f.t.Fatalf("create %T %s: %v", o, o.GetName(), err)
	}
}

func (f *fixture) podReady(node string, ready bool) {
	f.t.Helper()
	ctx := context.Background()
	var p corev1.Pod
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.heraldNS, Name: "herald-speaker-" + node}, &p); err != nil {
		f.t.Fatal(err)
	}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	if err := f.c.Status().Update(ctx, &p); err != nil {
		f.t.Fatal(err)
	}
}

// service creates Service name with ingress ips (the controller's write)
// and a ready endpoint on each of eps.
func (f *fixture) service(name string, ips []string, annotations map[string]string, eps ...string) {
	f.t.Helper()
	ctx := context.Background()
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Annotations: annotations},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}, Selector: map[string]string{"app": name}}}
	f.create(s)
	if len(ips) > 0 {
		for _, ip := range ips {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
		}
		if err := f.c.Status().Update(ctx, s); err != nil {
			f.t.Fatal(err)
		}
	}
	if len(eps) > 0 {
		sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-eps", Namespace: f.ns,
			Labels: map[string]string{discoveryv1.LabelServiceName: name}}, AddressType: discoveryv1.AddressTypeIPv4}
		for _, n := range eps {
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.1.0.1"}, NodeName: ptr.To(n),
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
		}
		f.create(sl)
	}
}

func (f *fixture) update(o client.Object, mutate func()) {
	f.t.Helper()
	ctx := context.Background()
	if err := f.c.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
		f.t.Fatal(err)
	}
	mutate()
	if err := f.c.Update(ctx, o); err != nil {
		f.t.Fatal(err)
	}
}

// run runs kubectl herald with the fixture's kubeconfig and namespaces.
func (f *fixture) run(args ...string) (string, string, int) {
	var out, errOut bytes.Buffer
	all := append([]string{"--kubeconfig", f.kubeconfig, "--herald-namespace", f.heraldNS, "-n", f.ns}, args...)
	code := Main(context.Background(), all, &out, &errOut)
	return out.String(), errOut.String(), code
}

func (f *fixture) why(name string) (*explain.WhyReport, int) {
	f.t.Helper()
	out, errOut, code := f.run("why", "svc/"+name, "-o", "json")
	if code == ExitError {
		f.t.Fatalf("why: exit %d: %s", code, errOut)
	}
	var r explain.WhyReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		f.t.Fatalf("why -o json: %v\n%s", err, out)
	}
	return &r, code
}

func verdict(t *testing.T, r *explain.WhyReport, node string) explain.NodeVerdict {
	t.Helper()
	if len(r.IPs) == 0 || r.IPs[0].L2 == nil {
		t.Fatalf("no layer 2 report: %+v", r)
	}
	for _, n := range r.IPs[0].L2.Nodes {
		if n.Node == node {
			return n
		}
	}
	t.Fatalf("node %s missing", node)
	return explain.NodeVerdict{}
}

// TestWhyAgainstAPIServer: real objects in a real API server produce each
// reason of the speaker's decision (announce.Decide) and of the allocator,
// and kubectl herald why names it, with exit status 1 whenever something
// is wrong and 0 when computed and reported state agree.
func TestWhyAgainstAPIServer(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.service("web", []string{"198.51.100.1"}, nil, "n1", "n2", "n3")

	r, code := f.why("web")
	w := r.IPs[0].L2.Winner
	if w == "" || code != ExitProblems || !strings.Contains(strings.Join(r.Problems, "\n"), "no ServiceL2Status from it") {
		t.Fatalf("before the speaker's status: winner %q exit %d problems %q", w, code, r.Problems)
	}
	l2 := &v1beta1.ServiceL2Status{ObjectMeta: metav1.ObjectMeta{Name: "l2-web", Namespace: f.heraldNS}}
	f.create(l2)
	l2.Status = v1beta1.ServiceL2StatusStatus{ServiceStatusCommon: v1beta1.ServiceStatusCommon{Node: w, ServiceName: "web", ServiceNamespace: f.ns}}
	if err := f.c.Status().Update(ctx, l2); err != nil {
		t.Fatal(err)
	}
	if r, code = f.why("web"); code != ExitOK || r.Allocation.Pool != "demo-pool" {
		t.Fatalf("agreeing state: exit %d pool %q problems %q", code, r.Allocation.Pool, r.Problems)
	}
	table, _, code := f.run("why", "svc/web")
	if code != ExitOK || !strings.Contains(table, "Layer 2 (per-address election): winner "+w) || !strings.Contains(table, "Problems: none") {
		t.Fatalf("table (exit %d):\n%s", code, table)
	}
	t.Logf("kubectl herald why svc/web:\n%s", table)
	other := "n1"
	if w == "n1" {
		other = "n2"
	}

	var node corev1.Node
	node.Name = other
	for _, tc := range []struct {
		name, reason, detail string
		breakIt, repair      func()
	}{
		{"NetworkUnavailable", "nodeNetworkUnavailable", "NetworkUnavailable", func() {
			if err := f.c.Get(ctx, client.ObjectKeyFromObject(&node), &node); err != nil {
				t.Fatal(err)
			}
			node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue, Reason: "test"}}
			if err := f.c.Status().Update(ctx, &node); err != nil {
				t.Fatal(err)
			}
		}, func() {
			node.Status.Conditions = nil
			if err := f.c.Status().Update(ctx, &node); err != nil {
				t.Fatal(err)
			}
		}},
		{"exclude label", "nodeLabeledExcludeBalancers", "exclude-from-external-load-balancers", func() {
			f.update(&node, func() { node.Labels["node.kubernetes.io/exclude-from-external-load-balancers"] = "" })
		}, func() {
			f.update(&node, func() { delete(node.Labels, "node.kubernetes.io/exclude-from-external-load-balancers") })
		}},
		{"speaker not ready", "notOwner", "not Ready", func() { f.podReady(other, false) }, func() { f.podReady(other, true) }},
		{"node selector", "noMatchingAdvertisement", "selects node " + other, func() {
			ad := &v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "demo-l2", Namespace: f.heraldNS}}
			f.update(ad, func() {
				ad.Spec.NodeSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"kubernetes.io/hostname": w}}}
			})
		}, func() {
			ad := &v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "demo-l2", Namespace: f.heraldNS}}
			f.update(ad, func() { ad.Spec.NodeSelectors = nil })
		}},
		{"ETP Local", "noLocalEndpoints", "externalTrafficPolicy is Local", func() {
			sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "web-eps", Namespace: f.ns}}
			f.update(sl, func() { sl.Endpoints = sl.Endpoints[:0:0]; sl.Endpoints = append(sl.Endpoints, endpointOn(w)) })
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: f.ns}}
			f.update(svc, func() { svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal })
		}, func() {
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: f.ns}}
			f.update(svc, func() { svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster })
		}},
		{"no endpoints", "noEndpoints", "no serving endpoint", func() {
			sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "web-eps", Namespace: f.ns}}
			f.update(sl, func() { sl.Endpoints = nil })
		}, func() {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.breakIt()
			defer tc.repair()
			r, _ := f.why("web")
			if v := verdict(t, r, other); v.Announce || v.Reason != tc.reason || !strings.Contains(v.Detail, tc.detail) {
				t.Errorf("%s: %+v, want %s (%q)", other, v, tc.reason, tc.detail)
			}
			table, _, _ := f.run("why", "svc/web")
			t.Logf("%s:\n%s", tc.name, table)
			if !strings.Contains(table, tc.reason) {
				t.Errorf("the table does not name %s:\n%s", tc.reason, table)
			}
		})
	}

	// sharedIPWithServiceSelector: a sharing Service and an advertisement
	// with serviceSelectors.
	t.Run("shared IP with service selector", func(t *testing.T) {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: f.ns}}
		ad := &v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "demo-l2", Namespace: f.heraldNS}}
		f.update(svc, func() {
			svc.Annotations = map[string]string{"metallb.io/allow-shared-ip": "k"}
			svc.Labels = map[string]string{"expose": "yes"}
		})
		f.update(ad, func() {
			ad.Spec.ServiceSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"expose": "yes"}}}
		})
		defer f.update(ad, func() { ad.Spec.ServiceSelectors = nil })
		defer f.update(svc, func() { svc.Annotations, svc.Labels = nil, nil })
		r, code := f.why("web")
		if v := verdict(t, r, w); v.Reason != "sharedIPWithServiceSelector" || code != ExitProblems {
			t.Errorf("exit %d, %s: %+v", code, w, v)
		}
	})
	// ipNotAllowed: the status shows an address outside every pool.
	t.Run("address outside every pool", func(t *testing.T) {
		f.service("stray", []string{"203.0.113.77"}, nil, "n1")
		r, code := f.why("stray")
		if code != ExitProblems || !strings.Contains(strings.Join(r.Problems, "\n"), "203.0.113.77 is in no IPAddressPool (ipNotAllowed)") ||
			!strings.Contains(r.Allocation.Why, "not valid for the Service") {
			t.Errorf("exit %d why %q problems %q", code, r.Allocation.Why, r.Problems)
		}
	})
	// Not Herald's: another loadBalancerClass, or not a LoadBalancer.
	t.Run("not Herald's", func(t *testing.T) {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "classy", Namespace: f.ns},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: ptr.To("example.com/other"), Ports: []corev1.ServicePort{{Port: 80}}}}
		f.create(s)
		f.create(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: f.ns},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}})
		for name, reason := range map[string]string{"classy": "otherLoadBalancerClass", "plain": "notLoadBalancer"} {
			r, code := f.why(name)
			if code != ExitOK || r.NotAnnounced != reason || r.Allocation.Handled {
				t.Errorf("%s: exit %d notAnnounced %q handled %v problems %q", name, code, r.NotAnnounced, r.Allocation.Handled, r.Problems)
			}
		}
	})

	// Pending: pool full, no matching pool, requested address outside
	// every pool. Exit status 1 and the allocator's cause.
	f.service("fill1", []string{"198.51.100.0"}, nil)
	f.service("fill2", []string{"198.51.100.2"}, nil)
	f.service("fill3", []string{"198.51.100.3"}, nil)
	for _, tc := range []struct {
		name, want  string
		annotations map[string]string
	}{
		{"full", "every candidate pool is full", nil},
		{"outside", "outside every allowed pool", map[string]string{"metallb.io/loadBalancerIPs": "203.0.113.50"}},
		{"unknown pool", "does not exist", map[string]string{"metallb.io/address-pool": "nope"}},
	} {
		t.Run("pending "+tc.name, func(t *testing.T) {
			f.service("pending-"+strings.ReplaceAll(tc.name, " ", "-"), nil, tc.annotations, "n1")
			r, code := f.why("pending-" + strings.ReplaceAll(tc.name, " ", "-"))
			if code != ExitProblems || !r.Allocation.Pending || !strings.Contains(r.Allocation.Why, tc.want) {
				t.Errorf("exit %d pending %v why %q", code, r.Allocation.Pending, r.Allocation.Why)
			}
		})
	}
	pool := &v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "demo-pool", Namespace: f.heraldNS}}
	f.update(pool, func() { pool.Spec.ServiceAllocation = &v1beta1.ServiceAllocation{Namespaces: []string{"prod"}} })
	r, code = f.why("pending-full")
	if code != ExitProblems || !strings.Contains(r.Allocation.Why, "no pool may serve the Service") ||
		!strings.Contains(r.Allocation.Pools[0].WhyNot, `namespace "`+f.ns+`" is not in serviceAllocation.namespaces [prod]`) {
		t.Errorf("no matching pool: exit %d why %q pools %+v", code, r.Allocation.Why, r.Allocation.Pools)
	}

	out, _, code := f.run("pools")
	if code != ExitProblems || !strings.Contains(out, "demo-pool") || !strings.Contains(out, "pending-full") {
		t.Errorf("pools (exit %d):\n%s", code, out)
	}
	if _, errOut, code := f.run("why", "svc/nope"); code != ExitError || !strings.Contains(errOut, "not found") {
		t.Errorf("unknown Service: exit %d, %s", code, errOut)
	}
	if _, _, code := f.run("why", "deploy/x"); code != ExitError {
		t.Errorf("deploy/x: exit %d", code)
	}
}

func endpointOn(node string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{"10.1.0.1"}, NodeName: ptr.To(node), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
}

// TestPeersAndConfigAgainstAPIServer: peers lists the sessions of each node
// with the state the speakers' BGPPeer events give; config lists the
// ConfigurationStates and flags an Invalid one.
func TestPeersAndConfigAgainstAPIServer(t *testing.T) {
	f := newFixture(t)
	f.create(&v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "tor", Namespace: f.heraldNS},
		Spec: v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64513, PeerAddress: "203.0.113.1",
			NodeSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"kubernetes.io/hostname": "n1"}}}}})
	f.create(&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "tor.1", Namespace: f.heraldNS},
		InvolvedObject: corev1.ObjectReference{Kind: "BGPPeer", Namespace: f.heraldNS, Name: "tor", APIVersion: "metallb.io/v1beta2"},
		Reason:         "sessionDown", Message: "session to 203.0.113.1 down on node n1 (state Active)", Type: corev1.EventTypeWarning,
		LastTimestamp: metav1.Now(), FirstTimestamp: metav1.Now(), Count: 1})
	out, _, code := f.run("peers", "-o", "json")
	var pr explain.PeersReport
	if err := json.Unmarshal([]byte(out), &pr); err != nil {
		t.Fatal(err)
	}
	if code != ExitProblems || len(pr.Sessions) != 1 || pr.Sessions[0].Node != "n1" || pr.Sessions[0].State != "Down" {
		t.Errorf("peers: exit %d %+v", code, pr)
	}
	table, _, _ := f.run("peers")
	if !strings.Contains(table, "sessions without an object: session state: the speakers' events") {
		t.Errorf("peers table does not say where the state comes from:\n%s", table)
	}
	// The speaker's BGPSessionState object, once written, is the state.
	ss := &v1alpha1.BGPSessionState{ObjectMeta: metav1.ObjectMeta{Name: "n1-tor", Namespace: f.heraldNS,
		Labels: map[string]string{v1alpha1.LabelNode: "n1", v1alpha1.LabelBGPPeer: "tor"}}}
	f.create(ss)
	ss.Status = v1alpha1.BGPSessionStateStatus{Node: "n1", Peer: "203.0.113.1", BGPPeer: "tor", BGPStatus: "Idle", BFDStatus: "N/A",
		LastTransitionTime: ptr.To(metav1.Now()), LastError: "notification received: code 6(cease) subcode 2(administrative shutdown)"}
	if err := f.c.Status().Update(context.Background(), ss); err != nil {
		t.Fatal(err)
	}
	out, _, code = f.run("peers", "-o", "json")
	pr = explain.PeersReport{}
	if err := json.Unmarshal([]byte(out), &pr); err != nil {
		t.Fatal(err)
	}
	if code != ExitProblems || len(pr.Sessions) != 1 || pr.Sessions[0].State != "Idle" ||
		!strings.Contains(pr.Sessions[0].Detail, "administrative shutdown") || !strings.Contains(pr.Source, "BGPSessionState") {
		t.Errorf("peers with a BGPSessionState: exit %d %+v", code, pr)
	}

	for _, cs := range []struct {
		name, comp, node string
		result           v1beta1.ConfigurationResult
	}{{"controller", "controller", "", v1beta1.ConfigurationResultValid},
		{"speaker-n1", "speaker", "n1", v1beta1.ConfigurationResultValid},
		{"speaker-n2", "speaker", "n2", v1beta1.ConfigurationResultValid},
		{"speaker-n3", "speaker", "n3", v1beta1.ConfigurationResultInvalid}} {
		o := &v1beta1.ConfigurationState{ObjectMeta: metav1.ObjectMeta{Name: cs.name, Namespace: f.heraldNS,
			Labels: map[string]string{v1beta1.LabelComponentType: cs.comp, v1beta1.LabelNodeName: cs.node}}}
		f.create(o)
		o.Status = v1beta1.ConfigurationStateStatus{Result: cs.result}
		if cs.result == v1beta1.ConfigurationResultInvalid {
			o.Status.ErrorSummary = "BGPPeer x: spec.holdTime: too short"
		}
		if err := f.c.Status().Update(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	out, _, code = f.run("config")
	if code != ExitProblems || !strings.Contains(out, "speaker-n3") || !strings.Contains(out, "spec.holdTime: too short") {
		t.Errorf("config (exit %d):\n%s", code, out)
	}
	out, _, _ = f.run("config", "-o", "yaml")
	if !strings.Contains(out, "result: Invalid") {
		t.Errorf("config -o yaml:\n%s", out)
	}
}

// TestConditionTypeAgrees: explain reads the condition the controller
// writes.
func TestConditionTypeAgrees(t *testing.T) {
	if explain.AllocationConditionType != allocation.ConditionType {
		t.Fatalf("explain.AllocationConditionType %q, allocation.ConditionType %q", explain.AllocationConditionType, allocation.ConditionType)
	}
}

// TestWrongHeraldNamespace: with a --herald-namespace that holds no
// speaker or controller Pod, no ConfigurationState and no configuration
// object, every command fails (exit 2) naming the namespace and the flag,
// instead of explaining a cluster without Herald; one configuration object
// is enough for Herald to count as there.
func TestWrongHeraldNamespace(t *testing.T) {
	f := newFixture(t)
	f.service("web", []string{"198.51.100.1"}, nil, "n1")
	empty := f.env.Namespace(t)
	want := "Herald not found in namespace " + empty + ": no speaker or controller Pods, no ConfigurationState, no configuration objects; pass --herald-namespace (MetalLB's in-place install uses metallb-system)"
	for _, args := range [][]string{{"why", "svc/web"}, {"pools"}, {"peers"}, {"config"}, {"config", "-o", "json"}} {
		var out, errOut bytes.Buffer
		code := Main(context.Background(), append([]string{"--kubeconfig", f.kubeconfig, "--herald-namespace", empty, "-n", f.ns}, args...), &out, &errOut)
		if code != ExitError || !strings.Contains(errOut.String(), want) {
			t.Errorf("%v: exit %d, stderr %q, stdout %q; want exit %d and %q", args, code, errOut.String(), out.String(), ExitError, want)
		}
	}
	// A namespace with one configuration object is Herald's (no Pod yet).
	f.create(&v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: empty},
		Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"203.0.113.0/30"}}})
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"--kubeconfig", f.kubeconfig, "--herald-namespace", empty, "config"}, &out, &errOut); code == ExitError {
		t.Errorf("namespace with a pool: exit %d: %s", code, errOut.String())
	}
}

// TestNoMatchingInterfaceAgainstAPIServer: the elected node's Warning
// announceFailed (noMatchingInterface) on the Service, read from the API
// server, makes why show it not announcing with the event's detail and
// name it as the cause, without the "no ServiceL2Status" disagreement.
func TestNoMatchingInterfaceAgainstAPIServer(t *testing.T) {
	f := newFixture(t)
	var l2 v1beta1.L2Advertisement
	l2.Name, l2.Namespace = "demo-l2", f.heraldNS
	f.update(&l2, func() { l2.Spec.Interfaces = []string{"eth5"} })
	f.service("web", []string{"198.51.100.1"}, nil, "n1", "n2", "n3")
	r, _ := f.why("web")
	w := r.IPs[0].L2.Winner
	if w == "" {
		t.Fatalf("no winner: %+v", r.IPs[0].L2)
	}
	detail := "node " + w + " won the election for 198.51.100.1 but has none of the interfaces of L2Advertisement demo-l2 (interfaces eth5) (its interfaces answering ARP: eth0)"
	f.create(&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "web.failed", Namespace: f.ns},
		InvolvedObject: corev1.ObjectReference{Kind: "Service", Namespace: f.ns, Name: "web", APIVersion: "v1"},
		Reason:         "announceFailed", Type: corev1.EventTypeWarning, LastTimestamp: metav1.Now(), FirstTimestamp: metav1.Now(), Count: 1,
		Message: `failed to announce 198.51.100.1 from node "` + w + `" with protocol "layer2": ` + detail})
	r, code := f.why("web")
	v := verdict(t, r, w)
	if code != ExitProblems || v.Announce || v.Reason != "noMatchingInterface" || v.Detail != detail {
		t.Errorf("exit %d, %s: %+v; want exit 1, not announcing, noMatchingInterface with the event's detail", code, w, v)
	}
	if !strings.Contains(strings.Join(r.Problems, "\n"), "node "+w+" won the election but has none of the L2Advertisement's interfaces") ||
		strings.Contains(strings.Join(r.Problems, "\n"), "no ServiceL2Status") {
		t.Errorf("problems %q", r.Problems)
	}
	out, _, _ := f.run("why", "svc/web")
	if !strings.Contains(out, "noMatchingInterface") {
		t.Errorf("table does not show noMatchingInterface:\n%s", out)
	}
}

// TestWhyBGPSessionAgainstAPIServer: a Service announced over BGP whose
// session is stuck Active (a wrong password) makes why exit 1 and name the
// session (issue #14); the path's sessions show in the table and the JSON.
// Without a BGPSessionState the session is Unknown and not a problem.
func TestWhyBGPSessionAgainstAPIServer(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.c.Delete(ctx, &v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "demo-l2", Namespace: f.heraldNS}}); err != nil {
		t.Fatal(err)
	}
	f.create(&v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "tor", Namespace: f.heraldNS},
		Spec: v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64513, PeerAddress: "203.0.113.1"}})
	f.create(&v1beta1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "demo-bgp", Namespace: f.heraldNS},
		Spec: v1beta1.BGPAdvertisementSpec{IPAddressPools: []string{"demo-pool"}}})
	f.service("web-bgp", []string{"198.51.100.1"}, nil, "n1")
	var svc corev1.Service
	svc.Name, svc.Namespace = "web-bgp", f.ns
	f.update(&svc, func() { svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal })
	f.create(&v1beta1.ServiceBGPStatus{ObjectMeta: metav1.ObjectMeta{Name: "web-bgp-n1", Namespace: f.heraldNS,
		Labels: map[string]string{v1beta1.LabelNode: "n1", v1beta1.LabelServiceName: "web-bgp", v1beta1.LabelServiceNamespace: f.ns}}})
	var bs v1beta1.ServiceBGPStatus
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.heraldNS, Name: "web-bgp-n1"}, &bs); err != nil {
		t.Fatal(err)
	}
	bs.Status = v1beta1.ServiceBGPStatusStatus{ServiceStatusCommon: v1beta1.ServiceStatusCommon{Node: "n1", ServiceName: "web-bgp", ServiceNamespace: f.ns}, Peers: []string{"tor"}}
	if err := f.c.Status().Update(ctx, &bs); err != nil {
		t.Fatal(err)
	}
	r, code := f.why("web-bgp")
	if code != ExitOK || len(r.Reported.BGP) != 1 || len(r.Reported.BGP[0].Sessions) != 1 || r.Reported.BGP[0].Sessions[0].State != "Unknown" {
		t.Fatalf("without a BGPSessionState: exit %d problems %q reported %+v", code, r.Problems, r.Reported.BGP)
	}
	ss := &v1alpha1.BGPSessionState{ObjectMeta: metav1.ObjectMeta{Name: "n1-tor", Namespace: f.heraldNS,
		Labels: map[string]string{v1alpha1.LabelNode: "n1", v1alpha1.LabelBGPPeer: "tor"}}}
	f.create(ss)
	ss.Status = v1alpha1.BGPSessionStateStatus{Node: "n1", Peer: "203.0.113.1", BGPPeer: "tor", BGPStatus: "Active", BFDStatus: "N/A",
		LastTransitionTime: ptr.To(metav1.Now()), LastError: "connect: TCP MD5 signature mismatch"}
	if err := f.c.Status().Update(ctx, ss); err != nil {
		t.Fatal(err)
	}
	r, code = f.why("web-bgp")
	if code != ExitProblems || !strings.Contains(strings.Join(r.Problems, "\n"), "node n1, peer tor: BGP session Active since") ||
		!strings.Contains(strings.Join(r.Problems, "\n"), "last error: connect: TCP MD5 signature mismatch") {
		t.Errorf("Active session: exit %d problems %q", code, r.Problems)
	}
	if p := r.IPs[0].BGP.Paths; len(p) != 1 || len(p[0].Sessions) != 1 || p[0].Sessions[0].State != "Active" ||
		p[0].Sessions[0].LastError != "connect: TCP MD5 signature mismatch" {
		t.Errorf("paths %+v", p)
	}
	table, _, _ := f.run("why", "svc/web-bgp")
	if !strings.Contains(table, "tor (Active since") || strings.Contains(table, "Problems: none") {
		t.Errorf("table:\n%s", table)
	}
}

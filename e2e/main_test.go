// Package e2e is Herald's end-to-end suite: each test file brings up a lab
// (e2e/lab: a real kube-apiserver, FRR, a client and nodes in network
// namespaces), installs Herald from its own manifests with kubectl (or its
// Helm chart, TestHelm), runs the controller and speakers as processes from
// those manifests, and checks what the API server stores and what the
// client sees on the wire.
package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/e2e/chaos"
	"github.com/herald-lb/herald/e2e/lab"
)

// TestMain silences controller-runtime's own logger (the lab's clients
// use controller-runtime; unset, it prints a stack trace after 30 s).
func TestMain(m *testing.M) {
	chaos.RunAnnouncerIfAsked() // the prefix flood's router, when this binary is started as it
	ctrllog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

// env is one lab with Herald installed, shared by the sub-tests of a file
// (each sub-test uses its own Service names and pools).
type env struct {
	l *lab.Lab
	h *lab.Herald
	c client.Client
	k kubernetes.Interface
}

// newEnv brings up a lab with nodes nodes, installs Herald with opts and,
// when t fails, logs what the client, FRR and the speakers saw.
func newEnv(t *testing.T, nodes int, opts lab.InstallOptions) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("brings up a lab: network namespaces, FRR, an API server and Herald")
	}
	l := lab.UpForTest(t, lab.Config{Nodes: nodes})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	h, err := l.InstallHerald(ctx, opts)
	if h != nil {
		// Registered after UpForTest's cleanup, so it runs before the lab goes.
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("what the client, FRR and the speakers saw:\n%s", h.Diagnose(context.Background()))
			}
		})
	}
	if err != nil {
		t.Fatalf("install herald: %v", err)
	}
	t.Logf("herald installed in %s", time.Since(start).Round(time.Millisecond))
	return &env{l: l, h: h, c: h.Client(), k: l.Client()}
}

// ctx returns a context for one sub-test step.
func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// namespace creates Kubernetes namespace name with labels.
func (e *env) namespace(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	_, err := e.k.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// put creates obj, or updates it when it exists (keeping nothing of the
// stored one but its resourceVersion).
func (e *env) put(t *testing.T, obj client.Object) {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	err := e.c.Create(ctx, obj)
	if apierrors.IsAlreadyExists(err) {
		cur := obj.DeepCopyObject().(client.Object)
		if err = e.c.Get(ctx, client.ObjectKeyFromObject(obj), cur); err == nil {
			obj.SetResourceVersion(cur.GetResourceVersion())
			err = e.c.Update(ctx, obj)
		}
	}
	if err != nil {
		t.Fatalf("put %T %s: %v", obj, obj.GetName(), err)
	}
}

// del deletes obj, ignoring NotFound.
func (e *env) del(t *testing.T, obj client.Object) {
	t.Helper()
	if err := e.c.Delete(testCtx(t, time.Minute), obj); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("delete %T %s: %v", obj, obj.GetName(), err)
	}
}

// pool returns an IPAddressPool in Herald's namespace.
func pool(name string, addrs ...string) *v1beta1.IPAddressPool {
	return &v1beta1.IPAddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: lab.HeraldNamespace},
		Spec:       v1beta1.IPAddressPoolSpec{Addresses: addrs},
	}
}

// l2adv returns an L2Advertisement for pools.
func l2adv(name string, pools ...string) *v1beta1.L2Advertisement {
	return &v1beta1.L2Advertisement{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: lab.HeraldNamespace},
		Spec:       v1beta1.L2AdvertisementSpec{IPAddressPools: pools},
	}
}

// lbService returns a LoadBalancer Service on TCP port 80 selecting
// app=web, changed by the mutators.
func lbService(ns, name string, mut ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{}},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "web", Port: 80, Protocol: corev1.ProtocolTCP,
				TargetPort: intstr.FromInt32(int32(lab.BackendPort))}},
		},
	}
	for _, m := range mut {
		m(s)
	}
	return s
}

// withAnnotation sets an annotation on a Service.
func withAnnotation(k, v string) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Annotations[k] = v }
}

// dualStack asks for one address of each family.
func dualStack(s *corev1.Service) {
	p := corev1.IPFamilyPolicyRequireDualStack
	s.Spec.IPFamilyPolicy = &p
	s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
}

// createService creates svc and gives it a ready endpoint on each of
// nodes (none: a Service with no endpoint slice entries).
func (e *env) createService(t *testing.T, svc *corev1.Service, nodes ...string) {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	if _, err := e.k.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create service %s/%s: %v", svc.Namespace, svc.Name, err)
	}
	e.endpoints(t, svc.Namespace, svc.Name, nodes...)
}

// endpoints sets Service ns/name's endpoints to one ready endpoint per node.
func (e *env) endpoints(t *testing.T, ns, name string, nodes ...string) {
	t.Helper()
	var eps []lab.Endpoint
	for _, n := range nodes {
		eps = append(eps, lab.Endpoint{Node: n, Ready: true})
	}
	if err := e.l.SetEndpoints(testCtx(t, time.Minute), ns, name, eps); err != nil {
		t.Fatal(err)
	}
}

// allNodes returns the lab's node names.
func (e *env) allNodes() []string {
	var ns []string
	for _, n := range e.l.Nodes {
		ns = append(ns, n.Name)
	}
	return ns
}

// ips waits until Service ns/name has n addresses and returns them.
func (e *env) ips(t *testing.T, ns, name string, n int) []netip.Addr {
	t.Helper()
	ips, err := e.h.WaitServiceIPs(testCtx(t, 2*time.Minute), ns, name, n)
	if err != nil {
		t.Fatalf("service %s/%s: %v (events: %s)", ns, name, err, e.events(ns, name))
	}
	return ips
}

// events returns the Events of an object, one per line, for failures.
func (e *env) events(ns, name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := e.k.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, ev := range l.Items {
		fmt.Fprintf(&b, "\n  %s %s: %s", ev.Type, ev.Reason, ev.Message)
	}
	return b.String()
}

// addrs parses addresses, failing t on a typo.
func addrs(t *testing.T, ss ...string) []netip.Addr {
	t.Helper()
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

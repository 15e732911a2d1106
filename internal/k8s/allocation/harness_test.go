package allocation

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/k8s/allocation/allocationtest"
	"github.com/herald-lb/herald/internal/k8s/configload"
	"github.com/herald-lb/herald/internal/k8s/eventrec"
	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

// srv is the package's API server (one for all tests: starting one takes
// seconds). Tests run one at a time: each starts its own controller, which
// watches Services cluster-wide, and deletes its Services when done.
var srv *testenv.Env

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	ctrl.SetLogger(logr.Discard())
	s, err := allocationtest.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "allocation tests:", err)
		os.Exit(1)
	}
	srv = s
	code := m.Run()
	if err := s.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop API server:", err)
	}
	os.Exit(code)
}

// fixture is one test's Herald namespace (pools), Service namespace and
// client.
type fixture struct {
	t      *testing.T
	c      client.Client
	herald string
	ns     string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a real API server; skipped under -short")
	}
	f := &fixture{t: t, c: srv.Client}
	f.herald = f.namespace("herald-system-", nil)
	f.ns = f.namespace("app-", nil)
	t.Cleanup(func() { f.deleteServices(f.ns) })
	return f
}

func (f *fixture) ctx() context.Context { return context.Background() }

func (f *fixture) namespace(prefix string, lbls map[string]string) string {
	f.t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix, Labels: lbls}}
	if err := f.c.Create(f.ctx(), ns); err != nil {
		f.t.Fatalf("create namespace: %v", err)
	}
	return ns.Name
}

// deleteServices deletes every Service of ns (envtest has no namespace
// controller, and Services do not support deletecollection).
func (f *fixture) deleteServices(ns string) {
	var list corev1.ServiceList
	if err := f.c.List(f.ctx(), &list, client.InNamespace(ns)); err != nil {
		f.t.Errorf("list Services: %v", err)
		return
	}
	for i := range list.Items {
		if err := f.c.Delete(f.ctx(), &list.Items[i]); err != nil && !apierrors.IsNotFound(err) {
			f.t.Errorf("delete Service: %v", err)
		}
	}
}

// running is a controller in a manager of its own.
type running struct {
	ctrl *Controller
	reg  *prometheus.Registry
	stop func()
}

// start runs a controller (with its pool status writer) against srv.
func (f *fixture) start(mods ...func(*Options)) *running {
	f.t.Helper()
	return f.startAs(srv.Config, mods...)
}

// startAs is start with the controller's every request made with cfg (for
// example as an impersonated ServiceAccount).
func (f *fixture) startAs(cfg *rest.Config, mods ...func(*Options)) *running {
	f.t.Helper()
	reporterClient, err := client.New(cfg, client.Options{Scheme: srv.Scheme})
	if err != nil {
		f.t.Fatal(err)
	}
	mgr, err := manager.New(cfg, manager.Options{
		Scheme:                 srv.Scheme,
		Cache:                  CacheOptions(f.herald),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		f.t.Fatalf("manager: %v", err)
	}
	reg := prometheus.NewRegistry()
	rec, err := eventrec.New(cfg, srv.Scheme, eventrec.Options{Component: eventrec.Controller, Registerer: reg})
	if err != nil {
		f.t.Fatal(err)
	}
	opts := Options{
		Client: mgr.GetClient(), Cache: mgr.GetCache(), APIReader: mgr.GetAPIReader(), Recorder: rec,
		Namespace: f.herald, Registerer: reg, ConfigMetrics: configload.NewMetrics(reg),
		Reporter: &configload.Reporter{Client: reporterClient, Namespace: f.herald, Name: "controller",
			Labels: map[string]string{"metallb.io/component-type": "controller"}},
		PoolStatusDelay: 50 * time.Millisecond,
	}
	for _, m := range mods {
		m(&opts)
	}
	c, err := New(opts)
	if err != nil {
		rec.Stop(context.Background())
		f.t.Fatal(err)
	}
	if err := mgr.Add(c); err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				f.t.Errorf("manager: %v", err)
			}
			rec.Stop(context.Background())
		})
	}
	f.t.Cleanup(stop)
	return &running{ctrl: c, reg: reg, stop: stop}
}

// waitCached waits until r's cache (what its event handlers are called
// from) holds obj at least at the resourceVersion the test's write gave it,
// or, with gone, no longer holds it. Together with waitQuiet it replaces a
// sleep "long enough for the informers to deliver the events".
func (f *fixture) waitCached(r *running, obj client.Object, gone bool) {
	f.t.Helper()
	want, err := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
	if err != nil && !gone {
		f.t.Fatalf("%T %s: resourceVersion %q: %v", obj, obj.GetName(), obj.GetResourceVersion(), err)
	}
	key := client.ObjectKeyFromObject(obj)
	poll.Until(f.t, 30*time.Second, fmt.Sprintf("%T %s in the controller's cache", obj, key), func() error {
		got, ok := obj.DeepCopyObject().(client.Object)
		if !ok {
			return fmt.Errorf("%T is not a client.Object", obj)
		}
		err := r.ctrl.opts.Cache.Get(f.ctx(), key, got)
		switch {
		case gone && apierrors.IsNotFound(err):
			return nil
		case gone && err == nil:
			return errors.New("still cached")
		case err != nil:
			return err
		}
		rv, err := strconv.ParseUint(got.GetResourceVersion(), 10, 64)
		if err != nil || rv < want {
			return fmt.Errorf("cached at resourceVersion %s, want %d", got.GetResourceVersion(), want)
		}
		return nil
	})
}

// waitQuiet waits until quiet (r.ctrl.idle, or r.ctrl.drained for a
// controller that cannot initialise) holds on several checks in a row: by
// then the handlers of every event waitCached saw have run and their work
// is done. What a "nothing else happens" check reads after it is final.
func waitQuiet(t *testing.T, quiet func() bool) {
	t.Helper()
	n := 0
	poll.Until(t, 60*time.Second, "controller quiet", func() error {
		if quiet() {
			n++
		} else {
			n = 0
		}
		if n < 4 {
			return fmt.Errorf("quiet on %d checks in a row", n)
		}
		return nil
	})
}

// pool creates an IPAddressPool in the Herald namespace.
func (f *fixture) pool(name string, addrs []string, mods ...func(*v1beta1.IPAddressPool)) *v1beta1.IPAddressPool {
	f.t.Helper()
	p := &v1beta1.IPAddressPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.herald, Name: name},
		Spec:       v1beta1.IPAddressPoolSpec{Addresses: addrs},
	}
	for _, m := range mods {
		m(p)
	}
	if err := f.c.Create(f.ctx(), p); err != nil {
		f.t.Fatalf("create pool %s: %v", name, err)
	}
	return p
}

// svc creates a LoadBalancer Service in the fixture's namespace.
func (f *fixture) svc(name string, mods ...func(*corev1.Service)) *corev1.Service {
	f.t.Helper()
	s := newService(f.ns, name, mods...)
	if err := f.c.Create(f.ctx(), s); err != nil {
		f.t.Fatalf("create Service %s: %v", name, err)
	}
	return s
}

func newService(ns, name string, mods ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:                          corev1.ServiceTypeLoadBalancer,
			AllocateLoadBalancerNodePorts: ptr.To(false),
			Selector:                      map[string]string{"app": name},
			Ports:                         []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	for _, m := range mods {
		m(s)
	}
	return s
}

func withAnnotation(k, v string) func(*corev1.Service) {
	return func(s *corev1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[k] = v
	}
}

func withPort(port int32) func(*corev1.Service) {
	return func(s *corev1.Service) {
		s.Spec.Ports = []corev1.ServicePort{{Name: "p", Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromInt32(8080)}}
	}
}

// get reads a Service from the API server.
func (f *fixture) get(name string) *corev1.Service {
	f.t.Helper()
	var s corev1.Service
	if err := f.c.Get(f.ctx(), client.ObjectKey{Namespace: f.ns, Name: name}, &s); err != nil {
		f.t.Fatalf("get Service %s: %v", name, err)
	}
	return &s
}

// waitIPs waits until Service name has exactly want as ingress IPs.
func (f *fixture) waitIPs(name string, want ...string) *corev1.Service {
	f.t.Helper()
	var s *corev1.Service
	poll.Until(f.t, 30*time.Second, name+" ingress "+strings.Join(want, ","), func() error {
		s = f.get(name)
		got := ingressStrings(s)
		if !slices.Equal(got, want) {
			return fmt.Errorf("%v (conditions %v)", got, s.Status.Conditions)
		}
		return nil
	})
	return s
}

// waitCondition waits until Service name's condition has reason.
func (f *fixture) waitCondition(name, reason string) metav1.Condition {
	f.t.Helper()
	var cond metav1.Condition
	poll.Until(f.t, 30*time.Second, name+" condition "+reason, func() error {
		s := f.get(name)
		for _, c := range s.Status.Conditions {
			if c.Type == ConditionType {
				cond = c
				if c.Reason != reason {
					return fmt.Errorf("%+v", c)
				}
				return nil
			}
		}
		return errors.New("no condition")
	})
	return cond
}

func ingressStrings(s *corev1.Service) []string {
	var out []string
	for _, ing := range s.Status.LoadBalancer.Ingress {
		out = append(out, ing.IP)
	}
	return out
}

// waitEvent waits for an event with reason on Service name whose message
// contains substr, and returns its message.
func (f *fixture) waitEvent(name, reason, substr string) string {
	f.t.Helper()
	var msg string
	poll.Until(f.t, 30*time.Second, fmt.Sprintf("event %s %q on %s", reason, substr, name), func() error {
		var list corev1.EventList
		if err := f.c.List(f.ctx(), &list, client.InNamespace(f.ns)); err != nil {
			return err
		}
		var seen []string
		for _, e := range list.Items {
			if e.InvolvedObject.Name != name {
				continue
			}
			seen = append(seen, e.Reason+": "+e.Message)
			if e.Reason == reason && strings.Contains(e.Message, substr) {
				msg = e.Message
				return nil
			}
		}
		return errors.New(strings.Join(seen, " | "))
	})
	return msg
}

// gauge reads a metric value from reg (labels as name=value pairs).
func gauge(t *testing.T, reg *prometheus.Registry, name string, lbls ...string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(lbls); i += 2 {
				if !hasLabel(m, lbls[i], lbls[i+1]) {
					continue next
				}
			}
			switch {
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true
			case m.Counter != nil:
				return m.Counter.GetValue(), true
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == k && l.GetValue() == v {
			return true
		}
	}
	return false
}

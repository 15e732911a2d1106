package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/e2e/lab"
)

// Env is Herald installed in a lab, as the scenarios need it.
type Env struct {
	Lab    *lab.Lab
	Herald *lab.Herald
	// Log receives progress (one line per iteration); nil discards it.
	Log *slog.Logger
}

func (e *Env) log() *slog.Logger {
	if e.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Log
}

// Row is one line of the chaos table: one measure of one scenario.
type Row struct {
	// Scenario names the scenario ("speaker restarts").
	Scenario string
	// Measure says what is counted or timed.
	Measure string
	// Count and Of: Count events out of Of chances (Of 0: a plain count).
	Count, Of int
	// Timing marks a duration row: Duration is the figure, Count and Of
	// are unused.
	Timing   bool
	Duration time.Duration
	// Target is the product target as text ("0", "≤ 2 s").
	Target string
	// Met reports whether the figure meets Target.
	Met bool
}

// Value renders the figure: "3 of 48", "0", "1.234 s".
func (r Row) Value() string {
	switch {
	case r.Timing:
		return fmt.Sprintf("%.3f s", r.Duration.Seconds())
	case r.Of > 0:
		return fmt.Sprintf("%d of %d", r.Count, r.Of)
	}
	return fmt.Sprint(r.Count)
}

// countRow is a row whose target is 0.
func countRow(scenario, measure string, count, of int) Row {
	return Row{Scenario: scenario, Measure: measure, Count: count, Of: of, Target: "0", Met: count == 0}
}

// reportedRow is a count the issue asks to report without a target (Met is
// always true, Target "reported").
func reportedRow(scenario, measure string, count, of int) Row {
	return Row{Scenario: scenario, Measure: measure, Count: count, Of: of, Target: "reported", Met: true}
}

// Result is what one scenario measured.
type Result struct {
	// Scenario names it; Form says how it was run ("20 restarts").
	Scenario, Form string
	Rows           []Row
	// Notes are per-iteration details for the report (what was claimed,
	// by whom), in order.
	Notes []string
}

// Table renders results as the Markdown chaos table, preceded by the
// date, the machine and the lab, and followed by the notes.
func Table(results []Result, nodes int) string {
	host, _ := os.Hostname()
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on %s (%s/%s, %d CPUs as seen by Go; 2 shared cores, noisy), %d-node lab.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), host, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), nodes)
	fmt.Fprintln(&b, "| scenario | run | measure | value | target | met |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|")
	for _, res := range results {
		for _, r := range res.Rows {
			met := "yes"
			if !r.Met {
				met = "**no**"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", res.Scenario, res.Form, r.Measure, r.Value(), r.Target, met)
		}
	}
	for _, res := range results {
		if len(res.Notes) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n%s:\n\n", res.Scenario)
		for _, n := range res.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

// SectionTitle is the heading of the section RecordSection owns.
const SectionTitle = "## Chaos results"

// RecordSection replaces the "## Chaos results" section of the Markdown
// file at path (up to the next "## " heading) with intro and table, or
// appends it when missing (creating the file with a "# Reliability"
// title). Every other section stays byte for byte.
func RecordSection(path, intro, table string) error {
	return lab.ReplaceSection(path, SectionTitle, "# Reliability", strings.TrimRight(intro, "\n")+"\n\n"+table)
}

// service is one LoadBalancer Service a scenario made, with its address.
type service struct {
	Namespace, Name string
	IP              netip.Addr
}

// l2Fixture is a namespace of layer 2 Services, one address each, with a
// ready endpoint on every node, from a pool and advertisement of their own.
type l2Fixture struct {
	ns       string
	services []service
}

func (f *l2Fixture) addrs() []netip.Addr {
	var out []netip.Addr
	for _, s := range f.services {
		out = append(out, s.IP)
	}
	return out
}

// newL2Fixture creates pool and advertisement "chaos-<name>" for the n
// addresses from first, namespace chaos-<name>, and n Services in it, and
// waits until each has its address.
func newL2Fixture(ctx context.Context, e *Env, name string, first netip.Addr, n int) (*l2Fixture, error) {
	return newL2FixtureSpare(ctx, e, name, first, n, 0)
}

// newL2FixtureSpare is newL2Fixture with spare more addresses in the pool
// than Services.
func newL2FixtureSpare(ctx context.Context, e *Env, name string, first netip.Addr, n, spare int) (*l2Fixture, error) {
	last := first
	for range n + spare - 1 {
		last = last.Next()
	}
	if !lab.L2RangeV4.Contains(first) || !lab.L2RangeV4.Contains(last) {
		return nil, fmt.Errorf("%s: %s-%s is not in the lab's layer 2 range %s", name, first, last, lab.L2RangeV4)
	}
	c := e.Herald.Client()
	pool := &v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "chaos-" + name, Namespace: lab.HeraldNamespace},
		Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{first.String() + "-" + last.String()}, AutoAssign: ptr.To(false)}}
	adv := &v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "chaos-" + name, Namespace: lab.HeraldNamespace},
		Spec: v1beta1.L2AdvertisementSpec{IPAddressPools: []string{"chaos-" + name}}}
	for _, o := range []client.Object{pool, adv} {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("%s: create %T %s: %w", name, o, o.GetName(), err)
		}
	}
	f := &l2Fixture{ns: "chaos-" + name}
	if err := e.Lab.EnsureNamespace(ctx, f.ns); err != nil {
		return nil, err
	}
	var eps []lab.Endpoint
	for _, nd := range e.Lab.Nodes {
		eps = append(eps, lab.Endpoint{Node: nd.Name, Ready: true})
	}
	k := e.Lab.Client()
	for i := range n {
		svc := lbService(f.ns, fmt.Sprintf("s%02d", i), "chaos-"+name)
		if _, err := k.CoreV1().Services(f.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("%s: create service %s/%s: %w", name, f.ns, svc.Name, err)
		}
		if err := e.Lab.SetEndpoints(ctx, f.ns, svc.Name, eps); err != nil {
			return nil, err
		}
	}
	for i := range n {
		sn := fmt.Sprintf("s%02d", i)
		ips, err := e.Herald.WaitServiceIPs(ctx, f.ns, sn, 1)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		f.services = append(f.services, service{Namespace: f.ns, Name: sn, IP: ips[0]})
	}
	return f, nil
}

// delete removes the fixture's Services, pool and advertisement (the
// namespace stays: the lab has no namespace controller to finish deleting
// it).
func (f *l2Fixture) delete(ctx context.Context, e *Env, name string) error {
	c := e.Herald.Client()
	var errs []error
	for _, s := range f.services {
		if err := e.Lab.Client().CoreV1().Services(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	for _, o := range []client.Object{
		&v1beta1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "chaos-" + name, Namespace: lab.HeraldNamespace}},
		&v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "chaos-" + name, Namespace: lab.HeraldNamespace}},
	} {
		if err := c.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// lbService is a LoadBalancer Service on port 80 asking for pool.
func lbService(ns, name, pool string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Annotations: map[string]string{"metallb.io/address-pool": pool}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "web", Port: 80, Protocol: corev1.ProtocolTCP,
				TargetPort: intstr.FromInt32(int32(lab.BackendPort))}}},
	}
}

// owners is the node answering each address.
type owners map[netip.Addr]string

// settle waits (at most timeout) until the client's ARP probe finds
// exactly one node answering each of the fixture's addresses and each
// Service's ServiceL2Status objects name exactly that node, and returns
// the owners.
func (f *l2Fixture) settle(ctx context.Context, e *Env, timeout time.Duration) (owners, error) {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		o, err := f.owners(ctx, e)
		if err == nil {
			return o, nil
		}
		last = err
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("not settled within %s: %w", timeout, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// owners probes once; it fails unless every address has one answerer that
// its ServiceL2Status agrees with.
func (f *l2Fixture) owners(ctx context.Context, e *Env) (owners, error) {
	who, err := e.Lab.ProbeARP(ctx, f.addrs(), 300*time.Millisecond)
	if err != nil {
		return nil, err
	}
	o := owners{}
	for _, s := range f.services {
		w := who[s.IP]
		if len(w) != 1 {
			return nil, fmt.Errorf("%s (%s/%s) answered by %v", s.IP, s.Namespace, s.Name, w)
		}
		st, err := e.Herald.L2Statuses(ctx, s.Namespace, s.Name)
		if err != nil {
			return nil, err
		}
		if len(st) != 1 || st[0].Status.Node != w[0] {
			var ns []string
			for _, x := range st {
				ns = append(ns, x.Status.Node)
			}
			return nil, fmt.Errorf("%s answered by %s, ServiceL2Status on %v", s.IP, w[0], ns)
		}
		o[s.IP] = w[0]
	}
	return o, nil
}

// primeClient empties the client's neighbour cache and reaches every
// address over HTTP, so that the client's kernel holds one neighbour entry
// per address, learnt from the owner's ARP reply; it checks that the owner
// served each request and that the entry names it.
func (f *l2Fixture) primeClient(ctx context.Context, e *Env, o owners) error {
	l := e.Lab
	if err := l.FlushNeighbors(ctx, l.ClientNamespace()); err != nil {
		return err
	}
	for _, s := range f.services {
		r, err := l.Get(ctx, l.ClientNamespace(), s.IP, 80)
		if err != nil {
			return err
		}
		if r.Node != o[s.IP] {
			return fmt.Errorf("%s served by %s, answered ARP from %s", s.IP, r.Node, o[s.IP])
		}
	}
	tab, err := l.NeighborTable(l.ClientNamespace())
	if err != nil {
		return err
	}
	for _, s := range f.services {
		if got := l.NodeByMAC(tab[s.IP]); got != o[s.IP] {
			return fmt.Errorf("client's neighbour entry for %s names %q (%s), want %s", s.IP, got, tab[s.IP], o[s.IP])
		}
	}
	return nil
}

package allocation

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/annotations"
)

// op is one step of a replayed sequence of pool and Service events.
type op struct {
	kind  string // createPool, editPool, deletePool, createSvc, editSvc, deleteSvc
	name  string
	addrs []string          // pools
	auto  bool              // pools: autoAssign
	ann   map[string]string // Services: annotations
	port  int32             // Services
}

func (o op) String() string {
	return fmt.Sprintf("%s %s %v %v %v %d", o.kind, o.name, o.addrs, o.auto, o.ann, o.port)
}

// randomOps draws n steps from a fixed seed. Four pools, each inside its own
// /28 of 198.51.100.0/24 (so they never overlap) with a size that edits
// change; up to 24 Services, some naming a pool or sharing an address.
func randomOps(seed uint64, n int) []op {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	pools := map[string]bool{}
	svcs := map[string]bool{}
	poolAddrs := func(i int) []string {
		base := 16 * i
		switch rng.IntN(3) {
		case 0:
			return []string{fmt.Sprintf("198.51.100.%d/30", base)}
		case 1:
			return []string{fmt.Sprintf("198.51.100.%d/29", base)}
		}
		return []string{fmt.Sprintf("198.51.100.%d/30", base), fmt.Sprintf("198.51.100.%d/30", base+8)}
	}
	svcAnn := func() map[string]string {
		ann := map[string]string{}
		if rng.IntN(5) == 0 {
			ann[annotations.AddressPool] = fmt.Sprintf("pool-%d", rng.IntN(4))
		}
		if rng.IntN(4) == 0 {
			ann[annotations.AllowSharedIP] = "shared"
		}
		return ann
	}
	ports := []int32{80, 443, 8080}
	var out []op
	for len(out) < n {
		switch r := rng.IntN(100); {
		case r < 15:
			i := rng.IntN(4)
			name := fmt.Sprintf("pool-%d", i)
			if pools[name] {
				continue
			}
			pools[name] = true
			out = append(out, op{kind: "createPool", name: name, addrs: poolAddrs(i), auto: rng.IntN(5) != 0})
		case r < 25:
			i := rng.IntN(4)
			name := fmt.Sprintf("pool-%d", i)
			if !pools[name] {
				continue
			}
			out = append(out, op{kind: "editPool", name: name, addrs: poolAddrs(i), auto: rng.IntN(5) != 0})
		case r < 32:
			name := fmt.Sprintf("pool-%d", rng.IntN(4))
			if !pools[name] {
				continue
			}
			delete(pools, name)
			out = append(out, op{kind: "deletePool", name: name})
		case r < 72:
			name := fmt.Sprintf("s-%02d", rng.IntN(24))
			if svcs[name] {
				continue
			}
			svcs[name] = true
			out = append(out, op{kind: "createSvc", name: name, ann: svcAnn(), port: ports[rng.IntN(3)]})
		case r < 82:
			name := fmt.Sprintf("s-%02d", rng.IntN(24))
			if !svcs[name] {
				continue
			}
			out = append(out, op{kind: "editSvc", name: name, ann: svcAnn(), port: ports[rng.IntN(3)]})
		default:
			name := fmt.Sprintf("s-%02d", rng.IntN(24))
			if !svcs[name] {
				continue
			}
			delete(svcs, name)
			out = append(out, op{kind: "deleteSvc", name: name})
		}
	}
	return out
}

// apply performs one step against the API server and returns the object it
// wrote (gone: deleted), for waitCached.
func (f *fixture) apply(o op) (obj client.Object, gone bool) {
	f.t.Helper()
	ctx := f.ctx()
	poolKey := client.ObjectKey{Namespace: f.herald, Name: o.name}
	var err error
	switch o.kind {
	case "createPool":
		obj = f.pool(o.name, o.addrs, func(p *v1beta1.IPAddressPool) { p.Spec.AutoAssign = ptr.To(o.auto) })
	case "editPool":
		p := &v1beta1.IPAddressPool{}
		if err = f.c.Get(ctx, poolKey, p); err == nil {
			base := p.DeepCopy()
			p.Spec.Addresses, p.Spec.AutoAssign = o.addrs, ptr.To(o.auto)
			err = f.c.Patch(ctx, p, client.MergeFrom(base))
		}
		obj = p
	case "deletePool":
		obj, gone = &v1beta1.IPAddressPool{ObjectMeta: metaNS(f.herald, o.name)}, true
		err = f.c.Delete(ctx, obj)
	case "createSvc":
		s := newService(f.ns, o.name, withPort(o.port))
		s.Annotations = o.ann
		err = f.c.Create(ctx, s)
		obj = s
	case "editSvc":
		s := f.get(o.name)
		base := s.DeepCopy()
		s.Annotations = o.ann
		s.Spec.Ports[0].Port = o.port
		err = f.c.Patch(ctx, s, client.MergeFrom(base))
		obj = s
	case "deleteSvc":
		obj, gone = &corev1.Service{ObjectMeta: metaNS(f.ns, o.name)}, true
		err = f.c.Delete(ctx, obj)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		f.t.Fatalf("%v: %v", o, err)
	}
	return obj, gone
}

// state renders every Service's addresses ("" = none), sorted by name.
func (f *fixture) state() map[string]string {
	f.t.Helper()
	var list corev1.ServiceList
	if err := f.c.List(f.ctx(), &list, client.InNamespace(f.ns)); err != nil {
		f.t.Fatal(err)
	}
	out := map[string]string{}
	for i := range list.Items {
		out[list.Items[i].Name] = strings.Join(ingressStrings(&list.Items[i]), ",")
	}
	return out
}

// replay applies ops one at a time, waiting for quiescence after each, with
// a controller restart before step restartAt (-1: none).
func replay(t *testing.T, ops []op, restartAt int) map[string]string {
	f := newFixture(t)
	r := f.start()
	waitQuiet(t, r.ctrl.idle)
	for i, o := range ops {
		if i == restartAt {
			r.stop()
			r = f.start()
			waitQuiet(t, r.ctrl.idle)
		}
		obj, gone := f.apply(o)
		f.waitCached(r, obj, gone)
		waitQuiet(t, r.ctrl.idle)
	}
	out := f.state()
	r.stop()
	f.deleteServices(f.ns)
	return out
}

// MetalLB issue 8: the final addresses must depend only on the sequence of
// events, not on when the controller restarted. One random sequence (fixed
// seed) is replayed twice, once without and once with a restart midway.
func TestReplayDeterministicAcrossRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real API server")
	}
	ops := randomOps(8, 60)
	for i, o := range ops {
		t.Logf("step %02d: %v", i, o)
	}
	plain := replay(t, ops, -1)
	restarted := replay(t, ops, len(ops)/2)
	addressed := 0
	for name, ips := range plain {
		if ips != "" {
			addressed++
		}
		if restarted[name] != ips {
			t.Errorf("%s: %q without restart, %q with a restart", name, ips, restarted[name])
		}
	}
	if len(plain) != len(restarted) {
		t.Errorf("Service sets differ: %v vs %v", plain, restarted)
	}
	t.Logf("%d Services at the end, %d with addresses: %v", len(plain), addressed, plain)
}

func metaNS(ns, name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: ns, Name: name} }

package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/e2e/lab"
)

// APIOutageOptions shapes the API server outage scenario.
type APIOutageOptions struct {
	// Outage is how long kube-apiserver stays stopped; 0 means 60 s.
	Outage time.Duration
	// Addresses is the number of layer 2 Services and of BGP Services;
	// 0 means 4 each.
	Addresses int
	// FirstL2 and FirstBGP are the first addresses of the scenario's
	// pools; zero means 198.51.100.224 and 203.0.113.240.
	FirstL2, FirstBGP netip.Addr
}

func (o *APIOutageOptions) defaults() {
	if o.Outage == 0 {
		o.Outage = 60 * time.Second
	}
	if o.Addresses == 0 {
		o.Addresses = 4
	}
	if !o.FirstL2.IsValid() {
		o.FirstL2 = netip.MustParseAddr("198.51.100.224")
	}
	if !o.FirstBGP.IsValid() {
		o.FirstBGP = netip.MustParseAddr("203.0.113.240")
	}
}

// ScenarioAPIOutage names the API server outage scenario in the table.
const ScenarioAPIOutage = "API server stopped, then back"

// CatchUpTarget is the product target for a change made right after the
// API server is back to reach the wire.
const CatchUpTarget = 5 * time.Second

const apiNS = "chaos-apiserver"

// APIOutage announces o.Addresses layer 2 Services and o.Addresses BGP
// Services (a BGPPeer from every node to the lab's FRR router), stops
// kube-apiserver for o.Outage and starts it again (playing the kubelet: a
// controller or speaker that exited meanwhile is started again, and said
// so in the notes). About once a second during the outage it probes every
// layer 2 address from the client and reads the router's BGP sessions and
// table. It reports:
//
//   - layer 2 address probes not answered by exactly the owner from before
//     (target 0);
//   - BGP sessions that left Established or restarted (target 0);
//   - BGP prefix probes where the router lacked a Service's prefix or had
//     fewer paths than before (target 0);
//   - catch-up: from the API server being ready again until a Service
//     created then has its address and its node answers ARP for it
//     (target CatchUpTarget).
func APIOutage(ctx context.Context, e *Env, o APIOutageOptions) (res Result, err error) {
	o.defaults()
	res = Result{Scenario: ScenarioAPIOutage, Form: fmt.Sprintf("%s outage, %d layer 2 + %d BGP Services", o.Outage, o.Addresses, o.Addresses)}
	f, err := newL2FixtureSpare(ctx, e, "apiserver", o.FirstL2, o.Addresses, 1)
	if err != nil {
		return res, err
	}
	c := e.Herald.Client()
	bgpPool := "chaos-apiserver-bgp"
	lastBGP := o.FirstBGP
	for range o.Addresses - 1 {
		lastBGP = lastBGP.Next()
	}
	objs := []client.Object{
		&v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: bgpPool, Namespace: lab.HeraldNamespace},
			Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{o.FirstBGP.String() + "-" + lastBGP.String()}, AutoAssign: ptr.To(false)}},
		&v1beta1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: bgpPool, Namespace: lab.HeraldNamespace},
			Spec: v1beta1.BGPAdvertisementSpec{IPAddressPools: []string{bgpPool}}},
		&v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "chaos-router", Namespace: lab.HeraldNamespace},
			Spec: v1beta2.BGPPeerSpec{MyASN: lab.NodeASN, PeerASN: lab.RouterASN, PeerAddress: lab.RouterAddr.String(),
				HoldTime: &metav1.Duration{Duration: 9 * time.Second}, ConnectTime: &metav1.Duration{Duration: time.Second}}},
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		errs := []error{err, deleteServices(dctx, e, apiNS, 2)}
		for i := len(objs) - 1; i >= 0; i-- {
			if derr := c.Delete(dctx, objs[i]); derr != nil && !apierrors.IsNotFound(derr) {
				errs = append(errs, derr)
			}
		}
		errs = append(errs, f.delete(dctx, e, "apiserver"))
		err = errors.Join(errs...)
	}()
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return res, fmt.Errorf("%s: create %T %s: %w", ScenarioAPIOutage, obj, obj.GetName(), err)
		}
	}
	var eps []lab.Endpoint
	for _, n := range e.Lab.Nodes {
		eps = append(eps, lab.Endpoint{Node: n.Name, Ready: true})
	}
	var prefixes []string
	for i := range o.Addresses {
		name := fmt.Sprintf("bgp%02d", i)
		if _, err := e.Lab.Client().CoreV1().Services(f.ns).Create(ctx, lbService(f.ns, name, bgpPool), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return res, err
		}
		if err := e.Lab.SetEndpoints(ctx, f.ns, name, eps); err != nil {
			return res, err
		}
		ips, err := e.Herald.WaitServiceIPs(ctx, f.ns, name, 1)
		if err != nil {
			return res, err
		}
		prefixes = append(prefixes, ips[0].String()+"/32")
	}
	before, err := f.settle(ctx, e, 90*time.Second)
	if err != nil {
		return res, fmt.Errorf("%s: before: %w", ScenarioAPIOutage, err)
	}
	paths, uptime, err := bgpState(ctx, e, prefixes, len(e.Lab.Nodes), 90*time.Second)
	if err != nil {
		return res, fmt.Errorf("%s: before: %w", ScenarioAPIOutage, err)
	}

	argv, err := e.Lab.StopAPIServer()
	if err != nil {
		return res, err
	}
	stoppedAt := time.Now()
	started := false
	defer func() {
		if !started {
			err = errors.Join(err, e.Lab.StartAPIServer(context.WithoutCancel(ctx), argv))
		}
	}()
	var l2Probes, l2Wrong, pfxProbes, pfxWrong int
	dropped := map[string]bool{}
	var notes []string
	for time.Since(stoppedAt) < o.Outage {
		who, err := e.Lab.ProbeARP(ctx, f.addrs(), 300*time.Millisecond)
		if err != nil {
			return res, err
		}
		for a, ws := range who {
			l2Probes++
			if len(ws) != 1 || ws[0] != before[a] {
				l2Wrong++
				if len(notes) < 3 {
					notes = append(notes, fmt.Sprintf("%.1f s into the outage: %s answered by %v (owner %s)", time.Since(stoppedAt).Seconds(), a, ws, before[a]))
				}
			}
		}
		sum, err := e.Lab.BGPSummary(ctx)
		if err != nil {
			return res, err
		}
		for peer, up := range uptime {
			p, ok := sum["ipv4Unicast"].Peers[peer]
			if !ok || p.State != "Established" || p.PeerUptimeMs < up {
				dropped[peer] = true
			}
		}
		routes, err := e.Lab.BGPRoutes(ctx, "ipv4")
		if err != nil {
			return res, err
		}
		for _, pfx := range prefixes {
			pfxProbes++
			if len(routes[pfx]) < paths[pfx] {
				pfxWrong++
			}
		}
		time.Sleep(700 * time.Millisecond)
	}
	started = true
	if err := e.Lab.StartAPIServer(ctx, argv); err != nil {
		return res, err
	}
	readyAt := time.Now()
	revived, err := revive(ctx, e)
	if err != nil {
		return res, err
	}
	if len(revived) > 0 {
		notes = append(notes, fmt.Sprintf("exited during the outage and started again (as a kubelet would): %s", strings.Join(revived, ", ")))
	}
	// Catch-up: a Service created now reaches the wire.
	late := lbService(f.ns, "late", "chaos-apiserver")
	var lateIP netip.Addr
	catchUp := time.Duration(0)
	if _, err := e.Lab.Client().CoreV1().Services(f.ns).Create(ctx, late, metav1.CreateOptions{}); err != nil {
		return res, fmt.Errorf("%s: create %s after the outage: %w", ScenarioAPIOutage, late.Name, err)
	}
	if err := e.Lab.SetEndpoints(ctx, f.ns, late.Name, eps); err != nil {
		return res, err
	}
	deadline := time.Now().Add(5 * time.Minute)
	var assigned time.Duration
	for {
		if ips, _ := e.Herald.ServiceIPs(ctx, f.ns, late.Name); len(ips) > 0 {
			if !lateIP.IsValid() {
				assigned = time.Since(readyAt)
			}
			lateIP = ips[0]
			if who, err := e.Lab.ProbeARP(ctx, []netip.Addr{lateIP}, 200*time.Millisecond); err == nil && len(who[lateIP]) == 1 {
				catchUp = time.Since(readyAt)
				break
			}
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("%s: the Service created after the outage is not announced within 5 min (address %v)", ScenarioAPIOutage, lateIP)
		}
		time.Sleep(100 * time.Millisecond)
	}
	notes = append(notes, fmt.Sprintf("catch-up: %s got its address %.1f s after the API server was ready, answered on the wire %.1f s after",
		lateIP, assigned.Seconds(), catchUp.Seconds()))
	var drops []string
	for p := range dropped {
		drops = append(drops, p)
	}
	sort.Strings(drops)
	if len(drops) > 0 {
		notes = append(notes, fmt.Sprintf("BGP sessions dropped: %v", drops))
	}
	res.Notes = append(res.Notes, notes...)
	res.Rows = []Row{
		countRow(ScenarioAPIOutage, "layer 2 address probes not answered by exactly the owner, during the outage", l2Wrong, l2Probes),
		countRow(ScenarioAPIOutage, "BGP sessions dropped or restarted during the outage (router's view)", len(drops), len(uptime)),
		countRow(ScenarioAPIOutage, "BGP prefix probes with a path missing at the router, during the outage", pfxWrong, pfxProbes),
		{Scenario: ScenarioAPIOutage, Measure: "catch-up: API server ready → a new Service's address answered on the wire", Timing: true,
			Duration: catchUp, Target: fmt.Sprintf("≤ %.0f s", CatchUpTarget.Seconds()), Met: catchUp <= CatchUpTarget},
	}
	return res, nil
}

// bgpState waits until the router has, for every prefix, a path from
// each of nodes, and every session is Established; it returns the paths
// per prefix and each peer's uptime (ms).
func bgpState(ctx context.Context, e *Env, prefixes []string, nodes int, timeout time.Duration) (map[string]int, map[string]int64, error) {
	deadline := time.Now().Add(timeout)
	for {
		err := func() error {
			routes, err := e.Lab.BGPRoutes(ctx, "ipv4")
			if err != nil {
				return err
			}
			for _, p := range prefixes {
				if len(routes[p]) != nodes {
					return fmt.Errorf("router has %d paths for %s, want %d", len(routes[p]), p, nodes)
				}
			}
			return nil
		}()
		if err == nil {
			sum, serr := e.Lab.BGPSummary(ctx)
			if serr != nil {
				return nil, nil, serr
			}
			paths, up := map[string]int{}, map[string]int64{}
			for _, p := range prefixes {
				paths[p] = nodes
			}
			for addr, p := range sum["ipv4Unicast"].Peers {
				if p.State == "Established" {
					up[addr] = p.PeerUptimeMs
				}
			}
			if len(up) >= nodes {
				return paths, up, nil
			}
			err = fmt.Errorf("%d sessions established, want %d", len(up), nodes)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, nil, fmt.Errorf("BGP not converged within %s: %w", timeout, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// revive plays the kubelet after an outage: it starts again the
// controller and every speaker whose process exited, and returns their
// names.
func revive(ctx context.Context, e *Env) ([]string, error) {
	var out []string
	if p := e.Herald.Controller(); p == nil || !p.Alive() {
		if p != nil {
			_ = e.Lab.StopProcess(p.Name)
		}
		if err := e.Herald.StartController(ctx); err != nil {
			return out, err
		}
		out = append(out, "controller")
	}
	for _, n := range e.Herald.SpeakerNodes() {
		if p := e.Herald.Speaker(n); p == nil || !p.Alive() {
			if p != nil {
				_ = e.Lab.StopProcess(p.Name)
			}
			if err := e.Herald.StartSpeaker(ctx, n); err != nil {
				return out, err
			}
			out = append(out, "speaker "+n)
		}
	}
	return out, nil
}

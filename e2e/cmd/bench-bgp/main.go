// Command bench-bgp measures Herald's BGP announcement speed in the lab
// against a real FRR router (`make bench-bgp`):
//
//   - announce: a Service is created (its ready endpoints right after, as the
//     EndpointSlice controller would) until FRR's zebra installs its /32 in
//     the router's kernel table (seen as a netlink RTM_NEWROUTE event in the
//     router namespace), p50/p99 over -services Services, one at a time;
//   - withdraw: its endpoints are emptied until the /32 is deleted there
//     (RTM_DELROUTE), p50/p99;
//   - bulk: -bulk single-stack IPv6 Services (one /128 each) exist with
//     endpoints before the BGPPeer does; then the IPv6 BGPPeer is created and
//     the time until FRR's `show bgp summary json` counts them all received
//     (pfxRcd) is measured, from the peer's creation and from the session's
//     Established, with the speaker's peak RSS (VmHWM in /proc) afterwards;
//   - failover: the node's switch port is cut until FRR has withdrawn its
//     /32 (RTM_DELROUTE), -failover-rounds times with BGP alone (the
//     IPv4 peer's -hold-time) and as often with BFD 300 ms x 3, median and
//     max and their ratio (see bfd.go).
//
// One lab node runs a speaker (and the controller's Pod is placed there);
// the router is the lab's FRR (AS 64500, dynamic neighbors). It prints a
// table; the numbers depend on the machine, so the table names it.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/e2e/lab"
	"github.com/herald-lb/herald/internal/poll"
)

const (
	benchNS  = "bench-bgp"
	node     = "n1"
	poolAnno = "metallb.io/address-pool"
	ipsAnno  = "metallb.io/loadBalancerIPs"
)

func main() {
	services := flag.Int("services", 100, "Services for the announce/withdraw latency")
	bulk := flag.Int("bulk", 10000, "IPv6 prefixes for the bulk announcement")
	workers := flag.Int("workers", 8, "parallel API writers for the bulk setup")
	bulkSetup := flag.Duration("bulk-setup", 20*time.Minute, "at most this long creating the bulk Services; fewer are measured if the API server is slower")
	stateDir := flag.String("state-dir", "", "lab state directory (default: a temporary one, removed after)")
	record := flag.String("record", "", "Markdown file whose \"## BGP\" section gets the figures (replaced, or appended)")
	keep := flag.Bool("keep", false, "leave the lab up afterwards (herald-lab down --state-dir ... removes it)")
	rounds := flag.Int("failover-rounds", 5, "link cuts with BGP alone and as many with BFD (0: no failover measurement)")
	hold := flag.Duration("hold-time", 9*time.Second, "hold time of the IPv4 BGPPeer (keepalive a third of it)")
	flag.Parse()
	// The lab's controller-runtime clients log through slog (without a
	// logger, controller-runtime complains after 30 s and drops them).
	crlog.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, nil)))
	if *services < 0 || *bulk < 0 || *rounds < 0 || *hold < 3*time.Second {
		fmt.Fprintln(os.Stderr, "bench-bgp: -services, -bulk and -failover-rounds must not be negative, -hold-time at least 3s (RFC 4271 §4.2)")
		os.Exit(2)
	}
	f := failover{hold: *hold, keepalive: *hold / 3}
	if err := run(*services, *bulk, *workers, *bulkSetup, *stateDir, *keep, *record, *rounds, f); err != nil {
		fmt.Fprintln(os.Stderr, "bench-bgp:", err)
		os.Exit(1)
	}
}

// run brings the lab up and measures; the BGP table is recorded in record
// (if set) when services > 0, the failover table when rounds > 0.
func run(services, bulk, workers int, bulkSetup time.Duration, stateDir string, keep bool, record string, rounds int, f failover) (err error) {
	// SIGINT and SIGTERM end the run through the clean-up below (lab
	// down, temporary state directory removed), as a failure does.
	sctx, sstop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer sstop()
	ctx, stop := context.WithTimeout(sctx, 40*time.Minute)
	defer stop()
	if stateDir == "" {
		d, err := os.MkdirTemp("", "bench-bgp-")
		if err != nil {
			return err
		}
		stateDir = d
		if !keep {
			defer os.RemoveAll(d)
		}
	}
	fmt.Fprintf(os.Stderr, "bringing the lab up in %s ...\n", stateDir)
	l, err := lab.Up(ctx, lab.Config{Prefix: lab.RandomPrefix(), Nodes: 1, StateDir: stateDir})
	if err != nil {
		return err
	}
	if !keep {
		defer func() {
			if derr := l.Down(); derr != nil {
				err = errors.Join(err, derr)
			}
		}()
	}
	fmt.Fprintln(os.Stderr, "installing Herald ...")
	h, err := l.InstallHerald(ctx, lab.InstallOptions{})
	if err != nil {
		if h != nil {
			fmt.Fprintln(os.Stderr, h.Logs(40))
		}
		return err
	}
	c := h.Client()
	peerV4 := peer("bench-v4", lab.RouterAddr)
	peerV4.Spec.HoldTime = &metav1.Duration{Duration: f.hold}
	peerV4.Spec.KeepaliveTime = &metav1.Duration{Duration: f.keepalive}
	if err := l.EnsureNamespace(ctx, benchNS); err != nil {
		return err
	}
	for _, obj := range []struct {
		name string
		err  error
	}{
		{"pool v4", c.Create(ctx, &v1beta1.IPAddressPool{
			ObjectMeta: metav1.ObjectMeta{Name: "bench-v4", Namespace: lab.HeraldNamespace},
			Spec:       v1beta1.IPAddressPoolSpec{Addresses: []string{lab.BGPPrefixV4.String()}, AutoAssign: ptr.To(false)}})},
		{"pool v6", c.Create(ctx, &v1beta1.IPAddressPool{
			ObjectMeta: metav1.ObjectMeta{Name: "bench-v6", Namespace: lab.HeraldNamespace},
			Spec:       v1beta1.IPAddressPoolSpec{Addresses: []string{lab.BGPPrefixV6.String()}, AutoAssign: ptr.To(false)}})},
		{"advertisement", c.Create(ctx, &v1beta1.BGPAdvertisement{
			ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: lab.HeraldNamespace},
			Spec:       v1beta1.BGPAdvertisementSpec{IPAddressPools: []string{"bench-v4", "bench-v6"}}})},
		{"peer v4", c.Create(ctx, peerV4)},
	} {
		if obj.err != nil {
			return fmt.Errorf("create %s: %w", obj.name, obj.err)
		}
	}
	if err := waitEstablished(ctx, l, "ipv4Unicast", lab.NodeAddr(1).String()); err != nil {
		return err
	}

	// Announce and withdraw latency, one Service at a time.
	routes, err := watchRoutes(l.RouterNamespace())
	if err != nil {
		return err
	}
	var ann, wd, alloc []time.Duration
	cs := l.Client()
	ingress, err := watchIngress(ctx, cs)
	if err != nil {
		return err
	}
	for i := range services {
		ip := lab.BGPPrefixV4.Addr().As4()
		ip[3] = byte(10 + i)
		addr := netip.AddrFrom4(ip)
		name := fmt.Sprintf("lat-%d", i)
		// The ready endpoint exists first, so the Service is "created with
		// ready endpoints" at its Create call.
		slice, err := createSlice(ctx, cs, name, discoveryv1.AddressTypeIPv4, lab.NodeAddr(1))
		if err != nil {
			return err
		}
		t0 := time.Now()
		if err := createService(ctx, cs, name, "bench-v4", addr, corev1.IPv4Protocol); err != nil {
			return err
		}
		at, err := routes.wait(ctx, addr, unix.RTM_NEWROUTE, 30*time.Second)
		if err != nil {
			return fmt.Errorf("announce %s: %w\n%s", addr, err, h.Logs(30))
		}
		ann = append(ann, at.Sub(t0))
		if ia, ok := ingress.seen(name); ok {
			alloc = append(alloc, ia.Sub(t0))
		}
		slice.Endpoints = []discoveryv1.Endpoint{}
		t1 := time.Now()
		if _, err := cs.DiscoveryV1().EndpointSlices(benchNS).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("empty endpoints of %s: %w", name, err)
		}
		at, err = routes.wait(ctx, addr, unix.RTM_DELROUTE, 30*time.Second)
		if err != nil {
			return fmt.Errorf("withdraw %s: %w", addr, err)
		}
		wd = append(wd, at.Sub(t1))
		if err := cs.CoreV1().Services(benchNS).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		if err := cs.DiscoveryV1().EndpointSlices(benchNS).Delete(ctx, slice.Name, metav1.DeleteOptions{}); err != nil {
			return err
		}
	}
	routes.close()
	if services > 0 {
		fmt.Fprintf(os.Stderr, "announce p50 %s p99 %s; withdraw p50 %s p99 %s\n",
			ms(pctOf(ann, 50)), ms(pctOf(ann, 99)), ms(pctOf(wd, 50)), ms(pctOf(wd, 99)))
	}

	// Failover, before the bulk phase adds the IPv6 session.
	if rounds > 0 {
		fmt.Fprintf(os.Stderr, "failover: %d link cuts without BFD, %d with ...\n", rounds, rounds)
		if err := measureFailover(ctx, l, h, c, cs, "bench-v4", rounds, &f); err != nil {
			return err
		}
	}

	// Bulk: the Services first, then the IPv6 peer.
	var bulkFromPeer, bulkFromEst time.Duration
	var hwm, rssBefore string
	var digest time.Duration
	if bulk > 0 {
		fmt.Fprintf(os.Stderr, "creating %d IPv6 Services with endpoints ...\n", bulk)
		setup := time.Now()
		n, err := bulkServices(ctx, cs, bulk, workers, bulkSetup)
		if err != nil {
			return err
		}
		if n < bulk {
			fmt.Fprintf(os.Stderr, "only %d Services created within %s (the API server is slow here); measuring with %d\n", n, bulkSetup, n)
			bulk = n
		}
		fmt.Fprintf(os.Stderr, "created in %s; waiting for their addresses ...\n", time.Since(setup).Round(time.Second))
		if err := waitAllocated(ctx, cs, bulk); err != nil {
			return err
		}
		spk := h.Speaker(node)
		if spk == nil {
			return errors.New("no speaker process")
		}
		// Let the speaker digest the Services before the session exists:
		// it logs "announcing" once per Service it decided to announce.
		fmt.Fprintf(os.Stderr, "waiting for the speaker to decide on all %d Services ...\n", bulk)
		if _, err := poll.Wait(ctx, 30*time.Minute, "", reached(func() (bool, error) {
			n, err := countDecided(spk.Log)
			return n >= bulk, err
		}), poll.Every(time.Second)); err != nil {
			return fmt.Errorf("speaker backlog: %w", err)
		}
		digest = time.Since(setup)
		rssBefore = procStatus(spk.PID, "VmRSS")
		v6 := lab.NodeAddrV6(1).String()
		t0 := time.Now()
		if err := c.Create(ctx, peer("bench-v6", lab.RouterAddrV6)); err != nil {
			return fmt.Errorf("create peer v6: %w", err)
		}
		var est time.Time
		_, err = poll.Wait(ctx, 5*time.Minute, "", reached(func() (bool, error) {
			s, err := l.BGPSummary(ctx)
			if err != nil {
				return false, err
			}
			p, ok := s["ipv6Unicast"].Peers[v6]
			if ok && p.State == "Established" && est.IsZero() {
				est = time.Now()
			}
			return ok && p.PfxRcd >= bulk, nil
		}), poll.Every(20*time.Millisecond))
		if err != nil {
			return fmt.Errorf("bulk: %w\n%s", err, h.Logs(30))
		}
		done := time.Now()
		bulkFromPeer, bulkFromEst = done.Sub(t0), done.Sub(est)
		hwm = procStatus(spk.PID, "VmHWM")
	}

	frr := frrVersion(ctx, l)
	var ft string
	if rounds > 0 {
		ft = failoverTable(f, frr)
	}
	if services == 0 {
		fmt.Println()
		fmt.Print(ft)
		if record != "" && rounds > 0 {
			return recordFailover(record, ft)
		}
		return nil
	}
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "Measured %s on %s (%d CPUs shared with other work, %s/%s; load average at the end %s), "+
		"lab with 1 node, FRR %s.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), host, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH,
		loadAvg(), frr)
	fmt.Fprintf(&b, "| Measurement | n | p50 | p99 | max | target |\n|---|---|---|---|---|---|\n")
	row := func(name string, d []time.Duration, target string) {
		s := slices.Clone(d)
		slices.Sort(s)
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s |\n", name, len(s), ms(pct(s, 50)), ms(pct(s, 99)), ms(s[len(s)-1]), target)
	}
	row("Service created → /32 installed by FRR", ann, "p50 < 100 ms, p99 < 300 ms")
	if len(alloc) > 0 {
		row("of which: Service created → its IP in status (controller; seen by a watch)", alloc, "")
	}
	row("endpoints gone → /32 withdrawn in FRR", wd, "p50 < 100 ms, p99 < 300 ms")
	if bulk > 0 {
		fmt.Fprintf(&b, "| %d IPv6 prefixes: BGPPeer created → all in FRR | 1 | %s | | | < 5 s |\n", bulk, ms(bulkFromPeer))
		est := ms(bulkFromEst)
		if bulkFromEst == 0 {
			est = "within one poll of vtysh"
		}
		fmt.Fprintf(&b, "| %d IPv6 prefixes: session Established → all in FRR | 1 | %s | | | |\n", bulk, est)
		fmt.Fprintf(&b, "| %d IPv6 Services created (%d writers) until the speaker decided on all (before the peer) | 1 | %s | | | |\n", bulk, workers, ms(digest))
		fmt.Fprintf(&b, "| speaker RSS with %d Services: before the peer / peak (VmHWM) | | %s / %s | | | |\n", bulk, rssBefore, hwm)
	}
	fmt.Println()
	fmt.Print(b.String())
	if ft != "" {
		fmt.Println()
		fmt.Print(ft)
	}
	if record != "" {
		if err := recordSection(record, b.String()); err != nil {
			return err
		}
		if ft != "" {
			return recordFailover(record, ft)
		}
	}
	return nil
}

// peer is an eBGP BGPPeer from every node to the router address addr.
func peer(name string, addr netip.Addr) *v1beta2.BGPPeer {
	return &v1beta2.BGPPeer{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: lab.HeraldNamespace},
		Spec: v1beta2.BGPPeerSpec{MyASN: lab.NodeASN, PeerASN: lab.RouterASN, PeerAddress: addr.String(),
			ConnectTime: &metav1.Duration{Duration: time.Second}},
	}
}

// createService creates a single-stack LoadBalancer Service asking for addr.
func createService(ctx context.Context, cs kubernetes.Interface, name, pool string, addr netip.Addr, fam corev1.IPFamily) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNS,
			Annotations: map[string]string{poolAnno: pool, ipsAnno: addr.String()}},
		Spec: corev1.ServiceSpec{
			Type:                          corev1.ServiceTypeLoadBalancer,
			AllocateLoadBalancerNodePorts: ptr.To(false),
			IPFamilies:                    []corev1.IPFamily{fam},
			IPFamilyPolicy:                ptr.To(corev1.IPFamilyPolicySingleStack),
			Ports:                         []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(80), Protocol: corev1.ProtocolTCP}},
		},
	}
	_, err := cs.CoreV1().Services(benchNS).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create service %s: %w", name, err)
	}
	return nil
}

// bulkServices creates n IPv6 Services (2001:db8:203::1:0 + i) with a
// ready endpoint on the node, with several writers.
func bulkServices(ctx context.Context, cs kubernetes.Interface, n, workers int, limit time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var created atomic.Int64
	base := lab.BGPPrefixV6.Addr().As16()
	base[13] = 1
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				a := base
				a[14], a[15] = byte(i>>8), byte(i)
				name := fmt.Sprintf("bulk-%d", i)
				_, err := createSlice(ctx, cs, name, discoveryv1.AddressTypeIPv6, lab.NodeAddrV6(1))
				if err == nil || apierrors.IsAlreadyExists(err) {
					err = createService(ctx, cs, name, "bench-v6", netip.AddrFrom16(a), corev1.IPv6Protocol)
				}
				if err != nil && !apierrors.IsAlreadyExists(err) {
					if ctx.Err() == nil {
						errs[w] = err
					}
					return
				}
				created.Add(1)
			}
		})
	}
	wg.Wait()
	return int(created.Load()), errors.Join(errs...)
}

// createSlice creates the EndpointSlice of Service name (which need not
// exist yet) with one ready endpoint on the lab node at addr (lab
// scaffolding: plays the EndpointSlice controller).
func createSlice(ctx context.Context, cs kubernetes.Interface, name string, at discoveryv1.AddressType, addr netip.Addr) (*discoveryv1.EndpointSlice, error) {
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: lab.EndpointSliceName(name, at), Namespace: benchNS,
			Labels: map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: lab.ManagedByValue}},
		AddressType: at,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](80)}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{addr.String()}, NodeName: ptr.To(node),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}}},
	}
	out, err := cs.DiscoveryV1().EndpointSlices(benchNS).Create(ctx, slice, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create endpointslice of %s: %w", name, err)
	}
	return out, nil
}

// waitAllocated waits until n Services of the namespace prefixed "bulk-"
// have their address.
func waitAllocated(ctx context.Context, cs kubernetes.Interface, n int) error {
	_, err := poll.Wait(ctx, 10*time.Minute, "", reached(func() (bool, error) {
		list, err := cs.CoreV1().Services(benchNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		got := 0
		for _, s := range list.Items {
			if strings.HasPrefix(s.Name, "bulk-") && len(s.Status.LoadBalancer.Ingress) > 0 {
				got++
			}
		}
		return got >= n, nil
	}), poll.Every(time.Second))
	return err
}

func waitEstablished(ctx context.Context, l *lab.Lab, fam, addr string) error {
	_, err := poll.Wait(ctx, time.Minute, "", reached(func() (bool, error) {
		s, err := l.BGPSummary(ctx)
		if err != nil {
			return false, err
		}
		return s[fam].Peers[addr].State == "Established", nil
	}), poll.Every(100*time.Millisecond))
	return err
}

// reached turns fn, which reports whether the awaited state is reached,
// into a poll condition whose error (for the timeout) is fn's last error.
func reached(fn func() (bool, error)) func() error {
	return func() error {
		ok, err := fn()
		if err == nil && ok {
			return nil
		}
		return fmt.Errorf("not reached (last error %v)", err)
	}
}

// routeWatch timestamps kernel route changes in the router namespace, which
// is where FRR's zebra installs the BGP best paths.
type routeWatch struct {
	done   chan struct{}
	mu     sync.Mutex
	events map[string][]routeEvent // by destination prefix
	notify chan struct{}
}

type routeEvent struct {
	typ uint16
	at  time.Time
}

func watchRoutes(ns string) (*routeWatch, error) {
	h, err := netns.GetFromPath(filepath.Join("/var/run/netns", ns))
	if err != nil {
		return nil, fmt.Errorf("router namespace: %w", err)
	}
	ch := make(chan netlink.RouteUpdate, 1024)
	w := &routeWatch{done: make(chan struct{}), events: map[string][]routeEvent{}, notify: make(chan struct{}, 1)}
	if err := netlink.RouteSubscribeWithOptions(ch, w.done, netlink.RouteSubscribeOptions{
		Namespace: &h, ReceiveBufferSize: 1 << 20,
		ErrorCallback: func(err error) { fmt.Fprintln(os.Stderr, "netlink:", err) },
	}); err != nil {
		h.Close()
		return nil, fmt.Errorf("route subscribe: %w", err)
	}
	go func() {
		defer h.Close()
		for u := range ch {
			if u.Dst == nil {
				continue
			}
			now := time.Now()
			w.mu.Lock()
			k := u.Dst.String()
			w.events[k] = append(w.events[k], routeEvent{typ: u.Type, at: now})
			w.mu.Unlock()
			select {
			case w.notify <- struct{}{}:
			default:
			}
		}
	}()
	return w, nil
}

// wait returns the time of the first event of type typ for addr's host
// route that is not consumed yet.
func (w *routeWatch) wait(ctx context.Context, addr netip.Addr, typ uint16, timeout time.Duration) (time.Time, error) {
	key := (&net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(addr.BitLen(), addr.BitLen())}).String()
	deadline := time.After(timeout)
	for {
		w.mu.Lock()
		evs := w.events[key]
		for i, e := range evs {
			if e.typ == typ {
				w.events[key] = evs[i+1:]
				w.mu.Unlock()
				return e.at, nil
			}
		}
		w.mu.Unlock()
		select {
		case <-w.notify:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			return time.Time{}, fmt.Errorf("no route event %d for %s within %s", typ, key, timeout)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

func (w *routeWatch) close() { close(w.done) }

// reset forgets the events seen so far for addr's host route.
func (w *routeWatch) reset(addr netip.Addr) {
	key := (&net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(addr.BitLen(), addr.BitLen())}).String()
	w.mu.Lock()
	delete(w.events, key)
	w.mu.Unlock()
}

// procStatus returns one field of /proc/<pid>/status ("VmHWM" -> "52340 kB").
func procStatus(pid int, field string) string {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "?"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && k == field {
			var kb int
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err == nil {
				return fmt.Sprintf("%.0f MiB", float64(kb)/1024)
			}
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func frrVersion(ctx context.Context, l *lab.Lab) string {
	out, err := l.Vtysh(ctx, "show version")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "FRRouting ") {
			f := strings.Fields(line)
			if len(f) > 1 {
				return f[1]
			}
		}
	}
	return "?"
}

func pct(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p+99)/100 - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// pctOf returns the p-th percentile of unsorted durations.
func pctOf(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return pct(s, p)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// sectionIntro explains the method above the table in docs/performance.md.
const sectionIntro = `Measured with ` + "`make bench-bgp`" + ` (e2e/cmd/bench-bgp) in the lab against
the lab's real FRR router (Debian frr, AS 64500). One node runs a speaker.

- **Service created → /32 installed**: from the Service's Create call (its
  ready EndpointSlice is written just before, so the Service has ready
  endpoints from its first moment) until FRR's zebra installs the /32 in the router's
  kernel table, seen as a netlink RTM_NEWROUTE event in the router
  namespace. The path covers the controller's allocation, the speaker's
  decision, gobgp's UPDATE, FRR's best-path and zebra's install. Services
  are created one at a time, each asking for a known address.
- **endpoints gone → withdrawn**: from emptying the Service's endpoints
  until the /32 leaves the router's kernel table (RTM_DELROUTE).
- **bulk prefixes** (` + "`-bulk`" + `, 10,000 by default): that many single-stack
  IPv6 Services with endpoints exist first, and the speaker has decided on
  all of them (its log has one "announcing" line per Service); then the IPv6 BGPPeer is created, and FRR's
  ` + "`show bgp summary json`" + ` is polled every 20 ms until it counts them all
  received. RSS is the speaker's /proc/<pid>/status (VmRSS before the peer,
  VmHWM after).

The machine is shared: other work ran on the same two cores during the
measurement, so the figures are noisy and include CPU waiting time.

`

// recordSection replaces the "## BGP" section of the Markdown file path
// (up to the next "## " heading) with the figures, or appends it; the
// other sections are left as they are.
func recordSection(path, table string) error {
	return lab.ReplaceSection(path, "## BGP", "# Performance", sectionIntro+table)
}

// loadAvg returns the 1-minute load average ("?" if unknown).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}

// ingressWatch timestamps, per Service name, the first time a watch sees
// the Service with an address in status.loadBalancer.ingress.
type ingressWatch struct {
	mu    sync.Mutex
	first map[string]time.Time
}

func watchIngress(ctx context.Context, cs kubernetes.Interface) (*ingressWatch, error) {
	w, err := cs.CoreV1().Services(benchNS).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("watch services: %w", err)
	}
	iw := &ingressWatch{first: map[string]time.Time{}}
	go func() {
		for ev := range w.ResultChan() {
			svc, ok := ev.Object.(*corev1.Service)
			if !ok || len(svc.Status.LoadBalancer.Ingress) == 0 {
				continue
			}
			now := time.Now()
			iw.mu.Lock()
			if _, seen := iw.first[svc.Name]; !seen {
				iw.first[svc.Name] = now
			}
			iw.mu.Unlock()
		}
	}()
	return iw, nil
}

// seen returns when Service name was first seen with an address.
func (iw *ingressWatch) seen(name string) (time.Time, bool) {
	iw.mu.Lock()
	defer iw.mu.Unlock()
	t, ok := iw.first[name]
	return t, ok
}

// countDecided counts the distinct bulk Services the speaker's log reports
// as announcing.
func countDecided(logPath string) (int, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `"msg":"announcing"`) {
			continue
		}
		if _, rest, ok := strings.Cut(line, `"service":"`+benchNS+`/bulk-`); ok {
			if name, _, ok := strings.Cut(rest, `"`); ok {
				seen[name] = true
			}
		}
	}
	return len(seen), sc.Err()
}

package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/herald-lb/herald/internal/poll"
)

// Summary describes the running lab for humans: namespaces, addresses,
// processes, and how to reach the API server and the router.
func (l *Lab) Summary() string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintf(&b, "Herald lab %q (state in %s)\n\n", l.cfg.Prefix, l.cfg.StateDir)
	fmt.Fprintln(w, "NAMESPACE\tROLE\tADDRESSES")
	fmt.Fprintf(w, "%s\tswitch (bridge br0)\t-\n", l.SwitchNamespace())
	fmt.Fprintf(w, "%s\tetcd + kube-apiserver\t%s\n", l.ControlNamespace(), APIServerURL())
	fmt.Fprintf(w, "%s\tFRR router, AS %d\t%s %s\n", l.RouterNamespace(), RouterASN, RouterAddr, RouterAddrV6)
	for _, n := range l.Nodes {
		fmt.Fprintf(w, "%s\tnode %s (backend :%d)\t%s %s %s\n", n.Namespace, n.Name, BackendPort, n.IPv4, n.IPv6, n.MAC)
	}
	fmt.Fprintf(w, "%s\tclient\t%s %s\n", l.ClientNamespace(), ClientAddr, ClientAddrV6)
	w.Flush()
	fmt.Fprintf(&b, "\nService addresses: L2 %s, %s; BGP %s, %s (routed by the client via the router)\n",
		L2RangeV4, L2RangeV6, BGPPrefixV4, BGPPrefixV6)
	fmt.Fprintf(&b, "Speakers peer with %s / %s (the router is AS %d and accepts sessions from any ASN, e.g. myASN %d).\n\n",
		RouterAddr, RouterAddrV6, RouterASN, NodeASN)
	fmt.Fprintln(&b, "Processes:")
	l.mu.Lock()
	var names []string
	for n := range l.procs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := l.procs[n]
		state := "running"
		if !p.Alive() {
			state = "EXITED"
		}
		ns := p.Namespace
		if ns == "" {
			ns = "(root)"
		}
		fmt.Fprintf(&b, "  %-16s pid %-7d %-8s %-14s %s\n", n, p.PID, state, ns, p.Log)
	}
	l.mu.Unlock()
	fmt.Fprintln(&b, "\nkubectl:")
	k, kerr := KubectlPath()
	if kerr != nil {
		fmt.Fprintf(&b, "  %v\n", kerr)
		k = "kubectl"
	} else if onPath, err := exec.LookPath("kubectl"); err != nil || !sameFile(onPath, k) {
		fmt.Fprintf(&b, "  export PATH=%s:$PATH    # the lab's kubectl first on PATH\n", filepath.Dir(k))
	}
	if hk := l.HostKubeconfig(); hk != "" {
		fmt.Fprintf(&b, "  export KUBECONFIG=%s    # via a loopback proxy in the root namespace\n", hk)
	}
	// The commands name this lab's state directory and prefix: with the
	// defaults left out they would reach (or remove) another lab.
	fmt.Fprintf(&b, "  HERALD_LAB_DIR=%s hack/lab.sh kubectl get nodes    # = ip netns exec %s %s --kubeconfig %s ...\n",
		l.StateDir(), l.ControlNamespace(), k, l.LabKubeconfig())
	fmt.Fprintf(&b, "Router: vtysh -N %s -c 'show bgp summary'\n", l.RouterNamespace())
	fmt.Fprintf(&b, "Client: ip netns exec %s curl http://<service IP>/   (answers node=<name>)\n", l.ClientNamespace())
	fmt.Fprintf(&b, "Stop:   hack/lab.sh down --prefix %s --state-dir %s\n", l.Prefix(), l.StateDir())
	return b.String()
}

// Check reports what of the lab works: each namespace exists, each process
// runs, the API server is ready and vtysh answers. It returns one line per
// problem; none means healthy.
func (l *Lab) Check(ctx context.Context) []string {
	var probs []string
	for _, n := range l.st.Namespaces {
		if !NamespaceExists(n) {
			probs = append(probs, "namespace "+n+" is missing")
		}
	}
	l.mu.Lock()
	for n, p := range l.procs {
		if !p.Alive() {
			probs = append(probs, fmt.Sprintf("process %s (pid %d) is not running, see %s", n, p.PID, p.Log))
		}
	}
	l.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if hc, err := rest.HTTPClientFor(l.RESTConfig()); err != nil {
		probs = append(probs, "api server: "+err.Error())
	} else {
		req, _ := http.NewRequestWithContext(cctx, http.MethodGet, APIServerURL()+"/readyz", nil)
		resp, err := hc.Do(req)
		if err != nil {
			probs = append(probs, "api server: "+err.Error())
		} else {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				probs = append(probs, fmt.Sprintf("api server: %s %s", resp.Status, body))
			}
		}
		hc.CloseIdleConnections()
	}
	if _, err := l.Vtysh(cctx, "show bgp summary json"); err != nil {
		probs = append(probs, "router: "+err.Error())
	}
	return probs
}

// DemoSamples are the sample files `make lab` applies (disjoint pools: the
// layer 2 pool "dual-stack" on the segment, the BGP pool "public").
var DemoSamples = []string{"manifests/samples/dual-stack.yaml", "manifests/samples/bgp.yaml"}

// DemoNamespace holds the demo Services of `make lab`.
const DemoNamespace = "demo"

// demoBGPPassword is the TCP-MD5 password of manifests/samples/bgp.yaml's
// Secret; the router is told the same for its node peer groups.
const demoBGPPassword = "change-me"

// DemoService is one Service `make lab` creates.
type DemoService struct {
	Name string
	// What it shows, for the summary.
	What string
	// Families is how many addresses it gets (2 for dual stack).
	Families int
	svc      *corev1.Service
}

// DemoServices returns the Services CreateDemoServices creates.
func DemoServices() []DemoService {
	svc := func(name, pool string, port int32, proto corev1.Protocol, ann map[string]string) *corev1.Service {
		a := map[string]string{"metallb.io/address-pool": pool}
		for k, v := range ann {
			a[k] = v
		}
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: DemoNamespace, Annotations: a},
			Spec: corev1.ServiceSpec{
				Type:     corev1.ServiceTypeLoadBalancer,
				Selector: map[string]string{"app": "web"},
				Ports:    []corev1.ServicePort{{Name: "web", Port: port, Protocol: proto, TargetPort: intstr.FromInt32(int32(BackendPort))}},
			},
		}
	}
	dual := svc("web-dual", "dual-stack", 80, corev1.ProtocolTCP, nil)
	dual.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
	dual.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	share := map[string]string{"metallb.io/allow-shared-ip": "web", "metallb.io/loadBalancerIPs": "198.51.100.210"}
	return []DemoService{
		{Name: "web-l2", What: "layer 2 (ARP)", Families: 1, svc: svc("web-l2", "dual-stack", 80, corev1.ProtocolTCP, nil)},
		{Name: "web-bgp", What: "BGP", Families: 1, svc: svc("web-bgp", "public", 80, corev1.ProtocolTCP, nil)},
		{Name: "web-dual", What: "dual stack, layer 2 (ARP + NDP)", Families: 2, svc: dual},
		{Name: "shared-tcp", What: "shares its IP with shared-udp", Families: 1, svc: svc("shared-tcp", "dual-stack", 80, corev1.ProtocolTCP, share)},
		{Name: "shared-udp", What: "shares its IP with shared-tcp", Families: 1, svc: svc("shared-udp", "dual-stack", 80, corev1.ProtocolUDP, share)},
	}
}

// CreateDemoServices creates `make lab`'s demo Services in DemoNamespace
// (an L2 one, a BGP one, a dual-stack one, two sharing an IP), each with a
// ready endpoint on every node, tells the router the BGP sample's TCP-MD5
// password, and waits until every Service has its addresses.
func (h *Herald) CreateDemoServices(ctx context.Context) ([]DemoService, error) {
	l := h.lab
	if _, err := l.Vtysh(ctx, "configure terminal", fmt.Sprintf("router bgp %d", RouterASN),
		"neighbor NODES password "+demoBGPPassword, "neighbor NODES6 password "+demoBGPPassword); err != nil {
		return nil, fmt.Errorf("router password: %w", err)
	}
	if err := l.EnsureNamespace(ctx, DemoNamespace); err != nil {
		return nil, err
	}
	var eps []Endpoint
	for _, n := range l.Nodes {
		eps = append(eps, Endpoint{Node: n.Name, Ready: true})
	}
	demos := DemoServices()
	for _, d := range demos {
		if _, err := l.Client().CoreV1().Services(DemoNamespace).Create(ctx, d.svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create service %s: %w", d.Name, err)
		}
		if err := l.SetEndpoints(ctx, DemoNamespace, d.Name, eps); err != nil {
			return nil, err
		}
	}
	for _, d := range demos {
		ips, err := h.WaitServiceIPs(ctx, DemoNamespace, d.Name, d.Families)
		if err != nil {
			return demos, err
		}
		for _, ip := range ips {
			if err := l.AcceptLocal(ctx, ip); err != nil {
				return demos, err
			}
		}
	}
	return demos, nil
}

// ServicesSummary describes each demo Service for humans: its addresses,
// which node announces each and how (ServiceL2Status / ServiceBGPStatus,
// and who answers the client's ARP or NDP), the router's BGP paths for it,
// and the client's request to it with the node that answered. Requests and
// routes are retried for up to settle, so that fresh announcements can land.
// failed counts the checks that did not pass (no address, a failed request, an
// unanswered ARP/NDP, a missing BGP route), so callers can exit non-zero.
func (h *Herald) ServicesSummary(ctx context.Context, demos []DemoService, settle time.Duration) (summary string, failed int) {
	l := h.lab
	var b strings.Builder
	fmt.Fprintf(&b, "Services (namespace %s; kubectl -n %s get svc):\n", DemoNamespace, DemoNamespace)
	fmt.Fprintf(&b, "(The router's peer groups require the TCP-MD5 password %q, the Secret of manifests/samples/bgp.yaml:\n a BGPPeer of your own needs passwordSecret or password to establish.)\n", demoBGPPassword)
	for _, d := range demos {
		ips, err := h.ServiceIPs(ctx, DemoNamespace, d.Name)
		fmt.Fprintf(&b, "\n  %s — %s\n", d.Name, d.What)
		if err != nil || len(ips) == 0 {
			why := "pending: kubectl -n " + DemoNamespace + " describe svc " + d.Name
			if err != nil {
				why = err.Error()
			}
			fmt.Fprintf(&b, "    no address (%s)\n", why)
			failed++
			continue
		}
		var lines []string
		add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
		port := int(d.svc.Spec.Ports[0].Port)
		for _, ip := range ips {
			add("    %s", ip)
			onSegment := Segment.Contains(ip) || SegmentV6.Contains(ip)
			if d.svc.Spec.Ports[0].Protocol == corev1.ProtocolTCP {
				var reply BackendReply
				_, err := poll.Wait(ctx, settle, "", func() error {
					var err error
					reply, err = l.Get(ctx, l.ClientNamespace(), ip, port)
					return err
				}, labEvery)
				if err != nil {
					add("      client curl http://%s/: FAILED: %v", netip.AddrPortFrom(ip, uint16(port)), err)
					failed++
				} else {
					add("      client curl http://%s/: answered by node %s", netip.AddrPortFrom(ip, uint16(port)), reply.Node)
				}
			} else {
				add("      client curl: (UDP port, see the TCP Service on the same IP)")
			}
			if onSegment {
				proto := "ARP"
				if ip.Is6() {
					proto = "NDP"
				}
				if who, err := l.Resolve(ctx, ip); err != nil {
					add("      client %s: no answer (%v)", proto, err)
					failed++
				} else {
					add("      client %s: answered by %s", proto, who)
				}
			}
			var hops []string
			_, _ = poll.Wait(ctx, settle, "", func() error {
				hops = h.routeHops(ctx, ip)
				if len(hops) == 0 && !onSegment {
					return errors.New("no route yet")
				}
				return nil
			}, labEvery)
			switch {
			case len(hops) > 0:
				add("      FRR route: %s via %s", netip.PrefixFrom(ip, ip.BitLen()), strings.Join(hops, ", "))
			case onSegment:
				add("      FRR route: none (on the segment: layer 2, no BGP)")
			default:
				add("      FRR route: NONE (want one: not on the segment)")
				failed++
			}
		}
		fmt.Fprintf(&b, "    announced by: %s\n", strings.Join(h.announcers(ctx, d.Name), "; "))
		b.WriteString(strings.Join(lines, "\n") + "\n")
	}
	return b.String(), failed
}

// announcers describes the ServiceL2Status and ServiceBGPStatus objects of
// demo Service name.
func (h *Herald) announcers(ctx context.Context, name string) []string {
	var out []string
	if st, err := h.L2Statuses(ctx, DemoNamespace, name); err == nil {
		for _, s := range st {
			var ifs []string
			for _, i := range s.Status.Interfaces {
				ifs = append(ifs, i.Name)
			}
			out = append(out, fmt.Sprintf("%s layer 2 on %s", s.Status.Node, strings.Join(ifs, ",")))
		}
	}
	if st, err := h.BGPStatuses(ctx, DemoNamespace, name); err == nil {
		for _, s := range st {
			out = append(out, fmt.Sprintf("%s BGP to %s", s.Status.Node, strings.Join(s.Status.Peers, ",")))
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		out = []string{"nobody (no ServiceL2Status or ServiceBGPStatus)"}
	}
	return out
}

// routeHops returns the router's best and multipath next hops for ip's
// host prefix, named by node where they are node addresses.
func (h *Herald) routeHops(ctx context.Context, ip netip.Addr) []string {
	fam := "ipv4"
	if ip.Is6() {
		fam = "ipv6"
	}
	routes, err := h.lab.BGPRoutes(ctx, fam)
	if err != nil {
		return nil
	}
	var hops []string
	for _, p := range routes[netip.PrefixFrom(ip, ip.BitLen()).String()] {
		if !p.Best && !p.Multipath {
			continue
		}
		for _, nh := range p.NextHops {
			hop := nh.IP
			if a, err := netip.ParseAddr(nh.IP); err == nil {
				for _, n := range h.lab.Nodes {
					if n.IPv4 == a || n.IPv6 == a {
						hop = n.Name + " (" + nh.IP + ")"
					}
				}
			}
			hops = append(hops, hop)
		}
	}
	sort.Strings(hops)
	return hops
}

// sameFile reports whether paths a and b name the same existing file.
func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

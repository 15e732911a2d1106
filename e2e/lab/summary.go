package lab

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/client-go/rest"
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
	fmt.Fprintf(&b, "Speakers peer with %s / %s (AS %d, any other ASN accepted, e.g. %d).\n\n",
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
	if hk := l.HostKubeconfig(); hk != "" {
		fmt.Fprintf(&b, "  export KUBECONFIG=%s    # via a loopback proxy in the root namespace\n", hk)
	}
	fmt.Fprintf(&b, "  hack/lab.sh kubectl get nodes                   # = ip netns exec %s kubectl --kubeconfig %s ...\n",
		l.ControlNamespace(), l.LabKubeconfig())
	fmt.Fprintf(&b, "Router: vtysh -N %s -c 'show bgp summary'\n", l.RouterNamespace())
	fmt.Fprintf(&b, "Client: ip netns exec %s curl http://<service IP>/   (answers node=<name>)\n", l.ClientNamespace())
	fmt.Fprintln(&b, "Stop:   make lab-down   (or hack/lab.sh down)")
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

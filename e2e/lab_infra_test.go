package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/herald-lb/herald/e2e/lab"
	"github.com/herald-lb/herald/internal/poll"
)

// TestLabInfra brings up a lab with a unique prefix and checks each of its
// parts through the paths Herald will use: the API server (from the root
// namespace through the control namespace, and from a node namespace with
// kubectl and a ServiceAccount token), FRR (vtysh, a real BGP session from
// an FRR peer on a node, and the client's traffic routed over the learned
// route), layer 2 (ARP and NDP from the client), the lab scaffolding
// objects; then Down leaves no namespace, process or FRR directory behind.
func TestLabInfra(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up network namespaces, FRR and an API server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stateDir := t.TempDir()
	l := lab.UpForTest(t, lab.Config{StateDir: stateDir})
	c := l.Client()

	t.Run("apiserver", func(t *testing.T) {
		if err := l.RegisterNodes(ctx, map[string]map[string]string{"n2": {"zone": "b"}}); err != nil {
			t.Fatal(err)
		}
		nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, n := range nodes.Items {
			names = append(names, n.Name)
			want := l.Nodes[slices.IndexFunc(l.Nodes, func(x lab.Node) bool { return x.Name == n.Name })]
			if got := internalIPs(n); !slices.Equal(got, []string{want.IPv4.String(), want.IPv6.String()}) {
				t.Errorf("node %s InternalIPs = %v, want %s and %s", n.Name, got, want.IPv4, want.IPv6)
			}
			if !nodeReady(n) {
				t.Errorf("node %s is not Ready", n.Name)
			}
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"n1", "n2", "n3"}) {
			t.Fatalf("nodes = %v, want n1 n2 n3", names)
		}
		zoned, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "zone=b"})
		if err != nil || len(zoned.Items) != 1 || zoned.Items[0].Name != "n2" {
			t.Errorf("nodes with zone=b: %v, %v; want n2", zoned, err)
		}
		if err := l.SetNodeReady(ctx, "n3", false); err != nil {
			t.Fatal(err)
		}
		n3, err := c.CoreV1().Nodes().Get(ctx, "n3", metav1.GetOptions{})
		if err != nil || nodeReady(*n3) {
			t.Errorf("n3 after SetNodeReady(false): ready=%v err=%v", err == nil && nodeReady(*n3), err)
		}
	})

	t.Run("scaffolding", func(t *testing.T) {
		const ns = "herald-system"
		if err := l.EnsureNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
		if err := l.EnsureServiceAccount(ctx, ns, "speaker"); err != nil {
			t.Fatal(err)
		}
		if _, err := l.CreateSpeakerPods(ctx, ns, "speaker"); err != nil {
			t.Fatal(err)
		}
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{
			LabelSelector: labels.SelectorFromSet(lab.SpeakerPodLabels).String()})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) != len(l.Nodes) {
			t.Fatalf("speaker pods = %d, want %d", len(pods.Items), len(l.Nodes))
		}
		for _, p := range pods.Items {
			n, ok := l.Node(p.Spec.NodeName)
			if !ok || p.Status.Phase != corev1.PodRunning || p.Status.PodIP != n.IPv4.String() {
				t.Errorf("pod %s: node %q phase %s podIP %s, want Running on a lab node with its address",
					p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.PodIP)
			}
		}
		if err := l.EnsureNamespace(ctx, "demo"); err != nil {
			t.Fatal(err)
		}
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "demo"},
			Spec: corev1.ServiceSpec{
				Type:                          corev1.ServiceTypeLoadBalancer,
				AllocateLoadBalancerNodePorts: new(bool),
				IPFamilyPolicy:                ptr.To(corev1.IPFamilyPolicyPreferDualStack),
				Ports:                         []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(80), Protocol: corev1.ProtocolTCP}},
			},
		}
		if _, err := c.CoreV1().Services("demo").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eps := []lab.Endpoint{{Node: "n1", Ready: true}, {Node: "n2", Ready: false}}
		if err := l.SetEndpoints(ctx, "demo", "web", eps); err != nil {
			t.Fatal(err)
		}
		// A second call replaces the endpoints.
		eps = append(eps, lab.Endpoint{Node: "n3", Ready: true, Terminating: true})
		if err := l.SetEndpoints(ctx, "demo", "web", eps); err != nil {
			t.Fatal(err)
		}
		slicesList, err := c.DiscoveryV1().EndpointSlices("demo").List(ctx, metav1.ListOptions{
			LabelSelector: discoveryv1.LabelServiceName + "=web"})
		if err != nil {
			t.Fatal(err)
		}
		if len(slicesList.Items) != 2 {
			t.Fatalf("endpoint slices = %d, want one per family (2)", len(slicesList.Items))
		}
		for _, s := range slicesList.Items {
			if len(s.Endpoints) != 3 {
				t.Errorf("slice %s: %d endpoints, want 3", s.Name, len(s.Endpoints))
				continue
			}
			for i, want := range []bool{true, false, false} {
				e := s.Endpoints[i]
				a := netip.MustParseAddr(e.Addresses[0])
				if *e.Conditions.Ready != want || (a.Is6() != (s.AddressType == discoveryv1.AddressTypeIPv6)) {
					t.Errorf("slice %s endpoint %s on %s: ready=%v, want %v", s.Name, a, *e.NodeName, *e.Conditions.Ready, want)
				}
			}
		}
	})

	t.Run("node-reaches-apiserver", func(t *testing.T) {
		kubectl, err := lab.KubectlPath()
		if err != nil {
			t.Fatal(err)
		}
		out, err := l.Exec(ctx, l.Nodes[1].Namespace, kubectl, "--kubeconfig", l.LabKubeconfig(), "get", "nodes", "-o", "name")
		if err != nil || !strings.Contains(out, "node/n1") {
			t.Fatalf("kubectl get nodes from %s: %q, %v", l.Nodes[1].Namespace, out, err)
		}
		// A ServiceAccount token authenticates, and RBAC applies: the speaker
		// account has no role here, so listing nodes is forbidden.
		kc, err := l.ServiceAccountKubeconfig(ctx, "herald-system", "speaker")
		if err != nil {
			t.Fatal(err)
		}
		out, err = l.Exec(ctx, l.Nodes[2].Namespace, kubectl, "--kubeconfig", kc, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
		if err != nil || strings.TrimSpace(out) != "system:serviceaccount:herald-system:speaker" {
			t.Errorf("whoami with the speaker token: %q, %v", out, err)
		}
		out, err = l.Exec(ctx, l.Nodes[2].Namespace, kubectl, "--kubeconfig", kc, "get", "nodes")
		if err == nil || !strings.Contains(out, "forbidden") {
			t.Errorf("speaker token without RBAC lists nodes: %q, %v; want forbidden", out, err)
		}
	})

	t.Run("pod-processes", func(t *testing.T) {
		kubectl, err := lab.KubectlPath()
		if err != nil {
			t.Fatal(err)
		}
		// A DaemonSet as Herald's manifests have one; the lab creates its
		// pods and runs the container as a process in each node namespace.
		ds := &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "herald-system"},
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "probe"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "probe"}},
					Spec: corev1.PodSpec{
						HostNetwork:        true,
						ServiceAccountName: "speaker",
						Containers: []corev1.Container{{
							Name: "probe", Image: "example.invalid/probe",
							Command: []string{"/probe", "-c"},
							Args: []string{`echo "node=$(NODE_NAME) ip=$POD_IP"; ip -o -4 addr show dev eth0; cat /etc/probe/greeting; ` +
								`"$KUBECTL" --kubeconfig "$KUBECONFIG" auth whoami -o jsonpath='{.status.userInfo.username}'; echo; exec sleep 300`},
							Ports:        []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
							VolumeMounts: []corev1.VolumeMount{{Name: "cfg", MountPath: "/etc/probe"}},
							Env: []corev1.EnvVar{
								{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
								{Name: "KUBECTL", Value: kubectl},
								{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
							},
						}},
						Volumes: []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{
							ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "probe"}}}}},
					},
				},
			},
		}
		if _, err := c.AppsV1().DaemonSets("herald-system").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CoreV1().ConfigMaps("herald-system").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "herald-system"},
			Data:       map[string]string{"greeting": "hello-from-configmap"},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pods, err := l.CreateDaemonSetPods(ctx, "herald-system", "probe")
		if err != nil {
			t.Fatal(err)
		}
		if len(pods) != len(l.Nodes) {
			t.Fatalf("%d pods, want %d", len(pods), len(l.Nodes))
		}
		n2 := l.Nodes[1]
		pod := pods[1]
		p, err := l.StartPod(ctx, pod, "probe", "/bin/sh")
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"node=n2 ip=" + n2.IPv4.String(), "inet " + n2.IPv4.String() + "/24",
			"hello-from-configmap", "system:serviceaccount:herald-system:speaker"}
		poll.Until(t, 20*time.Second, "the speaker's log", func() error {
			b, err := os.ReadFile(p.Log)
			if err != nil {
				return err
			}
			for _, w := range want {
				if !strings.Contains(string(b), w) {
					return errors.New("log lacks " + w + ":\n" + string(b))
				}
			}
			return nil
		})
		// A Service selecting the pods by a named port gets slices with the
		// pods' addresses and the resolved port.
		if _, err := c.CoreV1().Services("herald-system").Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "herald-system"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "probe"},
				Ports: []corev1.ServicePort{{Name: "web", Port: 443, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := l.SetPodEndpoints(ctx, "herald-system", "probe", pods); err != nil {
			t.Fatal(err)
		}
		v4, err := c.DiscoveryV1().EndpointSlices("herald-system").Get(ctx, lab.EndpointSliceName("probe", discoveryv1.AddressTypeIPv4), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(v4.Ports) != 1 || *v4.Ports[0].Port != 8080 || len(v4.Endpoints) != len(l.Nodes) ||
			v4.Endpoints[1].Addresses[0] != n2.IPv4.String() || v4.Endpoints[1].TargetRef.Name != pod.Name {
			t.Errorf("probe slice: ports %v endpoints %v; want port 8080 and one endpoint per pod", v4.Ports, v4.Endpoints)
		}
		if err := l.StopProcess(pod.Name); err != nil {
			t.Error(err)
		}
		if p.Alive() {
			t.Errorf("pod process %s alive after StopProcess", pod.Name)
		}
	})

	t.Run("bgp", func(t *testing.T) {
		out, err := l.Vtysh(ctx, "show running-config")
		if err != nil || !strings.Contains(out, "router bgp 64500") || !strings.Contains(out, "bgp listen range 198.51.100.0/24") {
			t.Fatalf("router config: %v\n%s", err, out)
		}
		// A reference speaker: FRR on n1 announces a Service prefix.
		n1 := l.Nodes[0]
		svcIP := netip.MustParseAddr("203.0.113.7")
		err = l.StartNodeFRR(ctx, n1.Name, announcerFRR(n1, 64512, svcIP))
		if err != nil {
			t.Fatal(err)
		}
		var peer lab.BGPPeer
		poll.Until(t, 30*time.Second, "BGP session from n1", func() error {
			s, err := l.BGPSummary(ctx)
			if err != nil {
				return err
			}
			peer = s["ipv4Unicast"].Peers[n1.IPv4.String()]
			if peer.State != "Established" || peer.PfxRcd != 1 {
				return errors.New("session from n1 not established with 1 prefix: " + peer.State)
			}
			return nil
		})
		if peer.RemoteAS != 64512 || !peer.DynamicPeer {
			t.Errorf("peer n1: remote AS %d dynamic %v, want 64512 and a dynamic neighbor", peer.RemoteAS, peer.DynamicPeer)
		}
		routes, err := l.BGPRoutes(ctx, "ipv4")
		if err != nil {
			t.Fatal(err)
		}
		paths := routes[svcIP.String()+"/32"]
		if len(paths) != 1 || len(paths[0].NextHops) != 1 || paths[0].NextHops[0].IP != n1.IPv4.String() {
			t.Fatalf("router's paths for %s: %+v, want one via %s", svcIP, paths, n1.IPv4)
		}
		// The client reaches the Service IP through the router, which
		// installed the BGP route; n1's backend answers.
		var reply lab.BackendReply
		poll.Until(t, 10*time.Second, "client to "+svcIP.String(), func() error {
			var err error
			if reply, err = l.Get(ctx, l.ClientNamespace(), svcIP, lab.BackendPort); err != nil {
				kr, _ := l.KernelRoutes(ctx, "-4")
				return fmt.Errorf("%w\nrouter kernel routes:\n%s", err, kr)
			}
			return nil
		})
		if reply.Node != "n1" || reply.Client != lab.ClientAddr.String() {
			t.Errorf("reply from %s = %+v, want node n1 seeing client %s", svcIP, reply, lab.ClientAddr)
		}

		// A second announcer from another AS: the router spreads flows over
		// both (maximum-paths, as-path multipath-relax, L4 hashing).
		n2 := l.Nodes[1]
		err = l.StartNodeFRR(ctx, n2.Name, announcerFRR(n2, 64513, svcIP))
		if err != nil {
			t.Fatal(err)
		}
		poll.Until(t, 30*time.Second, "ECMP route", func() error {
			kr, err := l.KernelRoutes(ctx, "-4")
			if err != nil {
				return err
			}
			if !strings.Contains(kr, "via "+n1.IPv4.String()) || !strings.Contains(kr, "via "+n2.IPv4.String()) {
				return errors.New("no ECMP route via n1 and n2:\n" + kr)
			}
			return nil
		})
		seen := map[string]int{}
		for range 40 {
			r, err := l.Get(ctx, l.ClientNamespace(), svcIP, lab.BackendPort)
			if err != nil {
				t.Fatal(err)
			}
			seen[r.Node]++
		}
		if seen["n1"] == 0 || seen["n2"] == 0 || len(seen) != 2 {
			t.Errorf("40 connections over ECMP reached %v, want both n1 and n2", seen)
		}
	})

	t.Run("layer2", func(t *testing.T) {
		n2, n3 := l.Nodes[1], l.Nodes[2]
		mac, err := l.Arping(ctx, n2.IPv4)
		if err != nil || mac.String() != n2.MAC.String() {
			t.Errorf("arping %s = %v, %v; want %s", n2.IPv4, mac, err, n2.MAC)
		}
		mac, err = l.NeighborSolicit(ctx, n3.IPv6)
		if err != nil || mac.String() != n3.MAC.String() {
			t.Errorf("ndisc6 %s = %v, %v; want %s", n3.IPv6, mac, err, n3.MAC)
		}
		// No node kernel answers for an L2 Service address: that is the
		// speakers' job (the nodes only accept it as local).
		l2 := lab.L2RangeV4.First
		if mac, err := l.Arping(ctx, l2); err == nil {
			t.Errorf("arping %s answered by %s with no speaker running", l2, mac)
		}
		l2v6 := lab.L2RangeV6.First
		if mac, err := l.NeighborSolicit(ctx, l2v6); err == nil {
			t.Errorf("ndisc6 %s answered by %s with no speaker running", l2v6, mac)
		}
		// With a neighbor entry in place (what an announcement gives), the
		// node the entry points to serves the Service address.
		if _, err := l.Exec(ctx, l.ClientNamespace(), "ip", "neigh", "replace", l2.String(), "lladdr", n3.MAC.String(), "dev", "eth0"); err != nil {
			t.Fatal(err)
		}
		reply, err := l.Get(ctx, l.ClientNamespace(), l2, lab.BackendPort)
		if err != nil || reply.Node != "n3" {
			t.Errorf("get %s via n3's MAC = %+v, %v; want node n3", l2, reply, err)
		}
	})

	t.Run("root-namespace-untouched", func(t *testing.T) {
		out, err := l.Exec(ctx, "", "ip", "-o", "addr", "show")
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"198.51.100.", "203.0.113.", "2001:db8:"} {
			if strings.Contains(out, bad) {
				t.Errorf("root namespace has a lab address (%s):\n%s", bad, out)
			}
		}
	})

	// Down removes everything; record what must go first.
	var pids []int
	for _, name := range []string{"etcd", "kube-apiserver", "frr-zebra", "frr-bgpd", "frr-bgpd-n1", "frr-zebra-n2", "backend-n1"} {
		p := l.Process(name)
		if p == nil {
			t.Fatalf("no lab process %s", name)
		}
		pids = append(pids, p.PID)
	}
	if err := l.Down(); err != nil {
		t.Fatalf("down: %v", err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("pid %d still exists after Down (kill 0: %v)", pid, err)
		}
	}
	out, _ := l.Exec(ctx, "", "ip", "netns", "list")
	if strings.Contains(out, l.Prefix()+"-") {
		t.Errorf("namespaces left after Down:\n%s", out)
	}
	for _, d := range []string{"/etc/frr", "/var/run/frr"} {
		for _, ns := range []string{"rtr", "n1"} {
			if _, err := os.Stat(filepath.Join(d, l.Prefix()+"-"+ns)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s/%s-%s left after Down (%v)", d, l.Prefix(), ns, err)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(stateDir, "state.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state.json left after Down (%v)", err)
	}
	if left := lab.Leftovers(stateDir); len(left) > 0 {
		t.Errorf("files left after Down besides logs and binaries: %q", left)
	}
}

// TestLabUpCleansLeftovers plays a crash: a lab is left running, and a
// second Up with the same prefix and state directory (a second `make lab`)
// removes the leftovers first and comes up.
func TestLabUpCleansLeftovers(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up network namespaces, FRR and an API server")
	}
	cfg := lab.Config{Prefix: lab.RandomPrefix(), Nodes: 1, StateDir: t.TempDir()}
	first := lab.UpForTest(t, cfg)
	old := first.Process("kube-apiserver").PID
	cfg.LoopbackProxy = true // as `make lab` runs it
	second := lab.UpForTest(t, cfg)
	if err := syscall.Kill(old, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("first lab's kube-apiserver (pid %d) survives the second Up (kill 0: %v)", old, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := second.Client().CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Errorf("second lab's API server: %v", err)
	}
	// The host kubeconfig reaches the API server from the root namespace
	// through the loopback proxy, as plain kubectl would.
	hostCfg, err := clientcmd.BuildConfigFromFlags("", second.HostKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(hostCfg.Host, "https://127.0.0.1:") {
		t.Errorf("host kubeconfig server %s, want the loopback proxy", hostCfg.Host)
	}
	hc, err := kubernetes.NewForConfig(hostCfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hc.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Errorf("API server through the loopback proxy: %v", err)
	}
	proxyPID := second.Process(lab.ProxyProcessName).PID
	// Cleanup from the state directory alone, as `herald-lab down` does.
	if err := lab.Cleanup(cfg.StateDir, ""); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(proxyPID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("loopback proxy (pid %d) survives Cleanup (kill 0: %v)", proxyPID, err)
	}
	if lab.NamespaceExists(cfg.Prefix + "-ctl") {
		t.Errorf("namespace %s-ctl left after Cleanup", cfg.Prefix)
	}
}

func internalIPs(n corev1.Node) []string {
	var out []string
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			out = append(out, a.Address)
		}
	}
	return out
}

func nodeReady(n corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// announcerFRR is the FRR configuration of a node that announces svc/32 to
// the lab router from AS asn: a reference BGP speaker that is not Herald.
func announcerFRR(n lab.Node, asn int, svc netip.Addr) string {
	return fmt.Sprintf(`frr defaults traditional
hostname %s
router bgp %d
 bgp router-id %s
 no bgp ebgp-requires-policy
 no bgp network import-check
 neighbor %s remote-as 64500
 address-family ipv4 unicast
  network %s/32
 exit-address-family
`, n.Namespace, asn, n.IPv4, lab.RouterAddr, svc)
}

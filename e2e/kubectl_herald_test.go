package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/e2e/lab"
	"github.com/herald-lb/herald/internal/explain"
	"github.com/herald-lb/herald/internal/poll"
)

const pluginNS = "plugin"

// TestKubectlHerald is the plugin as a new user meets it: kubectl-herald
// is put on PATH and run as `kubectl herald` against a lab with Herald
// installed, a healthy Service and demo Services broken in the ways
// docs/troubleshooting.md documents. For each, `kubectl herald why` exits 1
// and names the cause:
//
//   - no matching pool: the only pool's serviceAllocation serves another
//     namespace (NoPoolMatches, and the pool's WHY-NOT names the namespace);
//   - pool full: every address of the pool is taken (PoolExhausted);
//   - node selector matching no node: the pool's L2Advertisement selects a
//     hostname no node has (noMatchingAdvertisement on every node);
//   - externalTrafficPolicy Local without endpoints (noLocalEndpoints on
//     every node).
//
// The healthy Service exits 0 once the speakers' ServiceL2Status agrees
// with the computed winner: the plugin's computation and the real speakers
// agree on who wins the election.
func TestKubectlHerald(t *testing.T) {
	e := newEnv(t, 3, lab.InstallOptions{})
	dir := pluginDir(t)
	e.namespace(t, pluginNS, nil)
	e.namespace(t, pluginNS+"-other", nil)
	p := pool("plugin", "198.51.100.60-198.51.100.62")
	p.Spec.ServiceAllocation = &v1beta1.ServiceAllocation{Namespaces: []string{pluginNS}}
	e.put(t, p)
	e.put(t, l2adv("plugin", "plugin"))
	sel := pool("plugin-sel", "198.51.100.63/32")
	sel.Spec.AutoAssign = new(bool)
	e.put(t, sel)
	nowhere := l2adv("plugin-sel", "plugin-sel")
	nowhere.Spec.NodeSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"kubernetes.io/hostname": "no-such-node"}}}
	e.put(t, nowhere)
	if err := e.h.WaitConfigValid(testCtx(t, 2*time.Minute), "controller"); err != nil {
		t.Fatal(err)
	}

	e.createService(t, lbService(pluginNS, "healthy"), e.allNodes()...)
	e.ips(t, pluginNS, "healthy", 1)
	poll.Until(t, 2*time.Minute, "kubectl herald why svc/healthy exits 0", func() error {
		r, code, out := runWhy(t, e, dir, pluginNS, "healthy")
		if code != 0 {
			return fmt.Errorf("exit %d: problems %q\n%s", code, r.Problems, out)
		}
		return nil
	})

	local := lbService(pluginNS, "local-no-endpoints")
	local.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	e.createService(t, local)
	e.ips(t, pluginNS, local.Name, 1)
	e.createService(t, lbService(pluginNS, "filler"), e.allNodes()...)
	e.ips(t, pluginNS, "filler", 1)
	e.createService(t, lbService(pluginNS, "selector-no-node", withAnnotation("metallb.io/address-pool", "plugin-sel")), e.allNodes()...)
	e.ips(t, pluginNS, "selector-no-node", 1)
	e.createService(t, lbService(pluginNS, "pool-full"), e.allNodes()...)
	e.createService(t, lbService(pluginNS+"-other", "no-matching-pool"), e.allNodes()...)

	nodes := strings.Join(e.allNodes(), ",")
	for _, tc := range []struct {
		ns, name string
		// cause must be in a problem; reason in the table.
		cause, reason string
	}{
		{pluginNS + "-other", "no-matching-pool", "no pool may serve the Service", `namespace "plugin-other" is not in serviceAllocation.namespaces [plugin]`},
		{pluginNS, "pool-full", "every candidate pool is full", `address pool "plugin" has no free IPv4 address`},
		{pluginNS, "selector-no-node", "no node announces it in layer 2 (noMatchingAdvertisement on " + nodes + ")", "noMatchingAdvertisement"},
		{pluginNS, "local-no-endpoints", "no node announces it in layer 2 (noLocalEndpoints on " + nodes + ")", "noLocalEndpoints"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var last string
			poll.Until(t, time.Minute, "kubectl herald why svc/"+tc.name+" names the cause", func() error {
				r, code, out := runWhy(t, e, dir, tc.ns, tc.name)
				last = out
				if code != 1 {
					return fmt.Errorf("exit %d, want 1", code)
				}
				if !strings.Contains(strings.Join(r.Problems, "\n"), tc.cause) {
					return fmt.Errorf("problems %q do not name %q", r.Problems, tc.cause)
				}
				return nil
			})
			table, code := runPlugin(t, e, dir, "why", "svc/"+tc.name, "-n", tc.ns)
			if code != 1 || !strings.Contains(table, tc.reason) {
				t.Errorf("table (exit %d) does not name %q:\n%s\n(json: %s)", code, tc.reason, table, last)
			}
			t.Logf("kubectl herald why svc/%s -n %s:\n%s", tc.name, tc.ns, table)
		})
	}

	t.Run("BGP", func(t *testing.T) { testPluginBGP(t, e, dir) })
	t.Run("EveryReason", func(t *testing.T) { testPluginReasons(t, e, dir) })

	out, code := runPlugin(t, e, dir, "pools")
	if code != 1 || !strings.Contains(out, "plugin-other/no-matching-pool") || !strings.Contains(out, "plugin/pool-full") {
		t.Errorf("pools (exit %d):\n%s", code, out)
	}
	out, code = runPlugin(t, e, dir, "config")
	if code != 0 || !strings.Contains(out, "controller") || !strings.Contains(out, "Valid") {
		t.Errorf("config (exit %d):\n%s", code, out)
	}
}

// pluginDir returns a directory holding kubectl-herald: $HERALD_LAB_BIN_DIR
// when `make build` put it there, else one built now.
func pluginDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv(lab.BinDirEnv); d != "" {
		if _, err := os.Stat(filepath.Join(d, "kubectl-herald")); err == nil {
			return d
		}
	}
	d := t.TempDir()
	cmd := exec.Command("go", "build", "-o", d, "./kubectl-herald")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build kubectl-herald: %v\n%s", err, out)
	}
	return d
}

// runPlugin runs `kubectl herald args...` in the lab's control namespace
// with dir first on PATH (kubectl finds the plugin there) and returns its
// standard output and exit status.
func runPlugin(t *testing.T, e *env, dir string, args ...string) (string, int) {
	t.Helper()
	k, err := lab.KubectlPath()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// kubectl dispatches to a plugin only when its name comes first: the
	// flags follow it (kubectl passes them on).
	argv := append([]string{"netns", "exec", e.l.ControlNamespace(), k, "herald", "--kubeconfig", e.l.LabKubeconfig(),
		"--herald-namespace", lab.HeraldNamespace}, args...)
	cmd := exec.CommandContext(ctx, "ip", argv...)
	cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		if ee.ExitCode() == 2 {
			t.Fatalf("kubectl herald %v: exit 2: %s", args, stderr.String())
		}
		if len(out) == 0 {
			t.Fatalf("kubectl herald %v: exit %d without output: %s", args, ee.ExitCode(), stderr.String())
		}
		return string(out), ee.ExitCode()
	}
	t.Fatalf("kubectl herald %v: %v: %s", args, err, stderr.String())
	return "", -1
}

func runWhy(t *testing.T, e *env, dir, ns, name string) (*explain.WhyReport, int, string) {
	t.Helper()
	out, code := runPlugin(t, e, dir, "why", "svc/"+name, "-n", ns, "-o", "json")
	var r explain.WhyReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("why -o json: %v\n%s", err, out)
	}
	return &r, code, out
}

// testPluginBGP: with real sessions to the lab's FRR router, `kubectl
// herald why` shows every node's path with the advertisement's community
// and the peer, and exits 0 once the speakers' ServiceBGPStatus objects
// agree; `kubectl herald peers` shows every node's session Established
// (from the speakers' sessionEstablished events) and exits 0.
func testPluginBGP(t *testing.T, e *env, dir string) {
	e.put(t, &v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "plugin-ebgp", Namespace: lab.HeraldNamespace},
		Spec: v1beta2.BGPPeerSpec{MyASN: lab.NodeASN, PeerASN: lab.RouterASN, PeerAddress: lab.RouterAddr.String(),
			HoldTime: &metav1.Duration{Duration: 9 * time.Second}, ConnectTime: &metav1.Duration{Duration: time.Second}}})
	bp := pool("plugin-bgp", "203.0.113.16/30")
	bp.Spec.AutoAssign = new(bool)
	e.put(t, bp)
	e.put(t, &v1beta1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "plugin-bgp", Namespace: lab.HeraldNamespace},
		Spec: v1beta1.BGPAdvertisementSpec{IPAddressPools: []string{"plugin-bgp"}, Communities: []string{"64500:100"}}})
	e.createService(t, lbService(pluginNS, "bgp", withAnnotation("metallb.io/address-pool", "plugin-bgp")), e.allNodes()...)
	ip := e.ips(t, pluginNS, "bgp", 1)[0]

	var r *explain.WhyReport
	poll.Until(t, 2*time.Minute, "kubectl herald why svc/bgp exits 0", func() error {
		var code int
		r, code, _ = runWhy(t, e, dir, pluginNS, "bgp")
		if code != 0 {
			return fmt.Errorf("exit %d: problems %q", code, r.Problems)
		}
		return nil
	})
	if len(r.IPs) != 1 || r.IPs[0].BGP == nil || r.IPs[0].L2 != nil {
		t.Fatalf("modes: %+v", r.IPs)
	}
	paths := r.IPs[0].BGP.Paths
	if len(paths) != len(e.allNodes()) {
		t.Fatalf("paths %+v, want one per node", paths)
	}
	for _, p := range paths {
		if p.Prefix != ip.String()+"/32" || strings.Join(p.Communities, ",") != "64500:100" || strings.Join(p.Peers, ",") != "plugin-ebgp" || p.LocalPref != nil {
			t.Errorf("path %+v", p)
		}
	}
	poll.Until(t, 2*time.Minute, "kubectl herald peers: every session Established", func() error {
		out, code := runPlugin(t, e, dir, "peers", "-o", "json")
		var pr explain.PeersReport
		if err := json.Unmarshal([]byte(out), &pr); err != nil {
			return err
		}
		if code != 0 || len(pr.Sessions) != len(e.allNodes()) {
			return fmt.Errorf("exit %d, %d sessions, problems %q", code, len(pr.Sessions), pr.Problems)
		}
		for _, s := range pr.Sessions {
			if s.State != "Established" || s.Peer != "plugin-ebgp" || s.Services != 1 {
				return fmt.Errorf("session %+v", s)
			}
		}
		return nil
	})
	table, _ := runPlugin(t, e, dir, "peers")
	t.Logf("kubectl herald peers:\n%s", table)
}

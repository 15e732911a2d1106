package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/e2e/lab"
	"github.com/herald-lb/herald/internal/poll"
)

// BFD intervals of the failover measurement (the BFDProfile and FRR's
// "bfd profile"), in milliseconds, and the detect multiplier.
const (
	bfdIntervalMS = 300
	bfdMult       = 3
	bfdProfile    = "bench-fast"
)

// failover holds the failover rounds: link cut -> FRR has withdrawn the
// node's /32 (its kernel route deleted), with BGP alone and with BFD.
type failover struct {
	hold, keepalive time.Duration
	noBFD, withBFD  []time.Duration
}

// measureFailover cuts node's switch port rounds times with BGP alone (the
// peer's hold time decides, RFC 4271 §6.5) and rounds times with BFD
// (RFC 5880, single hop RFC 5881; bfdIntervalMS x bfdMult on both sides),
// each time from the `ip link set ... down` call until the router's kernel
// drops the route to the Service's /32 (RTM_DELROUTE: FRR's bgpd withdrew
// the node's only path and zebra deleted it). After each round the link is
// restored and the next round starts once the session (and BFD) are up
// again and the route is back. peerName is the node's BGPPeer to the
// router's IPv4 address.
func measureFailover(ctx context.Context, l *lab.Lab, h *lab.Herald, c client.Client, cs kubernetes.Interface, peerName string, rounds int, f *failover) (err error) {
	routes, err := watchRoutes(l.RouterNamespace())
	if err != nil {
		return err
	}
	defer routes.close()
	ip := lab.BGPPrefixV4.Addr().As4()
	ip[3] = 250
	addr := netip.AddrFrom4(ip)
	name := "bfd-failover"
	if _, err := createSlice(ctx, cs, name, discoveryv1.AddressTypeIPv4, lab.NodeAddr(1)); err != nil {
		return err
	}
	if err := createService(ctx, cs, name, "bench-v4", addr, corev1.IPv4Protocol); err != nil {
		return err
	}
	if _, err := routes.wait(ctx, addr, unix.RTM_NEWROUTE, time.Minute); err != nil {
		return fmt.Errorf("failover: announce %s: %w\n%s", addr, err, h.Logs(30))
	}
	cut := false
	defer func() {
		if cut {
			if rerr := h.RestoreLink(context.Background(), node); rerr != nil && err == nil {
				err = rerr
			}
		}
	}()
	round := func(withBFD bool) (time.Duration, error) {
		// Ready: session Established (and BFD Up), the /32 in the kernel.
		if _, err := poll.Wait(ctx, 3*time.Minute, "", reached(func() (bool, error) {
			return failoverReady(ctx, l, addr, withBFD)
		}), poll.Every(100*time.Millisecond)); err != nil {
			return 0, fmt.Errorf("failover: before the cut: %w\n%s", err, h.Logs(30))
		}
		routes.reset(addr)
		t0 := time.Now()
		if err := h.CutLink(ctx, node); err != nil {
			return 0, err
		}
		cut = true
		at, err := routes.wait(ctx, addr, unix.RTM_DELROUTE, 3*f.hold+time.Minute)
		if err != nil {
			return 0, fmt.Errorf("failover: withdraw after the cut: %w", err)
		}
		if err := h.RestoreLink(ctx, node); err != nil {
			return 0, err
		}
		cut = false
		return at.Sub(t0), nil
	}
	for i := range rounds {
		d, err := round(false)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "failover without BFD, round %d: %s\n", i+1, ms(d))
		f.noBFD = append(f.noBFD, d)
	}

	// BFD on both sides: the router's peer group and Herald's BGPPeer.
	if err := c.Create(ctx, &v1beta1.BFDProfile{ObjectMeta: metav1.ObjectMeta{Name: bfdProfile, Namespace: lab.HeraldNamespace},
		Spec: v1beta1.BFDProfileSpec{ReceiveInterval: ptr.To[uint32](bfdIntervalMS), TransmitInterval: ptr.To[uint32](bfdIntervalMS),
			DetectMultiplier: ptr.To[uint32](bfdMult)}}); err != nil {
		return fmt.Errorf("create BFDProfile: %w", err)
	}
	if out, err := l.Vtysh(ctx, "configure terminal", "bfd", "profile fast",
		fmt.Sprintf("receive-interval %d", bfdIntervalMS), fmt.Sprintf("transmit-interval %d", bfdIntervalMS),
		fmt.Sprintf("detect-multiplier %d", bfdMult), "exit", "exit",
		fmt.Sprintf("router bgp %d", lab.RouterASN), "neighbor NODES bfd", "neighbor NODES bfd profile fast"); err != nil {
		return fmt.Errorf("vtysh: %w: %s", err, out)
	}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var p v1beta2.BGPPeer
		if err := c.Get(ctx, client.ObjectKey{Namespace: lab.HeraldNamespace, Name: peerName}, &p); err != nil {
			return err
		}
		p.Spec.BFDProfile = bfdProfile
		return c.Update(ctx, &p)
	}); err != nil {
		return fmt.Errorf("BGPPeer %s with bfdProfile: %w", peerName, err)
	}
	for i := range rounds {
		d, err := round(true)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "failover with BFD, round %d: %s\n", i+1, ms(d))
		f.withBFD = append(f.withBFD, d)
	}
	return nil
}

// failoverReady reports whether the router has the node's IPv4 session
// Established, its kernel the route to addr, and (withBFD) its BFD session
// to the node Up with Herald's intervals.
func failoverReady(ctx context.Context, l *lab.Lab, addr netip.Addr, withBFD bool) (bool, error) {
	n1 := lab.NodeAddr(1).String()
	s, err := l.BGPSummary(ctx)
	if err != nil {
		return false, err
	}
	if st := s["ipv4Unicast"].Peers[n1].State; st != "Established" {
		return false, fmt.Errorf("router's session to %s: %q", n1, st)
	}
	rt, err := l.KernelRoutes(ctx, "-4")
	if err != nil {
		return false, err
	}
	if !slices.ContainsFunc(strings.Split(rt, "\n"), func(line string) bool { return strings.HasPrefix(line, addr.String()+" ") }) {
		return false, fmt.Errorf("no kernel route to %s in the router", addr)
	}
	if !withBFD {
		return true, nil
	}
	out, err := l.Vtysh(ctx, "show bfd peers json")
	if err != nil {
		return false, fmt.Errorf("show bfd peers: %w: %s", err, out)
	}
	var ps []struct {
		Peer          string `json:"peer"`
		Status        string `json:"status"`
		RemoteReceive int    `json:"remote-receive-interval"`
	}
	if err := json.Unmarshal([]byte(out), &ps); err != nil {
		return false, fmt.Errorf("show bfd peers: %w: %s", err, out)
	}
	for _, p := range ps {
		if p.Peer == n1 {
			if p.Status != "up" || p.RemoteReceive != bfdIntervalMS {
				return false, fmt.Errorf("router's BFD session to %s: %s, remote receive interval %d ms", n1, p.Status, p.RemoteReceive)
			}
			return true, nil
		}
	}
	return false, fmt.Errorf("router has no BFD session to %s", n1)
}

// median returns the median of d (the mean of the middle two for an even
// count).
func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// failoverTable renders the failover figures: the machine (date -u,
// uname -srm, nproc), one row per variant with median and max, and the
// ratio of the medians.
func failoverTable(f failover, frr string) string {
	var b strings.Builder
	var u unix.Utsname
	uname := "?"
	if unix.Uname(&u) == nil {
		uname = unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:]) + " " + unix.ByteSliceToString(u.Machine[:])
	}
	fmt.Fprintf(&b, "Measured %s on %s, %d CPUs shared with other work (load average at the end %s), lab with 1 node, FRR %s.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), uname, runtime.NumCPU(), loadAvg(), frr)
	fmt.Fprintf(&b, "| Link cut → node's /32 withdrawn by FRR | rounds | median | max |\n|---|---|---|---|\n")
	row := func(name string, d []time.Duration) {
		fmt.Fprintf(&b, "| %s | %d | %s | %s |\n", name, len(d), ms(median(d)), ms(slices.Max(d)))
	}
	row(fmt.Sprintf("BGP alone (hold time %s, keepalive %s)", f.hold, f.keepalive), f.noBFD)
	row(fmt.Sprintf("BFD %d ms × %d", bfdIntervalMS, bfdMult), f.withBFD)
	fmt.Fprintf(&b, "\nRatio of the medians, BGP alone / BFD: %.1f×.\n", float64(median(f.noBFD))/float64(median(f.withBFD)))
	return b.String()
}

// failoverIntro explains the failover method above its table.
const failoverIntro = `Measured with ` + "`make bench-bgp`" + ` (e2e/cmd/bench-bgp, ` + "`-failover-rounds`" + `) in the
lab against its FRR router: one node announces a Service's /32 over eBGP
with the hold time below; its switch port is cut (` + "`ip link set v-n1 down`" + ` in
the switch namespace, the node's own interface stays up, as with a broken
cable or switch port), and the time runs from that call until the route
leaves the router's kernel table (netlink RTM_DELROUTE: bgpd withdrew the
node's only path, zebra deleted it). The link is restored between rounds;
each round starts with the session Established (and BFD Up) and the route
installed. Without BFD, FRR notices when the hold timer expires (RFC 4271
§6.5: between hold − keepalive and hold after the cut); with BFD (RFC 5880,
single hop RFC 5881, ` + "`bfdProfile`" + ` on the BGPPeer and ` + "`neighbor ... bfd profile`" + ` on
FRR, both 300 ms × 3) when no control packet arrived for 3 × 300 ms, so
600 to 900 ms after the cut (the last packet that got through left up to one
interval before it) plus bgpd's and zebra's work.

`

// recordFailover replaces the "## BGP failover with BFD" section of path.
func recordFailover(path, table string) error {
	return lab.ReplaceSection(path, "## BGP failover with BFD", "# Performance", failoverIntro+table)
}

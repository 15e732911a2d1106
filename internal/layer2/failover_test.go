package layer2

import (
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/herald-lb/herald/internal/poll"
)

// TestRealGracefulFailover runs two announcers, in node namespaces A and B,
// and a client, all on one Linux bridge. The client talks to the Service IP
// through A; then A withdraws and B announces (a graceful failover as the
// speaker glue performs it) and the test measures how long the client's
// neighbour cache takes to point at B. It logs the numbers and asserts only
// that the switch happens.
func TestRealGracefulFailover(t *testing.T) {
	t.Parallel()
	l := newLab(t) // client namespace, checks and cleanup helpers
	p := l.node[:len(l.node)-2]
	sw, nodeA, nodeB := p+"-sw", p+"-a", p+"-b"
	for _, ns := range []string{sw, nodeA, nodeB} {
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	}
	run(t, "ip", "-n", sw, "link", "add", "br0", "type", "bridge")
	run(t, "ip", "-n", sw, "link", "set", "br0", "up")
	// The client keeps its eth0 from newLab: move its peer (in the old node
	// namespace) onto the bridge.
	run(t, "ip", "-n", l.node, "link", "set", "eth0", "netns", sw)
	run(t, "ip", "-n", sw, "link", "set", "eth0", "name", "pc")
	macs := map[string]string{}
	for i, ns := range []string{nodeA, nodeB} {
		port := fmt.Sprintf("p%d", i)
		run(t, "ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", sw)
		run(t, "ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.eth0.accept_dad=0")
		run(t, "ip", "-n", ns, "addr", "add", fmt.Sprintf("198.51.100.%d/24", 11+i), "dev", "eth0")
		run(t, "ip", "-n", ns, "link", "set", "eth0", "up")
		h, err := netlink.NewHandleAt(mustNS(t, ns))
		if err != nil {
			t.Fatal(err)
		}
		macs[ns] = l.eth0(t, h).MAC.String()
		h.Close()
	}
	for _, port := range []string{"pc", "p0", "p1"} {
		run(t, "ip", "-n", sw, "link", "set", port, "master", "br0", "up")
	}
	a, _ := startIn(t, nodeA, Options{})
	b, _ := startIn(t, nodeB, Options{})
	owner := map[string]*Announcer{nodeA: a, nodeB: b}

	for _, fam := range []struct {
		name, ping string
		base       string
	}{{"IPv4", "-4", "198.51.100.%d"}, {"IPv6", "-6", "2001:db8::%x"}} {
		var lat []time.Duration
		for i := range 6 {
			ip := netip.MustParseAddr(fmt.Sprintf(fam.base, 160+i))
			from, to := nodeA, nodeB
			if i%2 == 1 {
				from, to = nodeB, nodeA
			}
			setIPs(t, owner[from], "ns/svc", ip)
			waitActive(t, owner[from], ip, true)
			// Traffic makes the client resolve the IP to the current
			// announcer (the node drops the ping: it does not own the IP).
			_ = exec.Command("ip", "netns", "exec", l.client, "ping", fam.ping, "-c", "1", "-W", "0.2", ip.String()).Run()
			if got := l.clientNeigh(t, ip); got != macs[from] {
				t.Fatalf("%s: client resolved to %q, want %s's %s", ip, got, from, macs[from])
			}
			start := time.Now()
			setIPs(t, owner[from], "ns/svc")
			setIPs(t, owner[to], "ns/svc", ip)
			poll.Until(t, 5*time.Second, ip.String()+": client neighbour cache after failover", func() error {
				if got := l.clientNeigh(t, ip); got != macs[to] {
					return fmt.Errorf("%q, want %s's %s", got, to, macs[to])
				}
				return nil
			}, poll.Every(100*time.Microsecond))
			lat = append(lat, time.Since(start))
			if got := l.arpingOrNdisc(t, ip); got != macs[to] {
				t.Fatalf("%s: answered by %q after failover, want %s", ip, got, macs[to])
			}
			setIPs(t, owner[to], "ns/svc")
		}
		slices.Sort(lat)
		t.Logf("%s graceful failover (withdraw on old node + announce on new -> client cache on new MAC), %d runs: min %v, median %v, max %v",
			fam.name, len(lat), lat[0], lat[len(lat)/2], lat[len(lat)-1])
	}
}

func (l *lab) arpingOrNdisc(t testing.TB, ip netip.Addr) string {
	if ip.Is4() {
		return l.arping(t, ip)
	}
	return l.ndisc6(t, ip)
}

func mustNS(t testing.TB, name string) netns.NsHandle {
	t.Helper()
	h, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/e2e/lab"
	"github.com/herald-lb/herald/internal/annotations"
	"github.com/herald-lb/herald/internal/poll"
)

// testWeightedECMP proves weighted ECMP by local endpoints (issue #14 §3,
// MetalLB issue #1): a BGPAdvertisement annotated herald.io/weighted-ecmp,
// a dual-stack externalTrafficPolicy Local Service with 1 endpoint on n1
// and 3 on n2. For each family (IPv4 over the ebgp4 sessions, IPv6 over
// ebgp6) FRR receives the link bandwidth community (1 and 3 Mbit/s, RFC
// 10005), installs the kernel route with next-hop weights 1:3, and the
// client's requests split accordingly (a broad band: the kernel hashes
// each new connection's 5-tuple). Then the endpoints move (3 on n1, 1 on
// n2): the weights of both prefixes follow and neither prefix leaves FRR's
// table meanwhile.
func (e *bgpEnv) testWeightedECMP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const name = "wecmp"
	bgpApply(ctx, t, e.c, &v1beta1.IPAddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: lab.HeraldNamespace},
		Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"203.0.113.176/28", "2001:db8:203::b0/124"},
			AutoAssign: ptr.To(false)},
	})
	bgpApply(ctx, t, e.c, &v1beta1.BGPAdvertisement{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: lab.HeraldNamespace,
			Annotations: map[string]string{annotations.WeightedECMP: "true"}},
		Spec: v1beta1.BGPAdvertisementSpec{IPAddressPools: []string{name}},
	})
	addrs := bgpCreateService(ctx, t, e.l, bgpSvcSpec{Namespace: bgpNS, Name: name, Pool: name, Local: true, DualStack: true})
	e.failDump(t, addrs...)
	setCounts := func(counts map[string]int) {
		t.Helper()
		var eps []lab.Endpoint
		for node, n := range counts {
			for range n {
				eps = append(eps, lab.Endpoint{Node: node, Ready: true})
			}
		}
		if err := e.l.SetEndpoints(ctx, bgpNS, name, eps); err != nil {
			t.Fatal(err)
		}
	}
	// nodeAddr is the session address of lab node i for vip's family
	// (FRR's peerId of its paths).
	nodeAddr := func(vip netip.Addr, i int) string {
		if vip.Is6() {
			return lab.NodeAddrV6(i).String()
		}
		return lab.NodeAddr(i).String()
	}
	wantBW := func(vip netip.Addr, n1, n2 uint64) func() error {
		return func() error {
			got, err := wecmpBandwidths(ctx, e.l, bgpHostPrefix(vip))
			if err != nil {
				return err
			}
			want := map[string]uint64{nodeAddr(vip, 1): n1 * 125000, nodeAddr(vip, 2): n2 * 125000}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("FRR has link bandwidths of %s (bytes/s by peer) %v, want %v", vip, got, want)
			}
			return nil
		}
	}
	// wantWeights waits until zebra installed vip's route with n2/n1 = ratio
	// (a moment after bgpd has the paths).
	wantWeights := func(vip netip.Addr, ratio float64) map[string]int {
		t.Helper()
		var weights map[string]int
		if _, err := poll.Wait(ctx, 30*time.Second, "", func() error {
			var err error
			weights, err = wecmpKernelWeights(ctx, e.l, bgpHostPrefix(vip))
			if err != nil {
				return err
			}
			return wecmpRatio(weights, ratio)
		}, bgpEvery); err != nil {
			t.Fatalf("%s: %v", vip, err)
		}
		return weights
	}

	setCounts(map[string]int{"n1": 1, "n2": 3})
	for _, vip := range addrs {
		peers := bgpV4Peers(1, 2)
		if vip.Is6() {
			peers = bgpV6Peers(1, 2)
		}
		if _, err := bgpWaitPrefix(ctx, e.l, bgpHostPrefix(vip), peers, time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := poll.Wait(ctx, time.Minute, "", wantBW(vip, 1, 3), bgpEvery); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: kernel next-hop weights %v", vip, wantWeights(vip, 3))

		counts := wecmpSplit(ctx, t, e.l, vip, 200)
		share := float64(counts["n2"]) / float64(counts["n1"]+counts["n2"])
		t.Logf("%s, 200 connections: %v (n2 share %.2f, weights 1:3 → 0.75, plain ECMP → 0.50)", vip, counts, share)
		// 200 independent hashes at p=0.75: σ ≈ 0.03. The band is ±5σ and
		// still excludes the plain-ECMP half.
		if share < 0.60 || share > 0.90 || counts["n1"] == 0 {
			t.Errorf("%s: n2 answered %.2f of the requests (%v), want about 0.75 (weights 1:3)", vip, share, counts)
		}
	}

	// The endpoints move: the weights follow as attribute changes; each
	// prefix stays in FRR's table from both nodes all along.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var gone []string
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			for _, vip := range addrs {
				paths, err := bgpFRRPrefix(ctx, e.l, bgpHostPrefix(vip))
				if err == nil && len(paths) != 2 {
					gone = append(gone, fmt.Sprintf("%s %s: from %v", time.Now().Format(time.StampMilli), vip, bgpPathPeers(paths)))
				}
			}
		}
	}()
	setCounts(map[string]int{"n1": 3, "n2": 1})
	var err error
	for _, vip := range addrs {
		if _, err = poll.Wait(ctx, time.Minute, "", wantBW(vip, 3, 1), bgpEvery); err != nil {
			break
		}
	}
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if len(gone) > 0 {
		t.Errorf("while the weights changed, FRR did not hold the prefixes from both nodes: %v", gone)
	}
	for _, vip := range addrs {
		wantWeights(vip, 1.0/3)
	}
}

// lbRE matches FRR's rendering of the link bandwidth community,
// "LB:<AS>:<bytes/s> (<n> Mbps)".
var lbRE = regexp.MustCompile(`LB:\d+:(\d+)`)

// wecmpBandwidths returns the link bandwidth (bytes/s) of each of FRR's
// paths for prefix, by peer address (0: no community).
func wecmpBandwidths(ctx context.Context, l *lab.Lab, prefix netip.Prefix) (map[string]uint64, error) {
	afi := "ipv4"
	if prefix.Addr().Is6() {
		afi = "ipv6"
	}
	out, err := l.Vtysh(ctx, fmt.Sprintf("show bgp %s unicast %s json", afi, prefix))
	if err != nil {
		return nil, err
	}
	var r struct {
		Paths []struct {
			ExtendedCommunity *struct {
				String string `json:"string"`
			} `json:"extendedCommunity"`
			Peer struct {
				PeerID string `json:"peerId"`
			} `json:"peer"`
		} `json:"paths"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return nil, fmt.Errorf("parse %s: %w", prefix, err)
	}
	got := map[string]uint64{}
	for _, p := range r.Paths {
		var bw uint64
		if p.ExtendedCommunity != nil {
			if m := lbRE.FindStringSubmatch(p.ExtendedCommunity.String); m != nil {
				bw, _ = strconv.ParseUint(m[1], 10, 64)
			}
		}
		got[p.Peer.PeerID] = bw
	}
	return got, nil
}

var nexthopRE = regexp.MustCompile(`nexthop via (\S+) .*?weight (\d+)`)

// wecmpKernelWeights returns the next-hop weights of the router's kernel
// route for prefix (`ip -4|-6 route show <prefix>` in its namespace), by
// node name ("n1"); a next hop that is no node's address is keyed by
// itself.
func wecmpKernelWeights(ctx context.Context, l *lab.Lab, prefix netip.Prefix) (map[string]int, error) {
	fam := "-4"
	if prefix.Addr().Is6() {
		fam = "-6"
	}
	out, err := l.Exec(ctx, l.RouterNamespace(), "ip", fam, "route", "show", prefix.String())
	if err != nil {
		return nil, err
	}
	w := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		m := nexthopRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		node := m[1]
		for _, n := range l.Nodes {
			if n.IPv4.String() == m[1] || n.IPv6.String() == m[1] {
				node = n.Name
			}
		}
		w[node], _ = strconv.Atoi(m[2])
	}
	if len(w) == 0 {
		return nil, fmt.Errorf("no weighted multipath route for %s in the router: %q", prefix, out)
	}
	return w, nil
}

// wecmpRatio checks that the kernel weights of n2 and n1 are in ratio
// want (n2/n1), to FRR's rounding (weights are percentages).
func wecmpRatio(w map[string]int, want float64) error {
	if len(w) != 2 || w["n1"] == 0 || w["n2"] == 0 {
		return fmt.Errorf("kernel next-hop weights %v, want n1 and n2", w)
	}
	if got := float64(w["n2"]) / float64(w["n1"]); got < want*0.9 || got > want*1.1 {
		return fmt.Errorf("kernel next-hop weights %v: n2/n1 = %.2f, want %.2f", w, got, want)
	}
	return nil
}

// wecmpSplit sends n requests to vip from the client, each on a new TCP
// connection, and counts which node answered. A request that fails is
// retried (a busy machine drops some), up to n failures in all.
func wecmpSplit(ctx context.Context, t *testing.T, l *lab.Lab, vip netip.Addr, n int) map[string]int {
	t.Helper()
	counts := map[string]int{}
	var failed []string
	for got := 0; got < n; {
		r, err := l.Get(ctx, l.ClientNamespace(), vip, lab.BackendPort)
		if err != nil {
			if failed = append(failed, err.Error()); len(failed) > n {
				t.Fatalf("%d requests failed (answered: %v), last: %v", len(failed), counts, err)
			}
			continue
		}
		counts[r.Node]++
		got++
	}
	if len(failed) > 0 {
		t.Logf("%d requests failed and were retried, first: %s", len(failed), failed[0])
	}
	return counts
}

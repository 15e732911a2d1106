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
// an externalTrafficPolicy Local Service with 1 endpoint on n1 and 3 on n2.
// FRR receives the link bandwidth community (1 and 3 Mbit/s, RFC 10005),
// installs the kernel route with next-hop weights 1:3, and the client's
// requests split accordingly (a broad band: the kernel hashes each new
// connection's 5-tuple). Then the endpoints move (3 on n1, 1 on n2): the
// weights follow and the prefix never leaves FRR's table meanwhile.
func (e *bgpEnv) testWeightedECMP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const name = "wecmp"
	bgpApply(ctx, t, e.c, &v1beta1.IPAddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: lab.HeraldNamespace},
		Spec:       v1beta1.IPAddressPoolSpec{Addresses: []string{"203.0.113.176/28"}, AutoAssign: ptr.To(false)},
	})
	bgpApply(ctx, t, e.c, &v1beta1.BGPAdvertisement{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: lab.HeraldNamespace,
			Annotations: map[string]string{annotations.WeightedECMP: "true"}},
		Spec: v1beta1.BGPAdvertisementSpec{IPAddressPools: []string{name}},
	})
	addrs := bgpCreateService(ctx, t, e.l, bgpSvcSpec{Namespace: bgpNS, Name: name, Pool: name, Local: true})
	e.failDump(t, addrs...)
	vip := addrs[0]
	prefix := bgpHostPrefix(vip)
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

	setCounts(map[string]int{"n1": 1, "n2": 3})
	if _, err := bgpWaitPrefix(ctx, e.l, prefix, bgpV4Peers(1, 2), time.Minute); err != nil {
		t.Fatal(err)
	}
	wantBW := func(n1, n2 uint64) func() error {
		return func() error {
			got, err := wecmpBandwidths(ctx, e.l, prefix)
			if err != nil {
				return err
			}
			want := map[string]uint64{lab.NodeAddr(1).String(): n1 * 125000, lab.NodeAddr(2).String(): n2 * 125000}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("FRR has link bandwidths (bytes/s by peer) %v, want %v", got, want)
			}
			return nil
		}
	}
	if _, err := poll.Wait(ctx, time.Minute, "", wantBW(1, 3), bgpEvery); err != nil {
		t.Fatal(err)
	}
	// zebra installs the route a moment after bgpd has the paths.
	var weights map[string]int
	if _, err := poll.Wait(ctx, 30*time.Second, "", func() error {
		var err error
		weights, err = wecmpKernelWeights(ctx, e.l, prefix)
		if err != nil {
			return err
		}
		return wecmpRatio(weights, 3)
	}, bgpEvery); err != nil {
		t.Fatal(err)
	}
	t.Logf("kernel next-hop weights %v", weights)

	counts := wecmpSplit(ctx, t, e.l, vip, 200)
	share := float64(counts["n2"]) / float64(counts["n1"]+counts["n2"])
	t.Logf("200 connections: %v (n2 share %.2f, weights 1:3 → 0.75, plain ECMP → 0.50)", counts, share)
	// 200 independent hashes at p=0.75: σ ≈ 0.03. The band is ±5σ and
	// still excludes the plain-ECMP half.
	if share < 0.60 || share > 0.90 || counts["n1"] == 0 {
		t.Errorf("n2 answered %.2f of the requests (%v), want about 0.75 (weights 1:3)", share, counts)
	}

	// The endpoints move: the weights follow as attribute changes; the
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
			paths, err := bgpFRRPrefix(ctx, e.l, prefix)
			if err == nil && len(paths) != 2 {
				gone = append(gone, fmt.Sprintf("%s: from %v", time.Now().Format(time.StampMilli), bgpPathPeers(paths)))
			}
		}
	}()
	setCounts(map[string]int{"n1": 3, "n2": 1})
	_, err := poll.Wait(ctx, time.Minute, "", wantBW(3, 1), bgpEvery)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if len(gone) > 0 {
		t.Errorf("while the weights changed, FRR did not hold the prefix from both nodes: %v", gone)
	}
	if _, err := poll.Wait(ctx, 30*time.Second, "", func() error {
		var err error
		weights, err = wecmpKernelWeights(ctx, e.l, prefix)
		if err != nil {
			return err
		}
		return wecmpRatio(weights, 1.0/3)
	}, bgpEvery); err != nil {
		t.Fatal(err)
	}
}

// lbRE matches FRR's rendering of the link bandwidth community,
// "LB:<AS>:<bytes/s> (<n> Mbps)".
var lbRE = regexp.MustCompile(`LB:\d+:(\d+)`)

// wecmpBandwidths returns the link bandwidth (bytes/s) of each of FRR's
// paths for prefix, by peer address (0: no community).
func wecmpBandwidths(ctx context.Context, l *lab.Lab, prefix netip.Prefix) (map[string]uint64, error) {
	out, err := l.Vtysh(ctx, fmt.Sprintf("show bgp ipv4 unicast %s json", prefix))
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
// route for prefix (`ip route show <prefix>` in its namespace), by node
// name ("n1").
func wecmpKernelWeights(ctx context.Context, l *lab.Lab, prefix netip.Prefix) (map[string]int, error) {
	out, err := l.Exec(ctx, l.RouterNamespace(), "ip", "-4", "route", "show", prefix.String())
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
			if n.IPv4.String() == m[1] {
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

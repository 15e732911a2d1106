// Command l2balance measures how evenly layer 2 addresses spread over nodes
// with the plain election (announce.Elect, rendezvous hashing) and the
// balanced one (announce.ElectBalanced, rendezvous hashing with bounded
// loads), and how many addresses move when one node fails, in the same run.
// It is pure (no cluster, no network) and prints a Markdown table for
// docs/performance.md ("Balanced layer 2 placement"). Run it with
// `make bench-l2balance`.
package main

import (
	"flag"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/herald-lb/herald/internal/announce"
)

func main() {
	failures := flag.Int("failures", 3, "nodes failed one at a time per trial (evenly spaced; all when fewer nodes)")
	trials := flag.Int("trials", 20, "node sets per row (node names differ between trials, so hashes do)")
	flag.Parse()
	fmt.Printf("%s; %s; %s CPUs\n\n", run("date", "-u"), run("uname", "-srm"), run("nproc"))
	fmt.Printf("%d node sets per row; max is the most addresses on one node, average over the sets / worst set; moved: addresses whose winner changes when one node fails (average over %d failures per set), in brackets those not on the failed node.\n\n", *trials, *failures)
	fmt.Println("| addresses | nodes | mean | plain max avg / worst | balanced max avg / worst | target | met | plain moved | balanced moved (not on the failed node) | balanced worst others | balanced election time |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|:--:|---:|---:|---:|---:|")
	for _, m := range []int{5, 50, 1000} {
		for _, n := range []int{3, 10, 100} {
			row(m, n, *trials, *failures)
		}
	}
	fmt.Printf("\nCoupling: addresses of other Services whose winner changes when one Service (one address) is added, or one of the m is removed (%d removals per set, evenly spaced), nothing else changing; average over the sets / worst. The plain election moves none.\n\n", *failures)
	fmt.Println("| addresses | nodes | balanced moved by an added address avg / worst | balanced moved by a removed address avg / worst |")
	fmt.Println("|---:|---:|---:|---:|")
	for _, m := range []int{5, 50, 1000} {
		for _, n := range []int{3, 10, 100} {
			churnRow(m, n, *trials, *failures)
		}
	}
}

// churnRow prints how many other addresses move when one address is added
// or removed (the balanced election's coupling; the plain one moves none).
func churnRow(m, n, trials, removals int) {
	var add, addWorst, del, delWorst, dels int
	for t := range trials {
		nodes := make([]string, n)
		for i := range nodes {
			nodes[i] = fmt.Sprintf("worker-%d-%03d", t, i)
		}
		ips := addresses(m + 1)
		ballots := func(ips []netip.Addr) []announce.Ballot {
			bs := make([]announce.Ballot, len(ips))
			for i, ip := range ips {
				bs[i].IP = ip
				for _, nd := range nodes {
					bs[i].Candidates = append(bs[i].Candidates, announce.Candidate{Node: nd, Serves: 1})
				}
			}
			return bs
		}
		elect := func(ips []netip.Addr) map[netip.Addr]string {
			out, err := announce.ElectBalanced(ballots(ips))
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			return out
		}
		base := elect(ips[:m])
		a := others(base, elect(ips))
		add += a
		addWorst = max(addWorst, a)
		step := max(1, m/removals)
		for i := 0; i < m && i/step < removals; i += step {
			rest := slices.Delete(slices.Clone(ips[:m]), i, i+1)
			d := others(base, elect(rest))
			del += d
			delWorst = max(delWorst, d)
			dels++
		}
	}
	fmt.Printf("| %d | %d | %.1f / %d | %.1f / %d |\n", m, n, float64(add)/float64(trials), addWorst, float64(del)/float64(dels), delWorst)
}

// others counts the addresses elected in both before and after whose
// winner changed.
func others(before, after map[netip.Addr]string) int {
	c := 0
	for ip, w := range before {
		if nw, ok := after[ip]; ok && nw != w {
			c++
		}
	}
	return c
}

// result is one trial of a row.
type result struct {
	pmax, bmax                     int
	pMoved, bMoved, bOthers, worst int
	runs                           int
	took                           time.Duration
}

func row(m, n, trials, failures int) {
	mean := float64(m) / float64(n)
	// Targets of issue 16: ⌈mean⌉+1 for small counts, 1.25×mean for large
	// ones; the looser of the two is what a row must meet.
	target := max(float64(int(math.Ceil(mean))+1), 1.25*mean)
	var sum result
	var pworst, bworst int
	for t := range trials {
		r := trial(m, n, t, failures)
		sum.pmax += r.pmax
		sum.bmax += r.bmax
		pworst, bworst = max(pworst, r.pmax), max(bworst, r.bmax)
		sum.pMoved += r.pMoved
		sum.bMoved += r.bMoved
		sum.bOthers += r.bOthers
		sum.worst = max(sum.worst, r.worst)
		sum.runs += r.runs
		sum.took += r.took
	}
	met := "yes"
	if float64(bworst) > target {
		met = "no"
	}
	avg := func(v, of int) string { return fmt.Sprintf("%.1f", float64(v)/float64(of)) }
	fmt.Printf("| %d | %d | %.2f | %s / %d | %s / %d | %.2f | %s | %s | %s (%s) | %d | %s |\n",
		m, n, mean, avg(sum.pmax, trials), pworst, avg(sum.bmax, trials), bworst, target, met,
		avg(sum.pMoved, sum.runs), avg(sum.bMoved, sum.runs), avg(sum.bOthers, sum.runs), sum.worst,
		(sum.took / time.Duration(trials)).Round(10*time.Microsecond))
}

func trial(m, n, t, failures int) result {
	nodes := make([]string, n)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("worker-%d-%03d", t, i)
	}
	ips := addresses(m)
	ballots := func(without string) []announce.Ballot {
		bs := make([]announce.Ballot, len(ips))
		for i, ip := range ips {
			bs[i].IP = ip
			for _, nd := range nodes {
				if nd != without {
					bs[i].Candidates = append(bs[i].Candidates, announce.Candidate{Node: nd, Serves: 1})
				}
			}
		}
		return bs
	}
	plain := func(bs []announce.Ballot) map[netip.Addr]string {
		out := map[netip.Addr]string{}
		for _, b := range bs {
			out[b.IP] = announce.Elect(b.IP, b.Candidates)[0]
		}
		return out
	}
	balanced := func(bs []announce.Ballot) map[netip.Addr]string {
		out, err := announce.ElectBalanced(bs)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return out
	}
	all := ballots("")
	p0 := plain(all)
	start := time.Now()
	b0 := balanced(all)
	took := time.Since(start)
	r := result{pmax: maxLoad(p0, nodes), bmax: maxLoad(b0, nodes), took: took}
	step := max(1, n/failures)
	for i := 0; i < n && r.runs < failures; i += step {
		lost := nodes[i]
		bs := ballots(lost)
		pm, _ := moved(p0, plain(bs), lost)
		bm, bo := moved(b0, balanced(bs), lost)
		r.pMoved += pm
		r.bMoved += bm
		r.bOthers += bo
		r.worst = max(r.worst, bo)
		r.runs++
	}
	return r
}

// addresses returns m distinct documentation addresses: 198.51.100.0/24,
// then 203.0.113.0/24, then 2001:db8::/32.
func addresses(m int) []netip.Addr {
	var out []netip.Addr
	for _, p := range []string{"198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32"} {
		pfx := netip.MustParsePrefix(p)
		for a := pfx.Addr().Next(); pfx.Contains(a) && len(out) < m; a = a.Next() {
			if a.Is4() && a.As4()[3] == 255 {
				continue
			}
			out = append(out, a)
		}
	}
	return out
}

func maxLoad(w map[netip.Addr]string, nodes []string) int {
	load := map[string]int{}
	for _, n := range w {
		load[n]++
	}
	best := 0
	for _, n := range nodes {
		best = max(best, load[n])
	}
	return best
}

// moved counts the addresses whose winner changed, and among them those
// that were not on lost.
func moved(before, after map[netip.Addr]string, lost string) (all, others int) {
	keys := make([]netip.Addr, 0, len(before))
	for ip := range before {
		keys = append(keys, ip)
	}
	slices.SortFunc(keys, netip.Addr.Compare)
	for _, ip := range keys {
		if after[ip] != before[ip] {
			all++
			if before[ip] != lost {
				others++
			}
		}
	}
	return all, others
}

func run(name string, args ...string) string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return name + ": " + err.Error()
	}
	return strings.TrimSpace(string(out))
}

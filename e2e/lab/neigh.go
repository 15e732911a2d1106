package lab

// The kernel's neighbour tables (ARP for IPv4, NDP for IPv6) are one table
// per family for the whole host: the entries of every network namespace
// count against the same gc_thresh3 (default 1024), and only the initial
// namespace shows the knobs (/proc/sys/net/ipv{4,6}/neigh/default). On one
// segment every member may hold an entry for every other one, and
// memberlist makes the speakers talk to all their peers, so a lab of n
// nodes fills about (n+3)·(n+2) entries per family: 1,056 at 30 nodes,
// 10,506 at 100. Past gc_thresh3 the kernel refuses new entries
// ("neighbour: arp_cache: neighbor table overflow!", sendmsg ENOBUFS):
// with the defaults a 100-node lab got 32 speakers fully meshed and the
// others never reached the API server.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// neighHeadroom is left to everything else on the host (other labs, the
// host's own neighbours) on top of what a lab needs: the kernel's default
// gc_thresh3.
const neighHeadroom = 1024

// NeighbourEntries returns how many neighbour entries per address family
// a lab of nodes nodes can hold at most: each of its members on the
// segment (the nodes, the router, the client and the API server's
// namespace) one entry for each other member.
func NeighbourEntries(nodes int) int {
	m := nodes + 3
	return m * (m - 1)
}

// neighLimits returns the gc_thresh2 (soft limit) and gc_thresh3 (hard
// limit) a lab of nodes nodes needs given the current ones, and whether
// they must be raised: when the lab alone could fill more than half of
// gc_thresh3 (labs up to 20 nodes never do with the kernel's defaults),
// to its need plus neighHeadroom (gc_thresh3) and plus half of that
// (gc_thresh2). Limits are only raised, never lowered: other labs on the
// host may rely on them.
func neighLimits(nodes, thresh2, thresh3 int) (new2, new3 int, raise bool) {
	need := NeighbourEntries(nodes)
	if 2*need <= thresh3 {
		return thresh2, thresh3, false
	}
	new2 = max(thresh2, need+neighHeadroom/2)
	new3 = max(thresh3, need+neighHeadroom, new2)
	return new2, new3, new2 != thresh2 || new3 != thresh3
}

// neighSysctlDir is where the host-wide neighbour table knobs live (read
// and written from the initial network namespace); a variable for tests.
var neighSysctlDir = "/proc/sys/net"

// ensureNeighbourLimits raises the host's neighbour table limits (IPv4 and
// IPv6) so that a lab of nodes nodes fits next to neighHeadroom entries of
// everyone else; it returns what it changed ("" when nothing). It must run
// in the initial network namespace (Up's caller does).
func ensureNeighbourLimits(nodes int) (string, error) {
	var changed []string
	for _, fam := range []string{"ipv4", "ipv6"} {
		dir := fmt.Sprintf("%s/%s/neigh/default", neighSysctlDir, fam)
		read := func(k string) (int, error) {
			b, err := os.ReadFile(dir + "/" + k)
			if err != nil {
				return 0, err
			}
			return strconv.Atoi(strings.TrimSpace(string(b)))
		}
		t2, err := read("gc_thresh2")
		if err != nil {
			return "", fmt.Errorf("neighbour table limits: %w", err)
		}
		t3, err := read("gc_thresh3")
		if err != nil {
			return "", fmt.Errorf("neighbour table limits: %w", err)
		}
		n2, n3, raise := neighLimits(nodes, t2, t3)
		if !raise {
			continue
		}
		// gc_thresh2 must stay <= gc_thresh3: raise the hard limit first.
		for _, kv := range []struct {
			k        string
			old, new int
		}{{"gc_thresh3", t3, n3}, {"gc_thresh2", t2, n2}} {
			if kv.old == kv.new {
				continue
			}
			if err := os.WriteFile(dir+"/"+kv.k, []byte(strconv.Itoa(kv.new)), 0o644); err != nil {
				return "", fmt.Errorf("neighbour table limits for %d nodes (about %d entries): %w", nodes, NeighbourEntries(nodes), err)
			}
			changed = append(changed, fmt.Sprintf("net.%s.neigh.default.%s %d -> %d", fam, kv.k, kv.old, kv.new))
		}
	}
	return strings.Join(changed, ", "), nil
}

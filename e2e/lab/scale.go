package lab

// Helpers for many-node labs (make bench-scale, TestScale): scraping every
// speaker at once, waiting for memberlist to converge, and reading a
// process's CPU time and memory from /proc.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/herald-lb/herald/internal/poll"
)

// ScrapeSpeakers scrapes the metrics of the speakers on nodes from the
// client's namespace (https, --metrics-secure, with token; see
// MetricsReaderToken), concurrency at a time (at least 1), and returns each
// node's exposition. Failed scrapes are joined into the error; the others
// are returned.
func (h *Herald) ScrapeSpeakers(ctx context.Context, token string, nodes []string, concurrency int) (map[string][]byte, error) {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	out := map[string][]byte{}
	sem := make(chan struct{}, max(1, concurrency))
	for _, node := range nodes {
		n, ok := h.lab.Node(node)
		if !ok {
			errs = append(errs, fmt.Errorf("scrape %s: no such lab node", node))
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			body, err := h.lab.ScrapeMetrics(ctx, h.lab.ClientNamespace(), "https", netip.AddrPortFrom(n.IPv4, MetricsPort), token)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("speaker %s: %w", node, err))
				return
			}
			out[node] = body
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// MetricSum returns the sum of every sample of metric (any labels) in a
// Prometheus text exposition, and whether there was one. metric may also be
// one series as the exposition writes it, labels included
// (`name{event="failed"}`): then only that series counts.
func MetricSum(exposition []byte, metric string) (float64, bool) {
	var sum float64
	found := false
	sc := bufio.NewScanner(bytes.NewReader(exposition))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), metric)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		if rest[0] == '{' {
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				continue
			}
			rest = rest[end+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
			sum += v
			found = true
		}
	}
	return sum, found
}

// WaitMembers waits until the speaker of every node in nodes reports
// herald_memberlist_members == want (it sees want speakers alive, itself
// included), scraping them all about every 100 ms, and returns when each
// did first. On timeout the error names the speakers still short and what
// they see.
func (h *Herald) WaitMembers(ctx context.Context, token string, nodes []string, want int, timeout time.Duration) (map[string]time.Time, error) {
	seen := map[string]time.Time{}
	_, err := poll.Wait(ctx, timeout, "", func() error {
		var todo []string
		for _, n := range nodes {
			if _, ok := seen[n]; !ok {
				todo = append(todo, n)
			}
		}
		bodies, _ := h.ScrapeSpeakers(ctx, token, todo, 16)
		now := time.Now()
		var short []string
		for _, n := range todo {
			v, ok := MetricSum(bodies[n], "herald_memberlist_members")
			if ok && int(v) == want {
				seen[n] = now
				continue
			}
			short = append(short, fmt.Sprintf("%s sees %v", n, v))
		}
		if k := len(short); k > 0 {
			if k > 5 {
				short = append(short[:5], fmt.Sprintf("and %d more", k-5))
			}
			return fmt.Errorf("%d of %d speakers do not see %d members: %s", k, len(nodes), want, strings.Join(short, ", "))
		}
		return nil
	}, labEvery)
	return seen, err
}

// ProcUsage is what /proc says about one process.
type ProcUsage struct {
	// CPU is its user plus system time (utime+stime).
	CPU time.Duration
	// RSS is its resident set now (VmRSS), HWM its peak (VmHWM), bytes.
	RSS, HWM uint64
}

// clockTick is USER_HZ, the unit of utime and stime in /proc/<pid>/stat
// (100 on every Linux architecture Go supports).
const clockTick = 100

// ReadProcUsage reads /proc/<pid>/stat (utime, stime: fields 14 and 15,
// proc(5)) and /proc/<pid>/status (VmRSS, VmHWM, kB).
func ReadProcUsage(pid int) (ProcUsage, error) {
	var u ProcUsage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// The command (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return u, fmt.Errorf("/proc/%d/stat: no command field", pid)
	}
	f := strings.Fields(string(stat[i+1:]))
	// f[0] is field 3 (state); utime is field 14, stime 15.
	if len(f) < 13 {
		return u, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return u, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	u.CPU = time.Duration(ut+st) * time.Second / clockTick
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return u, fmt.Errorf("/proc/%d/status %s: %w", pid, k, err)
		}
		if k == "VmRSS" {
			u.RSS = kb * 1024
		} else {
			u.HWM = kb * 1024
		}
	}
	return u, nil
}

package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/e2e/lab"
	"github.com/herald-lb/herald/internal/bgp/gobgp"
	"github.com/herald-lb/herald/internal/poll"
)

// PrefixFloodOptions shapes the prefix flood scenario.
type PrefixFloodOptions struct {
	// Prefixes is how many IPv6 /64s the peer sends; 0 means 200,000.
	Prefixes int
	// Node is the node whose speaker peers with it; "" means the last
	// speaker node.
	Node string
	// Timeout bounds the wait for the teardown and its event; 0 means
	// 3 min.
	Timeout time.Duration
}

func (o *PrefixFloodOptions) defaults(e *Env) {
	if o.Prefixes == 0 {
		o.Prefixes = 200_000
	}
	if o.Node == "" {
		ns := e.Herald.SpeakerNodes()
		if len(ns) > 0 {
			o.Node = ns[len(ns)-1]
		}
	}
	if o.Timeout == 0 {
		o.Timeout = 3 * time.Minute
	}
}

// ScenarioPrefixFlood names the prefix flood scenario in the table.
const ScenarioPrefixFlood = "a peer sends a full table"

// The announcer: a second router in the router namespace, on an address
// and port of its own (FRR keeps 198.51.100.1:179).
var (
	announcerAddr = netip.MustParseAddr("198.51.100.2")
)

const (
	announcerPort    = 1790
	announcerASN     = 64501
	announcerPeer    = "chaos-flood"
	announcerProcess = "chaos-announcer"
	// AnnouncerEnv, set to an announcerConfig in JSON, makes
	// RunAnnouncerIfAsked run the announcer instead of the program.
	AnnouncerEnv = "HERALD_CHAOS_ANNOUNCER"
)

type announcerConfig struct {
	Neighbor string
	Prefixes int
}

// RunAnnouncerIfAsked runs the prefix flood's announcer and exits when
// AnnouncerEnv is set: the scenario starts its own program (the test
// binary, bench-chaos) again as the announcer, in the router namespace,
// so that the router's memory is not the speaker's. Call it first thing
// in main (or TestMain). The announcer (gobgp, AS 64501, listening on
// 198.51.100.2:1790) prints "ready" once its table is loaded, then one
// "state <fsm state>" line per change of its session, and
// runs until SIGTERM.
func RunAnnouncerIfAsked() {
	v := os.Getenv(AnnouncerEnv)
	if v == "" {
		return
	}
	os.Exit(runAnnouncer(v))
}

func runAnnouncer(v string) int {
	var c announcerConfig
	if err := json.Unmarshal([]byte(v), &c); err != nil {
		fmt.Fprintln(os.Stderr, "announcer:", err)
		return 2
	}
	nb, err := netip.ParseAddr(c.Neighbor)
	if err != nil {
		fmt.Fprintln(os.Stderr, "announcer:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	a, err := gobgp.StartAnnouncer(ctx, gobgp.AnnouncerConfig{ASN: announcerASN, RouterID: announcerAddr,
		Listen: announcerAddr, Port: announcerPort, Neighbor: nb, NeighborASN: lab.NodeASN,
		Prefixes: c.Prefixes, NextHop: lab.RouterAddrV6,
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer a.Close()
	fmt.Println("ready")
	last := ""
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return 0
		case <-tick.C:
		}
		st, _, err := a.SessionState(ctx)
		if err != nil {
			continue
		}
		if st != last {
			fmt.Printf("state %s\n", st)
			last = st
		}
	}
}

// PrefixFlood has a peer send o.Prefixes IPv6 /64s to one node's speaker:
// the announcer (see RunAnnouncerIfAsked) runs in the router namespace, a
// BGPPeer (dual-stack address family, only that node) points the speaker
// at it. It samples the speaker process's VmRSS (/proc/<pid>/status)
// every 100 ms from before the BGPPeer exists until 5 s after the
// teardown, and reports:
//
//   - the speaker's peak RSS (VmHWM, the kernel's high-water mark) against
//     the speaker container's memory limit (target: under it), with the
//     RSS before and after in the notes;
//   - whether the session was Established, then torn down (the
//     announcer's view), with a prefixLimitExceeded event on the BGPPeer
//     (target: torn down with the event).
func PrefixFlood(ctx context.Context, e *Env, o PrefixFloodOptions) (res Result, err error) {
	o.defaults(e)
	res = Result{Scenario: ScenarioPrefixFlood, Form: fmt.Sprintf("%d prefixes to %s", o.Prefixes, o.Node)}
	n, ok := e.Lab.Node(o.Node)
	if !ok {
		return res, fmt.Errorf("%s: no lab node %q", ScenarioPrefixFlood, o.Node)
	}
	exe, err := os.Executable()
	if err != nil {
		return res, err
	}
	rtr := e.Lab.RouterNamespace()
	if _, err := e.Lab.Exec(ctx, rtr, "ip", "addr", "add", announcerAddr.String()+"/24", "dev", "eth0"); err != nil {
		return res, fmt.Errorf("%s: %w", ScenarioPrefixFlood, err)
	}
	c := e.Herald.Client()
	peer := &v1beta2.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: announcerPeer, Namespace: lab.HeraldNamespace},
		Spec: v1beta2.BGPPeerSpec{MyASN: lab.NodeASN, PeerASN: announcerASN, PeerAddress: announcerAddr.String(),
			PeerPort: announcerPort, DualStackAddressFamily: true,
			HoldTime: &metav1.Duration{Duration: 90 * time.Second}, ConnectTime: &metav1.Duration{Duration: time.Second},
			NodeSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"kubernetes.io/hostname": o.Node}}}}}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if derr := c.Delete(dctx, peer); derr != nil && !apierrors.IsNotFound(derr) {
			err = errors.Join(err, derr)
		}
		if e.Lab.Process(announcerProcess) != nil {
			err = errors.Join(err, e.Lab.StopProcess(announcerProcess))
		}
		if _, derr := e.Lab.Exec(dctx, rtr, "ip", "addr", "del", announcerAddr.String()+"/24", "dev", "eth0"); derr != nil {
			err = errors.Join(err, derr)
		}
	}()
	cfg, _ := json.Marshal(announcerConfig{Neighbor: n.IPv4.String(), Prefixes: o.Prefixes})
	ap, err := e.Lab.Start(rtr, announcerProcess, []string{exe}, []string{AnnouncerEnv + "=" + string(cfg)})
	if err != nil {
		return res, fmt.Errorf("%s: %w", ScenarioPrefixFlood, err)
	}
	loadStart := time.Now()
	if _, err := poll.Wait(ctx, o.Timeout, "announcer loads its table", func() error {
		if !ap.Alive() {
			return fmt.Errorf("announcer exited (log %s)", ap.Log)
		}
		if announcerLines(ap.Log, "ready") == nil {
			return errors.New("not ready")
		}
		return nil
	}); err != nil {
		return res, fmt.Errorf("%s: %w", ScenarioPrefixFlood, err)
	}
	res.Notes = append(res.Notes, fmt.Sprintf("announcer loaded %d prefixes in %.1f s", o.Prefixes, time.Since(loadStart).Seconds()))

	sp := e.Herald.Speaker(o.Node)
	if sp == nil {
		return res, fmt.Errorf("%s: no speaker on %s", ScenarioPrefixFlood, o.Node)
	}
	limit, err := speakerMemoryLimit(ctx, e, o.Node)
	if err != nil {
		return res, err
	}
	before, _, err := procMemory(sp.PID)
	if err != nil {
		return res, err
	}
	sctx, stopSampling := context.WithCancel(ctx)
	var (
		smu     sync.Mutex
		peakRSS uint64
	)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sctx.Err() == nil {
			if rss, _, err := procMemory(sp.PID); err == nil {
				smu.Lock()
				peakRSS = max(peakRSS, rss)
				smu.Unlock()
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	defer func() { stopSampling(); <-sampled }()

	created := time.Now()
	if err := c.Create(ctx, peer); err != nil {
		return res, fmt.Errorf("%s: create BGPPeer: %w", ScenarioPrefixFlood, err)
	}
	var event *corev1.Event
	torn := false
	_, waitErr := poll.Wait(ctx, o.Timeout, "session torn down with a prefixLimitExceeded event", func() error {
		states := announcerLines(ap.Log, "state ")
		est := -1
		for i, s := range states {
			if strings.HasPrefix(s, "state established") {
				est = i
			}
			if est >= 0 && i > est && !strings.HasPrefix(s, "state established") {
				torn = true
			}
		}
		if event == nil {
			evs, err := e.Lab.Client().CoreV1().Events(lab.HeraldNamespace).List(ctx, metav1.ListOptions{
				FieldSelector: "involvedObject.name=" + announcerPeer + ",reason=prefixLimitExceeded"})
			if err == nil && len(evs.Items) > 0 {
				event = &evs.Items[0]
			}
		}
		switch {
		case !torn:
			return fmt.Errorf("announcer's session states %v", states)
		case event == nil:
			return errors.New("no prefixLimitExceeded event on BGPPeer " + announcerPeer)
		}
		return nil
	})
	tornAfter := time.Since(created)
	// 5 s after the teardown: what the speaker keeps (observation window).
	time.Sleep(5 * time.Second)
	after, hwm, err := procMemory(sp.PID)
	if err != nil {
		return res, err
	}
	stopSampling()
	<-sampled
	mib := func(b uint64) float64 { return float64(b) / (1 << 20) }
	smu.Lock()
	res.Notes = append(res.Notes, fmt.Sprintf("speaker on %s: RSS %.0f MiB before, %.0f MiB peak sampled, %.0f MiB 5 s after the teardown; VmHWM %.0f MiB; memory limit %.0f MiB",
		o.Node, mib(before), mib(peakRSS), mib(after), mib(hwm), mib(limit)))
	smu.Unlock()
	res.Notes = append(res.Notes, fmt.Sprintf("announcer's session states: %v", announcerLines(ap.Log, "state ")))
	if event != nil {
		res.Notes = append(res.Notes, fmt.Sprintf("event %s %s %.1f s after the BGPPeer was created: %s", event.Type, event.Reason, tornAfter.Seconds(), event.Message))
	}
	if waitErr != nil {
		res.Notes = append(res.Notes, waitErr.Error())
	}
	if !sp.Alive() {
		res.Notes = append(res.Notes, "the speaker process is gone (log "+sp.Log+")")
	}
	bad := 0
	if !torn || event == nil || !sp.Alive() {
		bad = 1
	}
	res.Rows = []Row{
		{Scenario: ScenarioPrefixFlood, Measure: "speaker peak RSS (VmHWM), MiB", Count: int(mib(hwm) + 0.5),
			Target: fmt.Sprintf("under the limit, %.0f MiB", mib(limit)), Met: hwm < limit && sp.Alive()},
		countRow(ScenarioPrefixFlood, "sessions not torn down at the limit with a prefixLimitExceeded event", bad, 1),
	}
	return res, nil
}

// announcerLines returns the lines of the announcer's log that start
// with prefix.
func announcerLines(path, prefix string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			out = append(out, sc.Text())
		}
	}
	return out
}

// procMemory reads VmRSS and VmHWM of process pid (proc(5)), in bytes.
func procMemory(pid int) (rss, hwm uint64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("/proc/%d/status: %q", pid, line)
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, 0, err
		}
		if k == "VmRSS" {
			rss = n << 10
		} else {
			hwm = n << 10
		}
	}
	return rss, hwm, nil
}

// speakerMemoryLimit is the memory limit of the speaker container of
// node's speaker Pod, in bytes.
func speakerMemoryLimit(ctx context.Context, e *Env, node string) (uint64, error) {
	pod, err := e.Lab.Client().CoreV1().Pods(lab.HeraldNamespace).Get(ctx, e.Herald.SpeakerProcessName(node), metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	for _, ct := range pod.Spec.Containers {
		if ct.Name == "speaker" {
			if q, ok := ct.Resources.Limits[corev1.ResourceMemory]; ok {
				return uint64(q.Value()), nil
			}
		}
	}
	return 0, fmt.Errorf("speaker pod %s has no memory limit", pod.Name)
}

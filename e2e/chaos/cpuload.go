package chaos

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/e2e/lab"
	"github.com/herald-lb/herald/internal/k8s/scheme"
)

// CPULoadOptions shapes the CPU load scenario.
type CPULoadOptions struct {
	// Load is how long every node namespace runs busy loops; 0 means 60 s.
	Load time.Duration
	// Workers is the number of busy loops per node; 0 means the
	// machine's CPU count (so the nodes together ask for several times
	// the machine).
	Workers int
	// Addresses is the number of layer 2 Services; 0 means 6.
	Addresses int
	// First is the first address of the scenario's pool; zero means
	// 198.51.100.218.
	First netip.Addr
}

func (o *CPULoadOptions) defaults() {
	if o.Load == 0 {
		o.Load = 60 * time.Second
	}
	if o.Workers == 0 {
		o.Workers = runtime.NumCPU()
	}
	if o.Addresses == 0 {
		o.Addresses = 6
	}
	if !o.First.IsValid() {
		o.First = netip.MustParseAddr("198.51.100.218")
	}
}

// ScenarioCPULoad names the CPU load scenario in the table.
const ScenarioCPULoad = "full CPU load on every node"

// CPULoad runs o.Workers busy loops in every node's namespace for o.Load
// (lab.BurnCPU: they end by themselves) while nothing fails, and counts
// false failovers:
//
//   - memberlist failure detections: the rise of every speaker's
//     herald_memberlist_member_events_total{event="failed"} over the load;
//   - owner changes on the wire: the client probes every address about
//     once a second during the load; a probe whose answerers are not
//     exactly the owner from before counts;
//   - ServiceL2Status changes: objects of the scenario's Services created,
//     deleted or moved to another node during the load (a watch).
//
// All targets are 0.
func CPULoad(ctx context.Context, e *Env, o CPULoadOptions) (res Result, err error) {
	o.defaults()
	res = Result{Scenario: ScenarioCPULoad, Form: fmt.Sprintf("%s, %d busy loops per node", o.Load, o.Workers)}
	f, err := newL2Fixture(ctx, e, "cpuload", o.First, o.Addresses)
	if err != nil {
		return res, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = f.delete(dctx, e, "cpuload")
	}()
	before, err := f.settle(ctx, e, 90*time.Second)
	if err != nil {
		return res, fmt.Errorf("%s: before: %w", ScenarioCPULoad, err)
	}
	token, err := e.Lab.MetricsReaderToken(ctx, lab.HeraldNamespace, "chaos-metrics")
	if err != nil {
		return res, err
	}
	failed0, err := memberlistFailed(ctx, e, token)
	if err != nil {
		return res, err
	}
	var sl v1beta1.ServiceL2StatusList
	sel := client.MatchingLabels{v1beta1.LabelServiceNamespace: f.ns}
	if err := e.Herald.Client().List(ctx, &sl, client.InNamespace(lab.HeraldNamespace), sel); err != nil {
		return res, err
	}
	sch, err := scheme.New()
	if err != nil {
		return res, err
	}
	wc, err := client.NewWithWatch(e.Lab.RESTConfig(), client.Options{Scheme: sch})
	if err != nil {
		return res, err
	}
	w, err := wc.Watch(ctx, &v1beta1.ServiceL2StatusList{}, client.InNamespace(lab.HeraldNamespace),
		&client.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set(sel)), Raw: &metav1.ListOptions{ResourceVersion: sl.ResourceVersion}})
	if err != nil {
		return res, err
	}
	defer w.Stop()

	var procs []*lab.Process
	for _, n := range e.Lab.Nodes {
		ps, err := e.Lab.BurnCPU(n.Namespace, "burn-"+n.Name, o.Workers, o.Load)
		if err != nil {
			_ = e.Lab.WaitGone(ctx, procs)
			return res, err
		}
		procs = append(procs, ps...)
	}
	loadAt := time.Now()
	var probes, wrong int
	var firstWrong string
	for time.Since(loadAt) < o.Load {
		who, err := e.Lab.ProbeARP(ctx, f.addrs(), 500*time.Millisecond)
		if err != nil {
			return res, errors.Join(err, e.Lab.WaitGone(ctx, procs))
		}
		for a, ws := range who {
			probes++
			if len(ws) != 1 || ws[0] != before[a] {
				wrong++
				if firstWrong == "" {
					firstWrong = fmt.Sprintf("%s answered by %v %.1f s into the load (owner %s)", a, ws, time.Since(loadAt).Seconds(), before[a])
				}
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err := e.Lab.WaitGone(ctx, procs); err != nil {
		return res, err
	}
	res.Notes = append(res.Notes, fmt.Sprintf("load ran %.1f s", time.Since(loadAt).Seconds()))
	// Count what the load caused, seen up to 5 s after it ended.
	statusChanges, statusNote := countStatusChanges(w, time.Now().Add(5*time.Second))
	failed1, err := memberlistFailed(ctx, e, token)
	if err != nil {
		return res, err
	}
	failed := 0
	for n, v := range failed1 {
		failed += int(v - failed0[n])
	}
	if firstWrong != "" {
		res.Notes = append(res.Notes, firstWrong)
	}
	if statusNote != "" {
		res.Notes = append(res.Notes, statusNote)
	}
	res.Rows = []Row{
		countRow(ScenarioCPULoad, "memberlist failure detections (all speakers)", failed, 0),
		countRow(ScenarioCPULoad, "address probes not answered by exactly the owner from before", wrong, probes),
		countRow(ScenarioCPULoad, "ServiceL2Status objects created, deleted or moved", statusChanges, 0),
	}
	return res, nil
}

// countStatusChanges drains w until deadline and counts ServiceL2Status
// objects added, deleted, or modified to name another node.
func countStatusChanges(w watch.Interface, deadline time.Time) (int, string) {
	n, note := 0, ""
	nodes := map[string]string{}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return n, note
			}
			st, ok := ev.Object.(*v1beta1.ServiceL2Status)
			if !ok {
				continue
			}
			changed := false
			switch ev.Type {
			case watch.Added, watch.Deleted:
				changed = true
			case watch.Modified:
				if prev, seen := nodes[st.Name]; seen && prev != st.Status.Node {
					changed = true
				}
			}
			nodes[st.Name] = st.Status.Node
			if changed {
				n++
				if note == "" {
					note = fmt.Sprintf("ServiceL2Status %s %s (node %s, Service %s)", st.Name, strings.ToLower(string(ev.Type)), st.Status.Node, st.Status.ServiceName)
				}
			}
		case <-timer.C:
			return n, note
		}
	}
}

// memberlistFailed scrapes every speaker and returns, per node, its
// herald_memberlist_member_events_total{event="failed"}.
func memberlistFailed(ctx context.Context, e *Env, token string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, n := range e.Herald.SpeakerNodes() {
		nd, _ := e.Lab.Node(n)
		body, err := e.Lab.ScrapeMetrics(ctx, e.Lab.ClientNamespace(), "https", netip.AddrPortFrom(nd.IPv4, lab.MetricsPort), token)
		if err != nil {
			return nil, err
		}
		// The event counter appears only once it counted; the members gauge
		// is always there and proves this is a speaker's exposition.
		if !bytes.Contains(body, []byte("\nherald_memberlist_members ")) {
			return nil, fmt.Errorf("speaker %s exports no herald_memberlist_members", n)
		}
		out[n] = sampleValue(body, "herald_memberlist_member_events_total", `event="failed"`)
	}
	return out, nil
}

// sampleValue returns the sum of the samples of metric in a text
// exposition whose label set contains label (0 when none).
func sampleValue(exposition []byte, metric, label string) float64 {
	var sum float64
	sc := bufio.NewScanner(bytes.NewReader(exposition))
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, metric)
		if !ok || !strings.HasPrefix(rest, "{") {
			continue
		}
		end := strings.IndexByte(rest, '}')
		if end < 0 || !strings.Contains(rest[:end], label) {
			continue
		}
		fields := strings.Fields(rest[end+1:])
		if len(fields) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
			sum += v
		}
	}
	return sum
}

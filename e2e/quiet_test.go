package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/herald-lb/herald/e2e/lab"
	"github.com/herald-lb/herald/internal/poll"
)

// Quiet checks ("nothing happened") wait for Herald's own idle signal, read
// from its metrics endpoints as Prometheus would: controller-runtime's and
// client-go's workqueue metrics (workqueue_depth, workqueue_unfinished_work_seconds)
// and the speaker controller's controller_runtime_reconcile_total.

// metricsReader is the ServiceAccount the quiet checks scrape with (bound
// to herald-metrics-reader by MetricsReaderToken).
const metricsReader = "e2e-quiet"

// metricsToken returns a herald-metrics-reader token for the scrapes.
func (e *env) metricsToken(t *testing.T) string {
	t.Helper()
	token, err := e.l.MetricsReaderToken(testCtx(t, time.Minute), lab.HeraldNamespace, metricsReader)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// scrape returns the exposition of Herald's metrics endpoint at target,
// read from the client namespace with token.
func (e *env) scrape(token string, target netip.AddrPort) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return e.l.ScrapeMetrics(ctx, e.l.ClientNamespace(), "https", target, token)
}

// metricSum is the sum of every sample of metric name in the text
// exposition body whose labels include every name="value" in labels, and
// whether there was any.
func metricSum(body []byte, name string, labels ...string) (sum float64, found bool) {
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue // a longer metric name
		}
		i := strings.LastIndexByte(rest, ' ')
		series, value := rest[:i], rest[i+1:]
		ok := true
		for _, l := range labels {
			if !strings.Contains(series, l) {
				ok = false
			}
		}
		if v, err := strconv.ParseFloat(value, 64); ok && err == nil {
			sum += v
			found = true
		}
	}
	return sum, found
}

// queuesIdle reports an error unless every workqueue named in names has
// nothing queued and nothing in progress.
func queuesIdle(body []byte, names ...string) error {
	for _, n := range names {
		l := `name="` + n + `"`
		d, found := metricSum(body, "workqueue_depth", l)
		if !found {
			return fmt.Errorf("no workqueue_depth of workqueue %s", n)
		}
		if d != 0 {
			return fmt.Errorf("workqueue %s: %v queued", n, d)
		}
		if u, _ := metricSum(body, "workqueue_unfinished_work_seconds", l); u != 0 {
			return fmt.Errorf("workqueue %s: an item in progress (%vs)", n, u)
		}
	}
	return nil
}

// speakerReconciles returns, per node, how many reconciles its speaker
// has completed (controller_runtime_reconcile_total of the controller
// "speaker"), once every speaker is idle (nothing queued, nothing in
// progress).
func (e *env) speakerReconciles(t *testing.T, nodes ...string) map[string]float64 {
	t.Helper()
	token := e.metricsToken(t)
	done := map[string]float64{}
	poll.Until(t, time.Minute, "speakers idle", func() error {
		for _, n := range nodes {
			body, err := e.scrapeSpeaker(token, n)
			if err != nil {
				return err
			}
			if err := queuesIdle(body, "speaker"); err != nil {
				return fmt.Errorf("speaker %s: %w", n, err)
			}
			done[n], _ = metricSum(body, "controller_runtime_reconcile_total", `controller="speaker"`)
		}
		return nil
	})
	return done
}

// waitSpeakersReconciled waits until the speaker of every node in since
// has completed a reconcile more than since says and is idle again: it has
// decided on what changed in between.
func (e *env) waitSpeakersReconciled(t *testing.T, since map[string]float64) {
	t.Helper()
	token := e.metricsToken(t)
	poll.Until(t, time.Minute, "speakers reconciled and idle", func() error {
		for n, before := range since {
			body, err := e.scrapeSpeaker(token, n)
			if err != nil {
				return err
			}
			if got, _ := metricSum(body, "controller_runtime_reconcile_total", `controller="speaker"`); got <= before {
				return fmt.Errorf("speaker %s: %v reconciles, no more than before the change", n, got)
			}
			if err := queuesIdle(body, "speaker"); err != nil {
				return fmt.Errorf("speaker %s: %w", n, err)
			}
		}
		return nil
	})
}

func (e *env) scrapeSpeaker(token, node string) ([]byte, error) {
	nd, ok := e.l.Node(node)
	if !ok {
		return nil, fmt.Errorf("no node %s", node)
	}
	return e.scrape(token, netip.AddrPortFrom(nd.IPv4, lab.MetricsPort))
}

// waitControllerIdle waits until the controller's Service workqueues have
// nothing queued and nothing in progress (its idle state).
func (e *env) waitControllerIdle(t *testing.T) {
	t.Helper()
	token := e.metricsToken(t)
	poll.Until(t, time.Minute, "controller idle", func() error {
		body, err := e.scrape(token, netip.AddrPortFrom(lab.APIServerAddr, lab.MetricsPort))
		if err != nil {
			return err
		}
		return queuesIdle(body, "serviceip", "serviceip_annotation", "serviceip_config", "serviceip_retry")
	})
}

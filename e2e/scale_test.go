package e2e

import (
	"testing"
	"time"

	"github.com/herald-lb/herald/e2e/lab"
)

// TestScale is the short form of `make bench-scale` (many-node lab mode):
// ten nodes, every speaker started at once (AddSpeakers), memberlist
// converges (every speaker's herald_memberlist_members is 10), and one
// SIGKILL of the announcing speaker moves the client's neighbour entry to
// another node (lab.L2Failover, bench-failover's probe), after which the
// restarted speaker is a member again on every node.
func TestScale(t *testing.T) {
	const nodes = 10
	e := newEnv(t, nodes, lab.InstallOptions{SpeakerNodes: []string{}})
	e.put(t, pool("scale", "198.51.100.200/32"))
	e.put(t, l2adv("scale", "scale"))
	e.namespace(t, "scale", nil)
	e.createService(t, lbService("scale", "web"), e.allNodes()...)
	ip := e.ips(t, "scale", "web", 1)[0]
	token, err := e.l.MetricsReaderToken(testCtx(t, time.Minute), lab.HeraldNamespace, "scale-metrics")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.h.AddSpeakers(testCtx(t, 3*time.Minute), e.allNodes(), nodes); err != nil {
		t.Fatal(err)
	}
	if _, err := e.h.WaitMembers(testCtx(t, 2*time.Minute), token, e.allNodes(), nodes, 2*time.Minute); err != nil {
		t.Fatalf("memberlist did not converge: %v", err)
	}
	killed, took, err := e.h.L2Failover(testCtx(t, 3*time.Minute), ip, lab.FailoverKill)
	if err != nil {
		t.Fatalf("failover after SIGKILL of %s: %v", killed, err)
	}
	t.Logf("SIGKILL of %s: the client's neighbour cache moved after %s", killed, took.Round(time.Millisecond))
	if _, err := e.h.WaitMembers(testCtx(t, 2*time.Minute), token, e.allNodes(), nodes, 2*time.Minute); err != nil {
		t.Fatalf("the restarted speaker on %s did not rejoin: %v", killed, err)
	}
}

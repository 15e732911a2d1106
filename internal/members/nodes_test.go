package members

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/herald-lb/herald/internal/poll"
)

// TestMemberCopiesDuringKeyRotation joins missing peers, reads Addr and
// sends a leaving announcement while a key rotation makes every member
// re-advertise its metadata, so that memberlist rewrites its Node structs
// (Addr, Port, Meta) under its node lock over and over. Reading those
// structs outside memberlist's callbacks (the Nodes from Members and
// LocalNode) is a data race that `go test -race` reports here; the List
// reads its own copies instead (List.nodes). Without -race it checks that
// the copies are right: the announcement reaches both survivors (counted
// as "leave", not "failed") and nobody is lost during the rotation.
func TestMemberCopiesDuringKeyRotation(t *testing.T) {
	t.Parallel()
	secrets := [][]byte{[]byte("copies-secret-1"), []byte("copies-secret-2"), []byte("copies-secret-3")}
	var nodes []*testNode
	var names []string
	var addrs []netip.AddrPort
	for i := range 3 {
		cfg := testConfig(fmt.Sprintf("copy-%d", i), secrets[0])
		cfg.Registerer = prometheus.NewPedanticRegistry()
		nd := start(t, cfg)
		nodes, names, addrs = append(nodes, nd), append(names, cfg.NodeName), append(addrs, nd.Addr())
	}
	for _, nd := range nodes {
		nd.SetPeers(addrs)
	}
	for _, nd := range nodes {
		poll.Until(t, sanityLimit, nd.cfg.NodeName+" sees all", sees(nd.List, names...))
	}

	// Until the end: every member keeps re-running joinMissing (SetPeers)
	// and Addr, concurrently with the metadata updates.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, nd := range nodes {
		wg.Go(func() {
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				nd.SetPeers(addrs)
				if got := nd.Addr(); got != addrs[slices.Index(nodes, nd)] {
					t.Errorf("%s: Addr() = %v during the rotation, want %v", nd.cfg.NodeName, got, addrs[slices.Index(nodes, nd)])
					return
				}
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()

	installedOnly := func(id string, nds ...*testNode) func() bool {
		return func() bool {
			for _, nd := range nds {
				if ids, _ := nd.keyStatus(); !slices.Equal(ids, []string{id}) {
					return false
				}
			}
			return true
		}
	}
	// A complete rotation: three metadata updates per member (new key
	// installed, used, old key removed).
	for _, nd := range nodes {
		nd.SetSecret(secrets[1])
	}
	poll.Until(t, sanityLimit, "rotation to the second key", installedOnly(SecretID(secrets[1]), nodes...))
	for _, nd := range nodes {
		if !sees(nd.List, names...)() {
			t.Fatalf("%s sees %v live after the rotation, want %v", nd.cfg.NodeName, liveSet(nd.List), names)
		}
	}

	// The survivors start the next rotation (they install the third key
	// and advertise it; copy-2 never does, so they keep the second key in
	// use) while copy-2 leaves: it announces leaving from its copies.
	a, b, c := nodes[0], nodes[1], nodes[2]
	// A member declared failed before the stop (a false failure on an
	// overloaded machine) would make a survivor ignore the announcement:
	// say so if it happened.
	failedBefore := map[*testNode]float64{}
	for _, nd := range []*testNode{a, b} {
		failedBefore[nd] = testutil.ToFloat64(nd.metrics.events.WithLabelValues("failed"))
	}
	a.SetSecret(secrets[2])
	b.SetSecret(secrets[2])
	if err := c.stop(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, sanityLimit, "survivors see copy-2 leave", func() bool {
		return sees(a.List, names[:2]...)() && sees(b.List, names[:2]...)()
	})
	// copy-2's departure is counted once on each survivor, as a "leave":
	// its leaving announcement, sent from the copies, is acknowledged
	// before memberlist's own leave is sent (leaving.go). Before that wait,
	// memberlist's leave was handled first in about 1 run in 35 and counted
	// as "failed" (TestLeaveCountedWhenReceiverIsBusy).
	for _, nd := range []*testNode{a, b} {
		leave := testutil.ToFloat64(nd.metrics.events.WithLabelValues("leave"))
		failed := testutil.ToFloat64(nd.metrics.events.WithLabelValues("failed")) - failedBefore[nd]
		if leave != 1 || failed != 0 {
			t.Errorf("%s: copy-2's departure counted as leave %v, failed %v, want leave 1, failed 0; rejoins %d",
				nd.cfg.NodeName, leave, failed, nd.Rejoins())
		}
	}
	poll.Until(t, sanityLimit, "survivors rotate to the third key without copy-2", installedOnly(SecretID(secrets[2]), a, b))
}

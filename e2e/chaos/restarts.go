package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/herald-lb/herald/e2e/lab"
)

// RestartOptions shapes the speaker restart scenario.
type RestartOptions struct {
	// Restarts is the number of restarts, alternating SIGTERM+start and
	// SIGKILL+start; 0 means 20.
	Restarts int
	// Node is the node whose speaker restarts; empty means n2.
	Node string
	// Addresses is the number of layer 2 IPv4 Services; 0 means 12.
	Addresses int
	// First is the first address of the scenario's pool; zero means
	// 198.51.100.200.
	First netip.Addr
	// NeighbourCheck is when, after the start is issued, the client's
	// neighbour table is read; 0 means 4 s.
	NeighbourCheck time.Duration
	// Settle bounds the wait for one answerer per address before and
	// after each restart; 0 means 90 s.
	Settle time.Duration
}

func (o *RestartOptions) defaults() {
	if o.Restarts == 0 {
		o.Restarts = 20
	}
	if o.Node == "" {
		o.Node = "n2"
	}
	if o.Addresses == 0 {
		o.Addresses = 12
	}
	if !o.First.IsValid() {
		o.First = netip.MustParseAddr("198.51.100.200")
	}
	if o.NeighbourCheck == 0 {
		o.NeighbourCheck = 4 * time.Second
	}
	if o.Settle == 0 {
		o.Settle = 90 * time.Second
	}
}

// ScenarioRestarts names the speaker restart scenario in the table.
const ScenarioRestarts = "speaker restarts"

// SpeakerRestarts restarts one node's speaker o.Restarts times, with
// o.Addresses layer 2 addresses (one Service each, endpoints on every node)
// spread over the nodes, and measures per restart and address:
//
//   - false claims: the restarted node sent an ARP reply or a gratuitous ARP
//     (RFC 826, RFC 5227 §3) for an address it owned neither before nor
//     after the restart. Captured on the node's switch port from just
//     before the stop until one answerer per address is back; owners are
//     the client's ARP answerers (with matching ServiceL2Status) before and
//     after.
//   - wrong neighbour entries: o.NeighbourCheck after the start was
//     issued, the client's kernel neighbour entry for the address (learnt
//     over HTTP before the restart) names a node that is not the owner
//     after the restart.
//
// Both targets are 0 (of restarts × addresses).
func SpeakerRestarts(ctx context.Context, e *Env, o RestartOptions) (Result, error) {
	o.defaults()
	res := Result{Scenario: ScenarioRestarts, Form: fmt.Sprintf("%d restarts of %s, %d addresses", o.Restarts, o.Node, o.Addresses)}
	node, ok := e.Lab.Node(o.Node)
	if !ok {
		return res, fmt.Errorf("%s: no lab node %q", ScenarioRestarts, o.Node)
	}
	f, err := newL2Fixture(ctx, e, "restarts", o.First, o.Addresses)
	if err != nil {
		return res, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = f.delete(dctx, e, "restarts")
	}()
	var claims, neigh int
	for i := range o.Restarts {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		kill := i%2 == 1
		c, n, note, err := restartOnce(ctx, e, f, node, kill, o)
		if err != nil {
			return res, fmt.Errorf("%s: restart %d: %w", ScenarioRestarts, i+1, err)
		}
		claims += c
		neigh += n
		res.Notes = append(res.Notes, fmt.Sprintf("restart %d: %s", i+1, note))
		e.log().Info("restart", "n", i+1, "kill", kill, "false claims", c, "wrong neighbours", n)
	}
	pairs := o.Restarts * o.Addresses
	res.Rows = []Row{
		countRow(ScenarioRestarts, "ARP replies / gratuitous ARP by the restarted node for addresses it owned neither before nor after (restart × address)", claims, pairs),
		countRow(ScenarioRestarts, fmt.Sprintf("client neighbour entries at a non-owner %s after the start (restart × address)", o.NeighbourCheck), neigh, pairs),
	}
	return res, nil
}

// restartOnce plays one restart and returns the false claims, the wrong
// neighbour entries and a note.
func restartOnce(ctx context.Context, e *Env, f *l2Fixture, node lab.Node, kill bool, o RestartOptions) (claims, neigh int, note string, err error) {
	before, err := f.settle(ctx, e, o.Settle)
	if err != nil {
		return 0, 0, "", fmt.Errorf("before: %w", err)
	}
	if err := f.primeClient(ctx, e, before); err != nil {
		return 0, 0, "", fmt.Errorf("prime the client: %w", err)
	}
	// Linux ignores a new link-layer address within neigh locktime (1 s)
	// of the last update; let it pass so the client's kernel takes every
	// claim the restart makes.
	time.Sleep(1100 * time.Millisecond)
	capture, err := e.Lab.CaptureARP(node.Name)
	if err != nil {
		return 0, 0, "", err
	}
	defer func() { err = errors.Join(err, capture.Close()) }()
	how := "TERM"
	if kill {
		how = "KILL"
		err = e.Herald.KillSpeaker(node.Name)
	} else {
		err = e.Herald.StopSpeaker(node.Name)
	}
	if err != nil {
		return 0, 0, "", err
	}
	start := time.Now()
	if err := e.Herald.StartSpeaker(ctx, node.Name); err != nil {
		return 0, 0, "", err
	}
	// The scenario's observation point, not a wait for a condition.
	time.Sleep(time.Until(start.Add(o.NeighbourCheck)))
	tab, err := e.Lab.NeighborTable(e.Lab.ClientNamespace())
	if err != nil {
		return 0, 0, "", err
	}
	after, err := f.settle(ctx, e, o.Settle)
	if err != nil {
		return 0, 0, "", fmt.Errorf("after: %w", err)
	}
	claimed := falseClaims(capture.Frames(), node.Name, node.MAC, before, after)
	wrong := wrongNeighbours(tab, after, e.Lab.NodeByMAC)
	note = fmt.Sprintf("%s+start, %s owned %d before and %d after; false claims %s; client entries at a non-owner %s",
		how, node.Name, countOwned(before, node.Name), countOwned(after, node.Name), shortAddrs(claimed), shortAddrs(wrong))
	return len(claimed), len(wrong), note, nil
}

func countOwned(o owners, node string) int {
	n := 0
	for _, w := range o {
		if w == node {
			n++
		}
	}
	return n
}

// falseClaims returns, sorted, the addresses of before (the addresses
// under test) that node owned neither in before nor in after but for which
// frames hold a claim (an ARP reply or a gratuitous ARP, see
// lab.ARPFrame.Claims) sent from mac.
func falseClaims(frames []lab.ARPFrame, node string, mac net.HardwareAddr, before, after owners) []netip.Addr {
	var out []netip.Addr
	for _, f := range frames {
		if !f.Claims() || f.SourceMAC.String() != mac.String() {
			continue
		}
		a := f.SenderIP
		b, tested := before[a]
		if !tested || b == node || after[a] == node || slices.Contains(out, a) {
			continue
		}
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// wrongNeighbours returns, sorted, the addresses of want whose entry in
// the neighbour table tab names another node than the owner (nodeOf maps
// a MAC to a node name, "" for none). An address without an entry is not
// counted.
func wrongNeighbours(tab map[netip.Addr]net.HardwareAddr, want owners, nodeOf func(net.HardwareAddr) string) []netip.Addr {
	var out []netip.Addr
	for a, owner := range want {
		mac, ok := tab[a]
		if !ok {
			continue
		}
		if nodeOf(mac) != owner {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// shortAddrs renders addresses as "2 (.200 .201)": the count, then the
// last IPv4 octet of each.
func shortAddrs(as []netip.Addr) string {
	if len(as) == 0 {
		return "0"
	}
	parts := make([]string, len(as))
	for i, a := range as {
		s := a.String()
		if a.Is4() {
			s = s[strings.LastIndexByte(s, '.'):]
		}
		parts[i] = s
	}
	return fmt.Sprintf("%d (%s)", len(as), strings.Join(parts, " "))
}

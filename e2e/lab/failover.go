package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/herald-lb/herald/internal/poll"
)

// FailoverMode is how L2Failover fails the announcing node.
type FailoverMode string

const (
	// FailoverStop stops the speaker gracefully (SIGTERM).
	FailoverStop FailoverMode = "stop"
	// FailoverKill kills the speaker (SIGKILL: no goodbye).
	FailoverKill FailoverMode = "kill"
	// FailoverCut takes the node's switch port down (CutLink).
	FailoverCut FailoverMode = "cut"
)

// SettleL2 waits (up to 60 s) until the client's ARP for ip is answered by
// exactly one node, an HTTP request from the client lands on that node and
// the client's neighbour cache names it, and returns the node.
func (h *Herald) SettleL2(ctx context.Context, ip netip.Addr) (string, error) {
	l := h.lab
	var node string
	_, err := poll.Wait(ctx, 60*time.Second, "", func() error {
		who, err := l.ARPAnswerers(ctx, ip, 1)
		if err != nil || len(who) != 1 {
			return fmt.Errorf("answered by %v: %v", who, err)
		}
		r, gerr := l.Get(ctx, l.ClientNamespace(), ip, BackendPort)
		if gerr == nil && r.Node == who[0] {
			mac, _ := l.Neighbor(ctx, l.ClientNamespace(), ip)
			if l.NodeByMAC(mac) == who[0] {
				node = who[0]
				return nil
			}
		}
		return fmt.Errorf("answered by %v, http %v %v", who, r.Node, gerr)
	}, labEvery)
	if err != nil {
		return "", fmt.Errorf("no stable announcer of %s: %w", ip, err)
	}
	return node, nil
}

// L2Failover measures one layer 2 failover of ip (IPv4, announced with a
// ready endpoint on every node): it settles (SettleL2), fails the
// announcing node by mode, and returns that node and the time from just
// before the stop, kill or cut until the client's kernel reports (netlink
// RTM_NEWNEIGH in the client's namespace) ip with another node's MAC, i.e.
// until the new node's gratuitous ARP (RFC 826) was accepted. It then
// restores the node (link up, speaker started and ready). No move within
// 15 s is an error.
func (h *Herald) L2Failover(ctx context.Context, ip netip.Addr, mode FailoverMode) (string, time.Duration, error) {
	l := h.lab
	winner, err := h.SettleL2(ctx, ip)
	if err != nil {
		return "", 0, err
	}
	wn, _ := l.Node(winner)
	// Linux ignores a new link-layer address within locktime (1 s) of the
	// last update (neigh/default/locktime): a kernel rule, not a wait for
	// a signal; let it pass.
	time.Sleep(1100 * time.Millisecond)
	nsh, err := netns.GetFromName(l.ClientNamespace())
	if err != nil {
		return winner, 0, err
	}
	defer nsh.Close()
	updates := make(chan netlink.NeighUpdate, 64)
	done := make(chan struct{})
	defer close(done)
	if err := netlink.NeighSubscribeAt(nsh, updates, done); err != nil {
		return winner, 0, fmt.Errorf("subscribe to the client's neighbour table: %w", err)
	}
	actErr := make(chan error, 1)
	t0 := time.Now()
	switch mode {
	case FailoverStop:
		go func() { actErr <- h.StopSpeaker(winner) }()
	case FailoverKill:
		go func() { actErr <- h.KillSpeaker(winner) }()
	case FailoverCut:
		go func() { actErr <- h.CutLink(ctx, winner) }()
	default:
		return winner, 0, fmt.Errorf("failover: unknown mode %q", mode)
	}
	var took time.Duration
	timeout := time.After(15 * time.Second)
wait:
	for {
		select {
		case u := <-updates:
			if u.Type != syscall.RTM_NEWNEIGH || !u.IP.Equal(net.IP(ip.AsSlice())) || len(u.HardwareAddr) == 0 {
				continue
			}
			if n := l.NodeByMAC(u.HardwareAddr); n != "" && n != winner {
				took = time.Since(t0)
				break wait
			}
		case <-timeout:
			err = fmt.Errorf("%s of %s (%s): the client's neighbour cache did not move within 15s", mode, winner, wn.MAC)
			break wait
		case <-ctx.Done():
			err = ctx.Err()
			break wait
		}
	}
	if aerr := <-actErr; aerr != nil {
		err = errors.Join(err, aerr)
	}
	if rerr := h.restoreNode(ctx, mode, winner); rerr != nil {
		err = errors.Join(err, fmt.Errorf("restore: %w", rerr))
	}
	return winner, took, err
}

// restoreNode brings a node failed by mode back: link up, speaker
// restarted and ready.
func (h *Herald) restoreNode(ctx context.Context, mode FailoverMode, node string) error {
	if mode == FailoverCut {
		if err := h.RestoreLink(ctx, node); err != nil {
			return err
		}
		// Rejoin at once rather than after --ml-rejoin-interval.
		if err := h.StopSpeaker(node); err != nil {
			return err
		}
	}
	return h.StartSpeaker(ctx, node)
}

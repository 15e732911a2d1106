package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/herald-lb/herald/internal/poll"
)

// testConflict: another host on the segment (the control-plane namespace,
// with Debian's arping -U) claims the address of a Service with a gratuitous
// ARP, so the client's kernel points its neighbour entry at that host. The
// speaker that announces the address re-announces it at once: the client's
// entry and its HTTP traffic come back to the announcing node, and the
// Service gets an l2Conflict Warning naming the other MAC.
func (e l2Env) testConflict(t *testing.T) {
	svc := lbService(l2NS, "conflict", withAnnotation("metallb.io/address-pool", "l2"))
	e.createService(t, svc, e.allNodes()...)
	ip := e.ips(t, l2NS, "conflict", 1)[0]
	key := types.NamespacedName{Namespace: l2NS, Name: "conflict"}
	owner := e.waitAnnouncer(t, key, ip, "announced", anyNode)
	n, _ := e.l.Node(owner)
	rogue := e.l.ControlNamespace()
	ctx := testCtx(t, time.Minute)
	out, err := e.l.Exec(ctx, rogue, "ip", "-br", "link", "show", "eth0")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(out) // "eth0@if12 UP 02:00:c6:33:64:fe <...>"
	if len(f) < 3 {
		t.Fatalf("rogue's eth0: %q", out)
	}
	rogueMAC, err := net.ParseMAC(f[2])
	if err != nil {
		t.Fatal(err)
	}
	// Exit status 1: nobody answers an unsolicited ARP.
	_, _ = e.l.Exec(ctx, rogue, "arping", "-U", "-c", "1", "-w", "1", "-i", "eth0", "-S", ip.String(), ip.String())

	want := fmt.Sprintf("another host (MAC %s) answered for %s on interface eth0 of node %s", rogueMAC, ip, owner)
	poll.Until(t, 20*time.Second, "l2Conflict event on the Service", func() error {
		evs, err := e.k.CoreV1().Events(l2NS).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=conflict"})
		if err != nil {
			return err
		}
		for _, ev := range evs.Items {
			if ev.Type == corev1.EventTypeWarning && ev.Reason == "l2Conflict" && strings.Contains(ev.Message, want) {
				return nil
			}
		}
		return fmt.Errorf("no Warning l2Conflict %q in:%s", want, e.events(l2NS, "conflict"))
	})
	poll.Until(t, 20*time.Second, "client's neighbour entry back on "+owner, func() error {
		mac, err := e.l.Neighbor(context.Background(), e.l.ClientNamespace(), ip)
		if err != nil {
			return err
		}
		if mac.String() != n.MAC.String() {
			return fmt.Errorf("client's entry for %s is %s, the owner %s is %s (the other host %s)", ip, mac, owner, n.MAC, rogueMAC)
		}
		return nil
	})
	e.waitServedBy(t, ip, owner)
	e.del(t, svc)
}

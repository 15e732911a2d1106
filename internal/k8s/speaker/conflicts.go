package speaker

import (
	"net"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
)

// reasonL2Conflict is the Warning event on a Service when another host
// answered for one of its layer 2 IPs (Herald's; MetalLB detects no
// conflicts).
const reasonL2Conflict = "l2Conflict"

// l2Owners is implemented by an L2Announcer that can say which owners
// (Service keys) announce an IP (*layer2.Announcer does).
type l2Owners interface {
	Owners(ip netip.Addr) []string
}

// L2Conflict records that another host, at MAC address mac, answered on
// interface iface for ip, an IP this node announces in layer 2 and has
// re-announced in reply: a Warning event l2Conflict on every Service the
// layer 2 announcer announces ip for. It has the shape of
// layer2.Options.OnConflict (which calls it at most once per
// layer2.Options.ConflictInterval per IP and interface) and returns at once:
// the Services are read from the cache, and the events recorded, on a
// goroutine of their own. Without an L2Announcer that reports owners
// (Owners(ip) []string) it records nothing.
func (s *Controller) L2Conflict(ip netip.Addr, mac net.HardwareAddr, iface string) {
	o, ok := s.opts.L2.(l2Owners)
	if !ok {
		return
	}
	keys := o.Owners(ip)
	if len(keys) == 0 {
		return
	}
	go func() {
		for _, key := range keys {
			svc, err := s.service(key)
			if svc == nil {
				s.log.Debug("no event for layer 2 conflict: the Service is not in the cache", "service", key, "ip", ip, "error", err)
				continue
			}
			s.event(svc, corev1.EventTypeWarning, reasonL2Conflict,
				"another host (MAC %s) answered for %s on interface %s of node %s, which announces it; re-announced",
				mac, ip, iface, s.opts.NodeName)
		}
	}()
}

package layer2

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"
)

// Probing an address on the segment: before this node answers an address
// whose previous holder sends no hand-over release (a MetalLB speaker that
// left memberlist but answers until its process exits, a live one that has
// not processed the membership change yet; see announce.Handover), the
// speaker asks whether anybody still answers it. A probe round sends, on
// each interface the address would be answered on, an ARP request for it
// (RFC 826; sender protocol address 0.0.0.0, the ARP probe of RFC 5227
// §2.1.1, so no host caches a mapping from it) for IPv4, or a neighbor
// solicitation for it (address resolution, RFC 4861 §7.2.2: from the
// interface's link-local address with a source link-layer address option,
// to the target's solicited-node multicast group) for IPv6. Linux, MetalLB
// and Herald answer both (a duplicate address detection solicitation, from
// ::, would not be answered by MetalLB or Herald: they require the source
// link-layer address option). Every ARP packet and neighbor advertisement
// the responders read that claims the address for a MAC address not of
// this node counts as an answer (the claims of conflict.go).

// Default probe timing. Each silent probe round adds to the time the
// address has no answerer once the previous holder went silent, which must
// stay well under the hand-over's 1 s target: with 25 ms × 3 the taker
// answers 75 to 100 ms after the previous holder's last answer (the round
// in which it went silent, plus three silent ones). Three rounds in a row
// without an answer rule out a single lost probe or reply; an answer that
// arrives late (a userspace responder on a loaded node) still arrives in a
// later round and resets the count, so only a holder whose first answer
// takes longer than the three rounds is missed, and then its next answers
// arrive while the taker answers too (what answering at once did always).
// A LAN round trip is well under 1 ms; 25 ms leaves room for scheduling
// on a busy node without making the gap noticeable.
const (
	// DefaultProbeInterval is the time between two probe rounds, and how
	// long a round waits for answers.
	DefaultProbeInterval = 25 * time.Millisecond
	// DefaultProbeCount is the number of consecutive unanswered rounds
	// after which the address is taken as silent.
	DefaultProbeCount = 3
)

// ErrNoProbeInterface is returned by [Announcer.Probe] when no interface
// can send the probe (none eligible for the address's family among those
// asked for, the responders not open yet, or Run has ended).
var ErrNoProbeInterface = errors.New("no interface to probe on")

// ProbeResult is what [Announcer.Probe] saw.
type ProbeResult struct {
	// Rounds is the number of probe rounds sent.
	Rounds int
	// Answers is the number of answers (claims of the address) from other
	// hosts received.
	Answers int
	// AnsweredBy is the MAC address of the last host that answered, nil
	// when none did.
	AnsweredBy net.HardwareAddr
}

// prober is one running Probe: the claims of its address heard on its
// interfaces.
type prober struct {
	ifaces []string // empty: every interface
	mu     sync.Mutex
	heard  []claim
	// answers counts the answers from other hosts so far (the tests read
	// it while the probe runs).
	answers atomic.Int64
}

func (p *prober) take() []claim {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.heard
	p.heard = nil
	return out
}

// probeHeard hands a claim read on interface ifname to the probes of its
// IP. It runs on a responder's goroutine and never blocks on more than the
// probe lock.
func (a *Announcer) probeHeard(ifname string, c claim) {
	a.probeMu.Lock()
	defer a.probeMu.Unlock()
	for p := range a.probes[c.IP] {
		if len(p.ifaces) == 0 || slices.Contains(p.ifaces, ifname) {
			p.mu.Lock()
			p.heard = append(p.heard, c)
			p.mu.Unlock()
		}
	}
}

// Probe asks the segment whether another host answers ip: it sends a probe
// round (an ARP request for IPv4, a neighbor solicitation for IPv6; see
// the comment at the top of this file) on each of the given interfaces
// that has an open responder of ip's family (empty: every such interface),
// every Options.ProbeInterval (DefaultProbeInterval), and returns once
// Options.ProbeCount (DefaultProbeCount) consecutive rounds drew no answer
// from a MAC address other than this node's, with a nil error. It returns
// ctx's error when ctx ends first, ErrInvalidIP for an IP that cannot be
// announced, ErrNoProbeInterface when a round can be sent on no interface,
// and a send error when every send of a round failed; the result says what
// was seen until then. Several probes of one IP may run at once; an
// address this node answers itself is answered by its own MAC, which does
// not count. Safe for concurrent use.
func (a *Announcer) Probe(ctx context.Context, ip netip.Addr, interfaces []string) (ProbeResult, error) {
	var res ProbeResult
	n, ok := normalize(ip)
	if !ok {
		return res, fmt.Errorf("probe %s: %w", ip, ErrInvalidIP)
	}
	p := &prober{ifaces: slices.Clone(interfaces)}
	a.probeMu.Lock()
	if a.probes[n] == nil {
		a.probes[n] = map[*prober]struct{}{}
	}
	a.probes[n][p] = struct{}{}
	a.probeMu.Unlock()
	defer func() {
		a.probeMu.Lock()
		delete(a.probes[n], p)
		if len(a.probes[n]) == 0 {
			delete(a.probes, n)
		}
		a.probeMu.Unlock()
	}()
	silent := 0
	for {
		if err := a.sendProbes(n, p.ifaces); err != nil {
			return res, fmt.Errorf("probe %s: %w", n, err)
		}
		res.Rounds++
		if !sleepCtx(ctx, a.opts.probeInterval) {
			return res, ctx.Err()
		}
		answered := false
		heard := p.take()
		a.mu.Lock()
		for _, c := range heard {
			if !a.ownMACs[string(c.MAC)] {
				answered = true
				res.Answers++
				p.answers.Add(1)
				res.AnsweredBy = c.MAC
			}
		}
		a.mu.Unlock()
		if answered {
			silent = 0
			continue
		}
		if silent++; silent >= a.opts.probeCount {
			return res, nil
		}
	}
}

// sendProbes sends one probe round for ip on the interfaces named (empty:
// all) that have an open responder of its family. It fails when none has,
// or when every send failed.
func (a *Announcer) sendProbes(ip netip.Addr, ifaces []string) error {
	type send struct {
		name string
		fn   func() error
	}
	var sends []send
	a.mu.Lock()
	for name, l := range a.links {
		if len(ifaces) != 0 && !slices.Contains(ifaces, name) {
			continue
		}
		switch {
		case ip.Is4() && l.arp != nil:
			r := l.arp
			sends = append(sends, send{name, func() error { return r.probe(ip) }})
		case ip.Is6() && l.ndp != nil && l.info.LinkLocal.IsValid():
			r, src := l.ndp, l.info.LinkLocal
			sends = append(sends, send{name, func() error { return r.probe(src, ip) }})
		}
	}
	a.mu.Unlock()
	if len(sends) == 0 {
		return ErrNoProbeInterface
	}
	var errs []error
	for _, s := range sends {
		if err := s.fn(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == len(sends) {
		return errors.Join(errs...)
	}
	for _, err := range errs {
		a.log.Debug("probe not sent on one interface", "ip", ip, "error", err)
	}
	return nil
}

// arpProbe returns the ARP probe for ip from mac: a broadcast ARP request
// with sender protocol address 0.0.0.0 and a zero target hardware address
// (RFC 5227 §2.1.1).
func arpProbe(mac net.HardwareAddr, ip netip.Addr) ([]byte, error) {
	return arpFrame(arp.OperationRequest, mac, netip.IPv4Unspecified(), make(net.HardwareAddr, len(mac)), ip, ethernet.Broadcast)
}

// probe sends one ARP probe for ip.
func (r *arpResponder) probe(ip netip.Addr) error {
	f, err := arpProbe(r.ifc.MAC, ip)
	if err != nil {
		return err
	}
	if _, err := r.conn.WriteTo(f, &packet.Addr{HardwareAddr: ethernet.Broadcast}); err != nil {
		return fmt.Errorf("send ARP probe for %s on %s: %w", ip, r.ifc.Name, err)
	}
	return nil
}

// solicitedNodeMAC returns the Ethernet multicast address of the
// solicited-node multicast group of ip (RFC 2464 §7: 33:33 and the
// group's last four octets).
func solicitedNodeMAC(ip netip.Addr) (netip.Addr, net.HardwareAddr, error) {
	g, err := ndp.SolicitedNodeMulticast(ip)
	if err != nil {
		return g, nil, err
	}
	b := g.As16()
	return g, net.HardwareAddr{0x33, 0x33, b[12], b[13], b[14], b[15]}, nil
}

// probe sends one neighbor solicitation for ip from src (the interface's
// link-local address) to ip's solicited-node multicast group, with the
// interface's MAC as source link-layer address (RFC 4861 §7.2.2).
func (r *ndpResponder) probe(src, ip netip.Addr) error {
	g, mac, err := solicitedNodeMAC(ip)
	if err != nil {
		return fmt.Errorf("solicited-node group of %s: %w", ip, err)
	}
	ns := &ndp.NeighborSolicitation{
		TargetAddress: ip,
		Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: r.ifc.MAC}},
	}
	if err := r.send(mac, src.WithZone(""), g, ns); err != nil {
		return fmt.Errorf("send neighbor solicitation for %s on %s: %w", ip, r.ifc.Name, err)
	}
	return nil
}

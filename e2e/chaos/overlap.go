package chaos

import (
	"net"
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/mdlayher/arp"

	"github.com/herald-lb/herald/e2e/lab"
)

// overlap is a span of time during which two nodes (or a node and a
// foreign MAC) both answered one address, as the client saw it.
type overlap struct {
	Addr netip.Addr
	// Nodes are the two answerers, sorted.
	Nodes [2]string
	// Start is the later of the two answerers' first claims in the span
	// (when the second one began to answer); End the earlier of their
	// ends (when the first one stopped).
	Start, End time.Time
}

// Duration is End - Start.
func (o overlap) Duration() time.Duration { return o.End.Sub(o.Start) }

// stretch is a span during which one answerer kept answering an address.
type stretch struct {
	who        string
	start, end time.Time
}

// answerStretches reads frames captured on the client's switch port
// (lab.CaptureClientARP, oldest first) and returns, per address of addrs,
// the stretches during which each answerer answered it. A claim is an ARP
// reply or gratuitous ARP (lab.ARPFrame.Claims) whose sender address is
// the address, from the MAC nodeOf names (or the MAC itself when it names
// none); a request is an ordinary ARP request for the address from client.
// An answerer's stretch starts at its first claim and goes on while it
// keeps claiming; it ends once breakAfter requests in a row went by
// without a claim from it, at the first of those requests (the answerer
// stopped between its last claim and that request: the end is late by at
// most one request interval, so overlaps are over-, never under-counted).
// A stretch still open at the end of the capture ends at its last claim,
// or at the first request it left unanswered.
func answerStretches(frames []lab.ARPFrame, addrs []netip.Addr, client netip.Addr, nodeOf func(net.HardwareAddr) string, breakAfter int) map[netip.Addr][]stretch {
	type open struct {
		start, last time.Time
		// missed requests since last, the first of them at firstMissed.
		missed      int
		firstMissed time.Time
	}
	cur := map[netip.Addr]map[string]*open{}
	for _, a := range addrs {
		cur[a] = map[string]*open{}
	}
	out := map[netip.Addr][]stretch{}
	end := func(a netip.Addr, who string, o *open) {
		e := o.last
		if o.missed > 0 {
			e = o.firstMissed
		}
		out[a] = append(out[a], stretch{who: who, start: o.start, end: e})
	}
	for _, f := range frames {
		switch {
		case f.Operation == arp.OperationRequest && !f.Gratuitous() && f.SenderIP == client:
			byWho, ok := cur[f.TargetIP]
			if !ok {
				continue
			}
			for who, o := range byWho {
				if o.missed == 0 {
					o.firstMissed = f.At
				}
				o.missed++
				if o.missed >= breakAfter {
					end(f.TargetIP, who, o)
					delete(byWho, who)
				}
			}
		case f.Claims():
			byWho, ok := cur[f.SenderIP]
			if !ok {
				continue
			}
			who := nodeOf(f.SenderMAC)
			if who == "" {
				who = f.SenderMAC.String()
			}
			o := byWho[who]
			if o == nil {
				o = &open{start: f.At}
				byWho[who] = o
			}
			o.last, o.missed = f.At, 0
		}
	}
	for a, byWho := range cur {
		whos := make([]string, 0, len(byWho))
		for who := range byWho {
			whos = append(whos, who)
		}
		sort.Strings(whos)
		for _, who := range whos {
			end(a, who, byWho[who])
		}
	}
	for a := range out {
		slices.SortFunc(out[a], func(x, y stretch) int { return x.start.Compare(y.start) })
	}
	return out
}

// overlaps returns every span during which two answerers' stretches of
// one address intersect (for longer than 0), ordered by address and start.
func overlaps(stretches map[netip.Addr][]stretch) []overlap {
	var out []overlap
	for a, ss := range stretches {
		for i, x := range ss {
			for _, y := range ss[i+1:] {
				if x.who == y.who {
					continue
				}
				s, e := x.start, x.end
				if y.start.After(s) {
					s = y.start
				}
				if y.end.Before(e) {
					e = y.end
				}
				if !e.After(s) {
					continue
				}
				n := [2]string{x.who, y.who}
				if n[1] < n[0] {
					n[0], n[1] = n[1], n[0]
				}
				out = append(out, overlap{Addr: a, Nodes: n, Start: s, End: e})
			}
		}
	}
	slices.SortFunc(out, func(x, y overlap) int {
		if c := x.Addr.Compare(y.Addr); c != 0 {
			return c
		}
		return x.Start.Compare(y.Start)
	})
	return out
}

package herald

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/herald-lb/herald/internal/explain"
)

// table is a tabwriter with an indent.
type table struct {
	tw     *tabwriter.Writer
	indent string
}

func newTable(w io.Writer, indent string) *table {
	return &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0), indent: indent}
}

func (t *table) row(cols ...string) {
	fmt.Fprintln(t.tw, t.indent+strings.Join(cols, "\t"))
}

func (t *table) flush() { _ = t.tw.Flush() }

func list(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ",")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func footer(w io.Writer, notes, problems []string) {
	if len(notes) > 0 {
		fmt.Fprintln(w, "\nNotes:")
		for _, n := range notes {
			fmt.Fprintln(w, "  - "+n)
		}
	}
	if len(problems) == 0 {
		fmt.Fprintln(w, "\nProblems: none")
		return
	}
	fmt.Fprintf(w, "\nProblems (%d):\n", len(problems))
	for _, p := range problems {
		fmt.Fprintln(w, "  ! "+p)
	}
}

func renderWhy(w io.Writer, r *explain.WhyReport) {
	fmt.Fprintf(w, "Service %s: type %s, externalTrafficPolicy %s", r.Service, r.Type, r.ExternalTrafficPolicy)
	if r.LoadBalancerClass != "" {
		fmt.Fprintf(w, ", loadBalancerClass %s", r.LoadBalancerClass)
	}
	fmt.Fprintf(w, "\nServing endpoints on nodes: %s\n", list(r.EndpointNodes))

	a := &r.Allocation
	fmt.Fprintln(w, "\nAllocation (controller, recomputed):")
	if len(a.IPs) > 0 {
		fmt.Fprintf(w, "  addresses: %s (pool %s)\n", strings.Join(a.IPs, ", "), dash(a.Pool))
	} else if a.Handled {
		fmt.Fprintln(w, "  addresses: none (pending)")
	}
	fmt.Fprintf(w, "  why: %s\n", a.Why)
	if a.Error != "" {
		fmt.Fprintf(w, "  allocator: %s\n", a.Error)
	}
	if len(a.RequestedIPs) > 0 || a.RequestedPool != "" || a.SharingKey != "" {
		fmt.Fprintf(w, "  asks for: addresses %s, pool %s, allow-shared-ip %s\n", list(a.RequestedIPs), dash(a.RequestedPool), dash(a.SharingKey))
	}
	if a.Handled && len(a.Pools) > 0 {
		switch {
		case a.RequestedPool != "":
			fmt.Fprintf(w, "  allocation tries: %s only (named by metallb.io/address-pool)\n", a.RequestedPool)
		case len(a.RequestedIPs) > 0:
			fmt.Fprintf(w, "  allocation tries: %s (the pool holding the requested addresses)\n", list(a.CandidateOrder))
		default:
			fmt.Fprintf(w, "  automatic allocation tries: %s\n", list(a.CandidateOrder))
		}
		t := newTable(w, "  ")
		t.row("POOL", "AUTOASSIGN", "SELECTS", "FREE-IPV4", "FREE-IPV6", "HAS-REQUESTED", "WHY-NOT")
		for _, p := range a.Pools {
			t.row(p.Name, yesNo(p.AutoAssign), yesNo(p.Selected), count(p.FreeIPv4), count(p.FreeIPv6), list(p.Contains), dash(p.WhyNot))
		}
		t.flush()
	}
	if r.NotAnnounced != "" {
		fmt.Fprintf(w, "\nAnnouncement: none (%s)\n", r.NotAnnounced)
	}
	for _, ip := range r.IPs {
		fmt.Fprintf(w, "\nAddress %s (pool %s):\n", ip.IP, dash(ip.Pool))
		if ip.L2 == nil && ip.BGP == nil {
			fmt.Fprintln(w, "  not announced in any mode")
		}
		if m := ip.L2; m != nil {
			fmt.Fprintf(w, "  Layer 2 (%s election): winner %s: %s\n", dash(string(m.Election)), dash(m.Winner), m.WinnerWhy)
			nodeTable(w, m.Nodes, true)
			if len(m.Ranking) > 0 {
				if m.BallotIP != "" {
					fmt.Fprintf(w, "    ranking of %s (the Service's first address, whose winner takes every address):\n", m.BallotIP)
				}
				balanced := m.Election == explain.L2ElectionBalanced
				t := newTable(w, "    ")
				head := []string{"RANK", "CANDIDATE", "SERVES", "PREFERENCE", "HASH"}
				if balanced {
					head = append(head, "LOAD")
				}
				t.row(head...)
				for i, c := range m.Ranking {
					row := []string{fmt.Sprint(i + 1), c.Node, fmt.Sprint(c.Serves), fmt.Sprint(c.Preference), c.Hash}
					if balanced {
						row = append(row, fmt.Sprintf("%d/%d", c.Load, m.Capacity))
					}
					t.row(row...)
				}
				t.flush()
			}
		}
		if m := ip.BGP; m != nil {
			fmt.Fprintln(w, "  BGP:")
			nodeTable(w, m.Nodes, false)
			if len(m.Paths) > 0 {
				t := newTable(w, "    ")
				t.row("NODE", "ADVERTISEMENT", "PREFIX", "COMMUNITIES", "LOCAL-PREF", "PEERS (SESSION)")
				for _, p := range m.Paths {
					lp := "-"
					if p.LocalPref != nil {
						lp = fmt.Sprint(*p.LocalPref)
					}
					comms := append(append([]string{}, p.Communities...), p.LargeCommunities...)
					if p.Weight > 0 {
						comms = append(comms, fmt.Sprintf("link-bandwidth:%d", p.Weight))
					}
					t.row(p.Node, p.Advertisement, p.Prefix, list(comms), lp, peerSessions(p.Peers, p.Sessions))
				}
				t.flush()
			}
		}
	}
	fmt.Fprintln(w, "\nReported by Herald:")
	fmt.Fprintf(w, "  condition %s: %s\n", explain.AllocationConditionType, dash(r.Reported.Condition))
	if len(r.Reported.L2) == 0 {
		fmt.Fprintln(w, "  ServiceL2Status: none")
	}
	for _, s := range r.Reported.L2 {
		fmt.Fprintf(w, "  ServiceL2Status %s: node %s, interfaces %s\n", s.Object, s.Node, list(s.Interfaces))
	}
	if len(r.Reported.BGP) == 0 {
		fmt.Fprintln(w, "  ServiceBGPStatus: none")
	}
	for _, s := range r.Reported.BGP {
		fmt.Fprintf(w, "  ServiceBGPStatus %s: node %s, peers %s\n", s.Object, s.Node, peerSessions(s.Peers, s.Sessions))
	}
	if len(r.Reported.Events) > 0 {
		fmt.Fprintln(w, "  events:")
		t := newTable(w, "    ")
		t.row("LAST", "TYPE", "REASON", "COUNT", "MESSAGE")
		for _, e := range r.Reported.Events {
			n := "-"
			if e.Count > 0 {
				n = fmt.Sprint(e.Count)
			}
			t.row(dash(e.Last), e.Type, e.Reason, n, e.Message)
		}
		t.flush()
	}
	footer(w, r.Notes, r.Problems)
}

func nodeTable(w io.Writer, nodes []explain.NodeVerdict, l2 bool) {
	t := newTable(w, "    ")
	extra := "PEERS"
	if l2 {
		extra = "INTERFACES"
	}
	t.row("NODE", "ANNOUNCES", "LIVE", "REASON", extra, "DETAIL")
	for _, n := range nodes {
		x := list(n.Peers)
		if l2 {
			x = "-"
			if n.Announce {
				x = "all"
				if len(n.Interfaces) > 0 {
					x = list(n.Interfaces)
				}
			}
		}
		t.row(n.Node, yesNo(n.Announce), yesNo(n.Live), dash(n.Reason), x, dash(n.Detail))
	}
	t.flush()
}

func count(n int64) string {
	switch {
	case n < 0:
		return "-"
	case n == math.MaxInt64:
		return "unbounded"
	}
	return fmt.Sprint(n)
}

func renderPools(w io.Writer, r *explain.PoolsReport) {
	t := newTable(w, "")
	t.row("POOL", "FAMILY", "SIZE", "USED", "FREE", "STATUS-USED/FREE", "AUTOASSIGN", "PRIORITY", "L2ADVERTISEMENTS", "BGPADVERTISEMENTS", "NAMESPACES", "SERVICE-SELECTORS", "SERVICES")
	for _, p := range r.Pools {
		st := "-"
		if p.ReportedUsed >= 0 {
			st = fmt.Sprintf("%d/%s", p.ReportedUsed, count(p.ReportedFree))
		}
		t.row(p.Pool, p.Family, count(p.Size), fmt.Sprint(p.Used), count(p.Free), st, yesNo(p.AutoAssign), fmt.Sprint(p.Priority),
			list(p.L2Advertisements), list(p.BGPAdvertisements), list(p.Namespaces), list(p.ServiceSelectors), list(p.Services))
	}
	t.flush()
	if len(r.Pending) > 0 {
		fmt.Fprintln(w, "\nPending Services:")
		t := newTable(w, "  ")
		t.row("SERVICE", "ALLOCATOR")
		for _, p := range r.Pending {
			t.row(p.Service, p.Error)
		}
		t.flush()
	}
	footer(w, r.Notes, r.Problems)
}

func renderPeers(w io.Writer, r *explain.PeersReport) {
	t := newTable(w, "")
	t.row("NODE", "PEER", "ADDRESS", "MY-ASN", "PEER-ASN", "ROUTER-ID", "SPEAKER", "STATE", "SINCE", "SERVICES", "DETAIL")
	for _, s := range r.Sessions {
		live := "Ready"
		if !s.Live {
			live = "down"
		}
		t.row(s.Node, s.Peer, s.Address, fmt.Sprint(s.MyASN), fmt.Sprint(s.PeerASN), dash(s.RouterID), live, s.State, dash(s.Since), fmt.Sprint(s.Services), dash(s.Detail))
	}
	t.flush()
	if len(r.Sessions) == 0 {
		fmt.Fprintln(w, "no BGPPeer selects any node")
	}
	fmt.Fprintln(w, "\nSource: "+r.Source)
	footer(w, r.Notes, r.Problems)
}

func renderConfig(w io.Writer, r *explain.ConfigReport) {
	t := newTable(w, "")
	t.row("OBJECT", "COMPONENT", "NODE", "RESULT", "ERRORS")
	for _, c := range r.Components {
		t.row(c.Object, dash(c.Component), dash(c.Node), c.Result, dash(c.ErrorSummary))
	}
	t.flush()
	if len(r.Components) == 0 {
		fmt.Fprintln(w, "no ConfigurationState: is Herald installed in this namespace?")
	}
	for _, c := range r.Components {
		for _, cond := range c.Conditions {
			fmt.Fprintf(w, "  %s: %s\n", c.Object, cond)
		}
	}
	fmt.Fprintf(w, "\nThe plugin's own build of the configuration: %s\n", r.Build)
	for _, d := range r.Dropped {
		fmt.Fprintln(w, "  left out (transient): "+d)
	}
	for _, d := range r.Warnings {
		fmt.Fprintln(w, "  warning: "+d)
	}
	footer(w, r.Notes, r.Problems)
}

// peerSessions renders peers with their session state: "tor (Established),
// tor2 (Active since T)"; "-" for none.
func peerSessions(peers []string, sessions []explain.PeerSession) string {
	if len(peers) == 0 {
		return "-"
	}
	out := make([]string, len(peers))
	for i, p := range peers {
		out[i] = p
		if i < len(sessions) {
			st := sessions[i].State
			if !sessions[i].Established() && sessions[i].Since != "" {
				st += " since " + sessions[i].Since
			}
			out[i] += " (" + st + ")"
		}
	}
	return strings.Join(out, ", ")
}

package members

import (
	"bytes"
	"net/netip"
	"strings"

	"github.com/hashicorp/memberlist"
)

// Layer 2 hand-over releases. A speaker that stopped answering layer 2
// addresses while it stays live (the election gave them to another node)
// tells every other member so, in a best-effort user message
// "herald-released:<node name> <ip> <ip> ..." (UDP, encrypted like all
// gossip; split so that each message fits one memberlist packet). The
// taker of an address waits for it before answering, so that two nodes
// never answer one address (see internal/announce.Handover and
// docs/l2-failover.md, "Hand-over"). A lost message costs the taker the
// hand-over timeout, nothing else. MetalLB's speakers have no memberlist
// Delegate and drop user messages; older Heralds ignore unknown ones. A
// speaker that sends releases says so in its node metadata
// (Config.SendsReleases, "l2Releases"), and takers wait only for members
// that do ([List.ReleaseSenders]): a MetalLB speaker or an older Herald
// never releases, so waiting for it would only leave the address
// unanswered for the whole timeout.

// releasedPrefix starts a release message.
const releasedPrefix = "herald-released:"

// maxReleaseMessage bounds the length of one release message: memberlist
// sends user messages in UDP packets of at most UDPBufferSize (1400 bytes
// by default), which also carry its header, the label and the encryption
// overhead (about 50 bytes).
const maxReleaseMessage = 1200

// releaseMessages returns the messages announcing that node released ips,
// each at most maxReleaseMessage bytes long (one address per message at
// least).
func releaseMessages(node string, ips []netip.Addr) [][]byte {
	var out [][]byte
	head := releasedPrefix + node
	var b strings.Builder
	for _, ip := range ips {
		s := ip.String()
		if b.Len() > 0 && b.Len()+1+len(s) > maxReleaseMessage {
			out = append(out, []byte(b.String()))
			b.Reset()
		}
		if b.Len() == 0 {
			b.WriteString(head)
		}
		b.WriteByte(' ')
		b.WriteString(s)
	}
	if b.Len() > 0 {
		out = append(out, []byte(b.String()))
	}
	return out
}

// parseRelease parses a release message: the sender's node name and the
// addresses (unparsable ones skipped). ok is false when msg is not one.
func parseRelease(msg []byte) (node string, ips []netip.Addr, ok bool) {
	b, ok := bytes.CutPrefix(msg, []byte(releasedPrefix))
	if !ok {
		return "", nil, false
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return "", nil, false
	}
	for _, f := range fields[1:] {
		if ip, err := netip.ParseAddr(f); err == nil {
			ips = append(ips, ip.Unmap().WithZone(""))
		}
	}
	return fields[0], ips, true
}

// Released tells every other member that this speaker no longer answers
// ips in layer 2 (best effort, it never blocks on the network; see the
// comment at the top of this file). The layer 2 announcer's
// OnReleased calls it. Before Run has bound, and after it left, it sends
// nothing.
func (l *List) Released(ips []netip.Addr) {
	if len(ips) == 0 {
		return
	}
	l.mu.Lock()
	ml := l.ml
	others := make([]memberlist.Node, 0, len(l.nodes))
	for name, n := range l.nodes {
		if name != l.cfg.NodeName && l.live[name] {
			others = append(others, n)
		}
	}
	l.mu.Unlock()
	if ml == nil || len(others) == 0 {
		return
	}
	msgs := releaseMessages(l.cfg.NodeName, ips)
	for _, n := range others {
		for _, m := range msgs {
			if err := ml.SendBestEffort(&n, m); err != nil {
				l.log.Debug("memberlist release not sent", "member", n.Name, "error", err)
			}
		}
	}
	l.log.Debug("memberlist: released layer 2 addresses", "ips", ips, "members", len(others))
}

// handleRelease passes a received release to Config.OnReleased; it reports
// whether msg was one.
func (l *List) handleRelease(msg []byte) bool {
	node, ips, ok := parseRelease(msg)
	if !ok {
		return false
	}
	if node != l.cfg.NodeName && len(ips) > 0 && l.cfg.OnReleased != nil {
		l.cfg.OnReleased(node, ips)
	}
	return true
}

// ReleaseSenders returns the other members (alive or suspect) whose node
// metadata advertises that they send releases (Config.SendsReleases), as
// name -> true; a MetalLB speaker (no metadata) and a Herald from before
// the advertisement are not among them.
func (l *List) ReleaseSenders() map[string]bool {
	k := &l.keys
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string]bool{}
	for name, m := range k.peers {
		if m.Releases {
			out[name] = true
		}
	}
	return out
}

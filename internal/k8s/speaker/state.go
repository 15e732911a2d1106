package speaker

import (
	"cmp"
	"hash/maphash"
	"net/netip"
	"slices"

	"github.com/herald-lb/herald/internal/announce"
)

// The per-Service state (serviceState) is kept compact: it holds what the
// next decision of the Service compares against, in codes and addresses,
// not in the strings that logs, events and metrics show (issue #16: 10,000
// Services on one speaker).

// protocol is an announcing protocol: protocolL2 or protocolBGP. String
// returns its name in events, logs and metrics (protoL2, protoBGP).
type protocol uint8

const (
	protocolL2 protocol = iota + 1
	protocolBGP
)

func (p protocol) String() string {
	switch p {
	case protocolL2:
		return protoL2
	case protocolBGP:
		return protoBGP
	}
	return ""
}

// protocolOf returns the protocol named name (protoL2 or protoBGP), 0 for
// another name.
func protocolOf(name string) protocol {
	switch name {
	case protoL2:
		return protocolL2
	case protoBGP:
		return protocolBGP
	}
	return 0
}

// announcedIP is one (protocol, IP) a Service is announced with.
type announcedIP struct {
	protocol protocol
	ip       netip.Addr
}

func compareAnnounced(a, b announcedIP) int {
	return cmp.Or(cmp.Compare(a.protocol, b.protocol), a.ip.Compare(b.ip))
}

func sortAnnounced(as []announcedIP) { slices.SortFunc(as, compareAnnounced) }

// hasProtocol reports whether as holds an IP announced with p.
func hasProtocol(as []announcedIP, p protocol) bool {
	return slices.ContainsFunc(as, func(a announcedIP) bool { return a.protocol == p })
}

// ipsOf returns the IPs of as announced with p, as strings in string order
// (event messages and logs).
func ipsOf(as []announcedIP, p protocol) []string {
	var out []string
	for _, a := range as {
		if a.protocol == p {
			out = append(out, a.ip.String())
		}
	}
	slices.Sort(out)
	return out
}

// reasonCode is a reason for not announcing in one byte: an
// announce.Reason, or from glueReasonBase on one of the glue's reasons
// (glueReasons). String returns its name (announce.Reason.String's, or the
// glue's constant).
type reasonCode uint8

// glueReasonBase is the code of glueReasons[0]; announce.Reason stays below.
const glueReasonBase reasonCode = 128

// reasonUnknown is the code of a name that is no reason (not produced).
const reasonUnknown reasonCode = 255

// glueReasons are the reasons the glue adds to the decision's.
var glueReasons = [...]string{reasonMemberlistNotJoined, reasonInterfacesNotListed, reasonHandoverPending}

// reasonCodes maps every reason's name to its code.
var reasonCodes = func() map[string]reasonCode {
	m := map[string]reasonCode{}
	for r := announce.Reason(0); reasonCode(r) < glueReasonBase; r++ {
		name := r.String()
		if name == "unknown" {
			break
		}
		m[name] = reasonCode(r)
	}
	for i, name := range glueReasons {
		m[name] = glueReasonBase + reasonCode(i)
	}
	return m
}()

func reasonCodeOf(name string) reasonCode {
	if c, ok := reasonCodes[name]; ok {
		return c
	}
	return reasonUnknown
}

func (c reasonCode) String() string {
	switch {
	case c < glueReasonBase:
		return announce.Reason(c).String()
	case int(c-glueReasonBase) < len(glueReasons):
		return glueReasons[c-glueReasonBase]
	}
	return "unknown"
}

// notAnnouncedRecord is what serviceState keeps of a notAnnounced: the
// (protocol, IP) it is about (the zero IP for the Service as a whole), the
// reason's code, a hash of the detail (only compared: a changed detail is
// logged again) and the winner.
type notAnnouncedRecord struct {
	protocol protocol
	reason   reasonCode
	ip       netip.Addr
	detail   uint64
	winner   string
}

// detailSeed seeds the hashes of notAnnouncedRecord.detail.
var detailSeed = maphash.MakeSeed()

// newNotAnnouncedRecord returns the record of n for a. An a.ip that does
// not parse (only "" is produced: the Service as a whole) is the zero IP.
func newNotAnnouncedRecord(a announcement, n notAnnounced) notAnnouncedRecord {
	ip, _ := netip.ParseAddr(a.ip)
	return notAnnouncedRecord{protocol: protocolOf(a.protocol), reason: reasonCodeOf(n.reason), ip: ip,
		detail: maphash.String(detailSeed, n.detail), winner: n.winner}
}

func compareNotAnnounced(a, b notAnnouncedRecord) int {
	return cmp.Or(cmp.Compare(a.protocol, b.protocol), a.ip.Compare(b.ip))
}

// findNotAnnounced returns the record of rs (sorted) about the (protocol,
// IP) of key.
func findNotAnnounced(rs []notAnnouncedRecord, key notAnnouncedRecord) (notAnnouncedRecord, bool) {
	i, ok := slices.BinarySearchFunc(rs, key, compareNotAnnounced)
	if !ok {
		return notAnnouncedRecord{}, false
	}
	return rs[i], true
}

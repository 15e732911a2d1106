package chaos

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/arp"

	"github.com/herald-lb/herald/e2e/lab"
)

var (
	macN1 = net.HardwareAddr{2, 0, 198, 51, 100, 11}
	macN2 = net.HardwareAddr{2, 0, 198, 51, 100, 12}
	a200  = netip.MustParseAddr("198.51.100.200")
	a201  = netip.MustParseAddr("198.51.100.201")
	a202  = netip.MustParseAddr("198.51.100.202")
	cl    = netip.MustParseAddr("198.51.100.100")
)

func frame(src net.HardwareAddr, op arp.Operation, sender, target netip.Addr) lab.ARPFrame {
	return lab.ARPFrame{SourceMAC: src, Operation: op, SenderMAC: src, SenderIP: sender, TargetIP: target}
}

// TestFalseClaims: only replies and gratuitous ARPs from the restarted
// node's MAC count, only for tested addresses it owned neither before nor
// after, each address once.
func TestFalseClaims(t *testing.T) {
	before := owners{a200: "n1", a201: "n2", a202: "n3"}
	for _, c := range []struct {
		name   string
		frames []lab.ARPFrame
		after  owners
		want   []netip.Addr
	}{
		{"nothing sent", nil, before, nil},
		{"reply for an address of another node", []lab.ARPFrame{frame(macN2, arp.OperationReply, a200, cl)}, before, []netip.Addr{a200}},
		{"gratuitous request", []lab.ARPFrame{frame(macN2, arp.OperationRequest, a202, a202)}, before, []netip.Addr{a202}},
		{"ordinary request claims nothing", []lab.ARPFrame{frame(macN2, arp.OperationRequest, a200, cl)}, before, nil},
		{"own address before", []lab.ARPFrame{frame(macN2, arp.OperationReply, a201, cl)}, before, nil},
		{"own address after", []lab.ARPFrame{frame(macN2, arp.OperationReply, a200, a200)}, owners{a200: "n2", a201: "n2", a202: "n3"}, nil},
		{"another node's frame", []lab.ARPFrame{frame(macN1, arp.OperationReply, a200, cl)}, before, nil},
		{"untested address", []lab.ARPFrame{frame(macN2, arp.OperationReply, netip.MustParseAddr("198.51.100.12"), cl)}, before, nil},
		{"counted once, sorted", []lab.ARPFrame{
			frame(macN2, arp.OperationReply, a202, cl), frame(macN2, arp.OperationReply, a200, a200),
			frame(macN2, arp.OperationReply, a202, a202)}, before, []netip.Addr{a200, a202}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := falseClaims(c.frames, "n2", macN2, before, c.after); !slices.Equal(got, c.want) {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

// nodeOf names the test's nodes by their MACs ("" for any other).
func nodeOf(m net.HardwareAddr) string {
	switch m.String() {
	case macN1.String():
		return "n1"
	case macN2.String():
		return "n2"
	}
	return ""
}

// TestWrongNeighbours: an entry naming another node than the owner
// counts; a missing entry does not.
func TestWrongNeighbours(t *testing.T) {
	tab := map[netip.Addr]net.HardwareAddr{a200: macN1, a201: macN1, cl: macN2}
	got := wrongNeighbours(tab, owners{a200: "n1", a201: "n2", a202: "n3"}, nodeOf)
	if want := []netip.Addr{a201}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestRowValue: counts, counts of a total, and times.
func TestRowValue(t *testing.T) {
	for _, c := range []struct {
		r    Row
		want string
	}{
		{Row{Count: 3}, "3"},
		{Row{Count: 3, Of: 48}, "3 of 48"},
		{Row{Timing: true, Duration: 1234 * time.Millisecond}, "1.234 s"},
	} {
		if got := c.r.Value(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.r, got, c.want)
		}
	}
	if r := countRow("s", "m", 0, 5); !r.Met || r.Target != "0" {
		t.Errorf("countRow(0) = %+v", r)
	}
	if r := countRow("s", "m", 1, 5); r.Met {
		t.Errorf("countRow(1) met")
	}
}

// TestRecordSection: the section is appended when missing (the file made
// when absent) and replaced in place when present; every other section
// stays byte for byte.
func TestRecordSection(t *testing.T) {
	dir := t.TempDir()
	fresh := filepath.Join(dir, "new.md")
	if err := RecordSection(fresh, "intro", "table zero\n"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(fresh); string(b) != "# Reliability\n\n## Chaos results\n\nintro\n\ntable zero\n" {
		t.Fatalf("new file:\n%q", b)
	}
	path := filepath.Join(dir, "reliability.md")
	other := "# Reliability\n\n## Speaker start-up\n\nothers' text\n"
	if err := os.WriteFile(path, []byte(other), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := RecordSection(path, "intro", "table one\n"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(b), other) || !strings.HasSuffix(string(b), "## Chaos results\n\nintro\n\ntable one\n") {
		t.Fatalf("after append:\n%s", b)
	}
	// Replaced at the end of the file.
	if err := RecordSection(path, "intro", "table one\n"); err != nil {
		t.Fatal(err)
	}
	if b2, _ := os.ReadFile(path); string(b2) != string(b) {
		t.Fatalf("replacing the last section changed it:\n%q\nwant\n%q", b2, b)
	}
	if err := os.WriteFile(path, append(b, []byte("\n## Keys\n\nkeys text\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := RecordSection(path, "intro two", "table two\n"); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	s := string(b)
	if strings.Contains(s, "table one") || !strings.Contains(s, "intro two\n\ntable two\n") || strings.Count(s, SectionTitle) != 1 {
		t.Fatalf("after replace:\n%s", s)
	}
	if !strings.HasPrefix(s, other) || !strings.HasSuffix(s, "\n## Keys\n\nkeys text\n") {
		t.Fatalf("other sections changed:\n%s", s)
	}
}

// TestAllocTracker: a duplicate is two Services holding one address at the
// same moment (not one after the other); a change is any later state that
// differs from the first assignment, including losing it.
func TestAllocTracker(t *testing.T) {
	type ev struct {
		svc string
		ips []string // nil with del: deleted
		del bool
	}
	for _, c := range []struct {
		name          string
		events        []ev
		dups, changed []string
	}{
		{"clean burst", []ev{{"a", nil, false}, {"a", []string{"x"}, false}, {"b", []string{"y"}, false}, {"a", []string{"x"}, false}}, nil, nil},
		{"two at once", []ev{{"a", []string{"x"}, false}, {"b", []string{"x"}, false}}, []string{"x"}, nil},
		{"handed over after release", []ev{{"a", []string{"x"}, false}, {"a", nil, false}, {"b", []string{"x"}, false}}, nil, []string{"a"}},
		{"handed over after delete", []ev{{"a", []string{"x"}, false}, {"a", nil, true}, {"b", []string{"x"}, false}}, nil, nil},
		{"moved", []ev{{"a", []string{"x"}, false}, {"a", []string{"z"}, false}}, nil, []string{"a"}},
		{"flapped back", []ev{{"a", []string{"x"}, false}, {"a", []string{"z"}, false}, {"a", []string{"x"}, false}}, nil, []string{"a"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := newAllocTracker()
			for _, e := range c.events {
				if e.del {
					tr.remove(e.svc)
				} else {
					tr.observe(e.svc, e.ips)
				}
			}
			if got := tr.duplicates(); !slices.Equal(got, c.dups) {
				t.Errorf("duplicates %v, want %v", got, c.dups)
			}
			if got := tr.changedServices(); !slices.Equal(got, c.changed) {
				t.Errorf("changed %v, want %v", got, c.changed)
			}
		})
	}
}

// TestMeasureHeal: answerers count from the grace on; the time to a
// single answerer is the end of the last probe that saw another count;
// a window whose last probe is still wrong has not converged.
func TestMeasureHeal(t *testing.T) {
	s := time.Second
	p := func(at int, who ...[]string) probe {
		m := map[netip.Addr][]string{}
		for i, w := range who {
			m[netip.AddrFrom4([4]byte{198, 51, 100, byte(200 + i)})] = w
		}
		return probe{at: time.Duration(at) * s, end: time.Duration(at)*s + s/2, who: m}
	}
	one, two, none := []string{"n1"}, []string{"n1", "n2"}, []string{}
	for _, c := range []struct {
		name                        string
		probes                      []probe
		maxAns, unanswered, counted int
		single                      time.Duration
		converged                   bool
	}{
		{"clean", []probe{p(0, one, one), p(1, one, one), p(6, one, one)}, 1, 0, 2, 0, true},
		{"two early, one later", []probe{p(0, two, one), p(1, one, two), p(2, one, one), p(6, one, one)}, 1, 0, 2, 1500 * time.Millisecond, true},
		{"two after the grace", []probe{p(0, one, one), p(6, two, one), p(7, one, one)}, 2, 0, 4, 6500 * time.Millisecond, true},
		{"never converged", []probe{p(0, two, one), p(6, two, one)}, 2, 0, 2, 10 * s, false},
		{"blackout", []probe{p(0, none, one), p(6, none, one), p(7, one, one)}, 1, 1, 4, 6500 * time.Millisecond, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := measureHeal(c.probes, 5*s, 10*s)
			if m.maxAnswerers != c.maxAns || m.unanswered != c.unanswered || m.counted != c.counted || m.single != c.single || m.converged != c.converged {
				t.Errorf("got %+v, want max %d unanswered %d of %d single %s converged %v", m, c.maxAns, c.unanswered, c.counted, c.single, c.converged)
			}
		})
	}
}

// TestSampleValue: the samples of one metric with one label, summed;
// other metrics, other labels and comments are left out.
func TestSampleValue(t *testing.T) {
	exp := []byte(`# HELP herald_memberlist_member_events_total x
# TYPE herald_memberlist_member_events_total counter
herald_memberlist_member_events_total{event="failed"} 3
herald_memberlist_member_events_total{event="join"} 7
herald_memberlist_member_events_total_other{event="failed"} 100
herald_memberlist_member_events_total{event="failed",x="y"} 2 1700000000
`)
	if got := sampleValue(exp, "herald_memberlist_member_events_total", `event="failed"`); got != 5 {
		t.Errorf("got %v, want 5", got)
	}
	if got := sampleValue(exp, "absent_metric", `event="failed"`); got != 0 {
		t.Errorf("absent: got %v", got)
	}
}

// TestShortAddrs: a count and the last octets.
func TestShortAddrs(t *testing.T) {
	if got := shortAddrs(nil); got != "0" {
		t.Errorf("nil: %q", got)
	}
	if got := shortAddrs([]netip.Addr{a200, a202}); got != "2 (.200 .202)" {
		t.Errorf("got %q", got)
	}
}

func TestPathFrom(t *testing.T) {
	node := netip.MustParseAddr("198.51.100.11")
	viaHop := lab.BGPPath{PeerID: "198.51.100.12"}
	viaHop.NextHops = append(viaHop.NextHops, struct {
		IP   string `json:"ip"`
		AFI  string `json:"afi"`
		Used bool   `json:"used"`
	}{IP: "198.51.100.11", AFI: "ipv4"})
	other := lab.BGPPath{PeerID: "198.51.100.12"}
	other.NextHops = append(other.NextHops, viaHop.NextHops[0])
	other.NextHops[0].IP = "198.51.100.12"
	for _, tc := range []struct {
		name string
		p    lab.BGPPath
		want bool
	}{
		{"learnt from the node", lab.BGPPath{PeerID: "198.51.100.11"}, true},
		{"next hop the node", viaHop, true},
		{"another node", other, false},
		{"empty", lab.BGPPath{}, false},
	} {
		if got := pathFrom(tc.p, node); got != tc.want {
			t.Errorf("%s: pathFrom = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestOverlaps: a hand-back as the client's port sees it. n1 answers every
// request, n2 takes over with a gratuitous burst 3 requests later and n1
// stops answering 2 requests after that: the overlap runs from n2's first
// claim to the first request n1 left unanswered (late by at most one
// request interval, never early). A single lost reply does not end a
// stretch; breakAfter unanswered requests do.
func TestOverlaps(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 13, 52, 37, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	req := func(ms int, a netip.Addr) lab.ARPFrame {
		f := frame(net.HardwareAddr{2, 0, 198, 51, 100, 100}, arp.OperationRequest, cl, a)
		f.At = at(ms)
		return f
	}
	claim := func(ms int, mac net.HardwareAddr, a netip.Addr, gratuitous bool) lab.ARPFrame {
		f := frame(mac, arp.OperationReply, a, cl)
		if gratuitous {
			f = frame(mac, arp.OperationRequest, a, a)
		}
		f.At = at(ms)
		return f
	}
	var frames []lab.ARPFrame
	for i := range 20 {
		ms := i * 50
		frames = append(frames, req(ms, a200), req(ms, a201))
		// a201: n1 alone throughout, but for one lost reply at 300 ms.
		if ms != 300 {
			frames = append(frames, claim(ms+2, macN1, a201, false))
		}
		// a200: n1 answers up to 250 ms; n2 from its burst at 160 ms on.
		if ms <= 250 {
			frames = append(frames, claim(ms+2, macN1, a200, false))
		}
		if ms >= 200 {
			frames = append(frames, claim(ms+3, macN2, a200, false))
		}
		if ms == 150 {
			frames = append(frames, claim(160, macN2, a200, true))
		}
	}
	st := answerStretches(frames, []netip.Addr{a200, a201}, cl, nodeOf, 4)
	if got := st[a201]; len(got) != 1 || got[0].who != "n1" {
		t.Errorf("a201 stretches %+v, want n1's one", got)
	}
	got := overlaps(st)
	want := []overlap{{Addr: a200, Nodes: [2]string{"n1", "n2"}, Start: at(160), End: at(300)}}
	if len(got) != 1 || got[0] != want[0] {
		t.Fatalf("overlaps %+v, want %+v", got, want)
	}
	if d := got[0].Duration(); d != 140*time.Millisecond {
		t.Errorf("duration %s, want 140ms", d)
	}
	// n1 never stops: both answer to the end of the capture, the overlap
	// ends at n1's last claim.
	late := append([]lab.ARPFrame(nil), frames...)
	for i := 6; i < 20; i++ {
		late = append(late, claim(i*50+2, macN1, a200, false))
	}
	slices.SortStableFunc(late, func(x, y lab.ARPFrame) int { return x.At.Compare(y.At) })
	if got := overlaps(answerStretches(late, []netip.Addr{a200}, cl, nodeOf, 4)); len(got) != 1 || got[0].Start != at(160) || got[0].End != at(952) {
		t.Errorf("open stretches: %+v, want one overlap from 160 to 952 ms", got)
	}
}

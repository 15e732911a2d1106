package lab

import (
	"net/netip"
	"slices"
	"testing"
)

func TestRangePrefixes(t *testing.T) {
	for _, tc := range []struct {
		first, last string
		want        []string
	}{
		{"198.51.100.200", "198.51.100.250", []string{"198.51.100.200/29", "198.51.100.208/28", "198.51.100.224/28",
			"198.51.100.240/29", "198.51.100.248/31", "198.51.100.250/32"}},
		{"203.0.113.0", "203.0.113.255", []string{"203.0.113.0/24"}},
		{"198.51.100.7", "198.51.100.7", []string{"198.51.100.7/32"}},
		{"2001:db8:100::200", "2001:db8:100::2ff", []string{"2001:db8:100::200/120"}},
		{"2001:db8:100::1ff", "2001:db8:100::200", []string{"2001:db8:100::1ff/128", "2001:db8:100::200/128"}},
	} {
		r := Range{First: netip.MustParseAddr(tc.first), Last: netip.MustParseAddr(tc.last)}
		var got []string
		for _, p := range r.Prefixes() {
			got = append(got, p.String())
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s.Prefixes() = %v, want %v", r, got, tc.want)
		}
	}
}

// Every lab host, up to MaxNodes nodes, has its own addresses on the
// segment, and the nodes' local routes never cover one of them: the node
// would then answer itself instead of reaching them.
func TestLabHostsDistinct(t *testing.T) {
	hosts := []netip.Addr{APIServerAddr, RouterAddr, RouterAddrV6, ClientAddr, ClientAddrV6, netip.MustParseAddr("2001:db8:100::254")}
	for i := 1; i <= MaxNodes; i++ {
		hosts = append(hosts, NodeAddr(i), NodeAddrV6(i))
	}
	seen := map[netip.Addr]bool{}
	for _, h := range hosts {
		if seen[h] || !Segment.Contains(h) && !SegmentV6.Contains(h) {
			t.Errorf("lab host %s: duplicate or off the segment", h)
		}
		seen[h] = true
	}
	for _, p := range ServiceLocalPrefixes() {
		for _, h := range hosts {
			if p.Contains(h) {
				t.Errorf("service prefix %s contains lab host %s", p, h)
			}
		}
	}
}

func TestIsLabNamespace(t *testing.T) {
	for name, want := range map[string]bool{
		"hl-1a2b-sw": true, "hl-1a2b-ctl": true, "hl-1a2b-rtr": true, "hl-1a2b-cl": true,
		"hl-1a2b-n1": true, "hl-1a2b-n12": true,
		"hl-1a2b-nx": false, "hl-1a2b-": false, "hl-1a2b-foo": false, "hl-1a2bc-n1": false,
		"other-n1": false, "hl-1a2b": false,
	} {
		if got := isLabNamespace("hl-1a2b", name); got != want {
			t.Errorf("isLabNamespace(hl-1a2b, %q) = %v, want %v", name, got, want)
		}
	}
}

func TestConfigNormalize(t *testing.T) {
	for _, tc := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{Prefix: "hl-1a2b", StateDir: "/tmp/x"}, true},
		{Config{Prefix: PersistentPrefix, StateDir: "/tmp/x", Nodes: MaxNodes}, true},
		{Config{Prefix: "hl-1a2b", StateDir: "/tmp/x", Nodes: 100}, true}, // bench-scale's largest lab
		{Config{Prefix: "", StateDir: "/tmp/x"}, false},
		{Config{Prefix: "Upper", StateDir: "/tmp/x"}, false},
		{Config{Prefix: "a-very-long-prefix-over-20", StateDir: "/tmp/x"}, false},
		{Config{Prefix: "hl-1a2b"}, false},
		{Config{Prefix: "hl-1a2b", StateDir: "/tmp/x", Nodes: MaxNodes + 1}, false},
	} {
		err := tc.cfg.normalize()
		if (err == nil) != tc.ok {
			t.Errorf("normalize(%+v) = %v, want ok=%v", tc.cfg, err, tc.ok)
		}
	}
	c := Config{Prefix: RandomPrefix(), StateDir: "rel"}
	if err := c.normalize(); err != nil || c.Nodes != 3 || c.StateDir[0] != '/' {
		t.Errorf("defaults: %+v, %v; want 3 nodes and an absolute StateDir", c, err)
	}
}

func TestExpandVars(t *testing.T) {
	vars := map[string]string{"NODE_NAME": "n1", "PORT": "7472"}
	for in, want := range map[string]string{
		"--node=$(NODE_NAME)":          "--node=n1",
		"$(NODE_NAME):$(PORT)":         "n1:7472",
		"--x=$(UNDEFINED)":             "--x=$(UNDEFINED)",
		"plain $NODE_NAME stays plain": "plain $NODE_NAME stays plain",
	} {
		if got := expandVars(in, vars); got != want {
			t.Errorf("expandVars(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseBackendReply(t *testing.T) {
	r, err := ParseBackendReply("node=n2\nclient=198.51.100.100\n")
	if err != nil || r != (BackendReply{Node: "n2", Client: "198.51.100.100"}) {
		t.Errorf("ParseBackendReply = %+v, %v", r, err)
	}
	if _, err := ParseBackendReply("<html>not the lab</html>"); err == nil {
		t.Error("ParseBackendReply accepted a foreign body")
	}
}

func TestParseICMPRedirects(t *testing.T) {
	const header = "Icmp: InMsgs InRedirects InEchos OutMsgs OutRedirects\n"
	for _, tc := range []struct {
		name, snmp string
		in, out    int
		wantErr    bool
	}{
		{"counts", "Ip: Forwarding\nIp: 1\n" + header + "Icmp: 9 2 0 7 3\nIcmpMsg: InType3\nIcmpMsg: 4\n", 2, 3, false},
		{"zero", header + "Icmp: 0 0 0 0 0\n", 0, 0, false},
		{"no icmp", "Ip: Forwarding\nIp: 1\n", 0, 0, true},
		{"short values", header + "Icmp: 1 2\n", 0, 0, true},
		{"no redirect fields", "Icmp: InMsgs OutMsgs\nIcmp: 1 2\n", 0, 0, true},
		{"not a number", header + "Icmp: 1 x 0 0 0\n", 0, 0, true},
	} {
		in, out, err := parseICMPRedirects(tc.snmp)
		if (err != nil) != tc.wantErr || in != tc.in || out != tc.out {
			t.Errorf("%s: got %d, %d, %v; want %d, %d, error %v", tc.name, in, out, err, tc.in, tc.out, tc.wantErr)
		}
	}
}

func TestParseMD5Refused(t *testing.T) {
	const header = "TcpExt: SyncookiesSent TCPMD5NotFound TCPMD5Unexpected TCPMD5Failure TCPAOGood\n"
	for _, tc := range []struct {
		name, netstat string
		want          int
		wantErr       bool
	}{
		{"sum", header + "TcpExt: 9 1 2 4 7\nIpExt: InNoRoutes\nIpExt: 0\n", 7, false},
		{"zero", header + "TcpExt: 0 0 0 0 0\n", 0, false},
		{"no tcpext", "IpExt: InNoRoutes\nIpExt: 0\n", 0, true},
		{"short values", header + "TcpExt: 1 2\n", 0, true},
		{"no md5 fields", "TcpExt: SyncookiesSent\nTcpExt: 1\n", 0, true},
		{"not a number", header + "TcpExt: 0 0 x 0 0\n", 0, true},
	} {
		got, err := parseMD5Refused(tc.netstat)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("%s: got %d, %v; want %d, error %v", tc.name, got, err, tc.want, tc.wantErr)
		}
	}
}

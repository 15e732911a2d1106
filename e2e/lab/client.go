package lab

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Get sends one HTTP GET to addr:port from network namespace ns (use
// [Lab.ClientNamespace] for the client) on a fresh TCP connection (so ECMP
// and failover see a new flow each time) and parses the lab backend's reply.
func (l *Lab) Get(ctx context.Context, ns string, addr netip.Addr, port int) (BackendReply, error) {
	tr := &http.Transport{DialContext: l.DialContext(ns), DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 3 * time.Second}
	url := "http://" + net.JoinHostPort(addr.String(), strconv.Itoa(port)) + "/"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return BackendReply{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return BackendReply{}, fmt.Errorf("get %s from %s: %w", url, ns, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return BackendReply{}, fmt.Errorf("get %s from %s: %w", url, ns, err)
	}
	return ParseBackendReply(string(body))
}

// Curl runs curl in the client namespace against http://addr:port/ and
// returns the body (for parity with what a human types).
func (l *Lab) Curl(ctx context.Context, addr netip.Addr, port int) (string, error) {
	url := "http://" + net.JoinHostPort(addr.String(), strconv.Itoa(port)) + "/"
	return run(ctx, l.ClientNamespace(), "curl", "-sS", "--max-time", "3", url)
}

var macRE = regexp.MustCompile(`(?i)\b([0-9a-f]{2}(?::[0-9a-f]{2}){5})\b`)

// Arping resolves addr with one ARP request (RFC 826) from the client's
// eth0 and returns the hardware address that answered first.
func (l *Lab) Arping(ctx context.Context, addr netip.Addr) (net.HardwareAddr, error) {
	if !addr.Is4() {
		return nil, fmt.Errorf("arping %s: not an IPv4 address", addr)
	}
	out, err := run(ctx, l.ClientNamespace(), "arping", "-c", "1", "-w", "2", "-i", "eth0", addr.String())
	if err != nil {
		return nil, fmt.Errorf("arping %s: %w", addr, err)
	}
	// "60 bytes from 02:00:c6:33:64:0b (198.51.100.11): index=0 time=..."
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "bytes from") {
			if m := macRE.FindString(line); m != "" {
				return net.ParseMAC(m)
			}
		}
	}
	return nil, fmt.Errorf("arping %s: no reply: %s", addr, strings.TrimSpace(out))
}

// NeighborSolicit resolves addr with a neighbor solicitation (RFC 4861
// §7.2) from the client's eth0 (ndisc6) and returns the target link-layer
// address of the advertisement.
func (l *Lab) NeighborSolicit(ctx context.Context, addr netip.Addr) (net.HardwareAddr, error) {
	if !addr.Is6() {
		return nil, fmt.Errorf("ndisc6 %s: not an IPv6 address", addr)
	}
	out, err := run(ctx, l.ClientNamespace(), "ndisc6", "-1", "-r", "2", "-w", "1000", addr.String(), "eth0")
	if err != nil {
		return nil, fmt.Errorf("ndisc6 %s: %w", addr, err)
	}
	// "Target link-layer address: 02:00:C6:33:64:0B"
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "Target link-layer address") {
			if m := macRE.FindString(line); m != "" {
				return net.ParseMAC(m)
			}
		}
	}
	return nil, fmt.Errorf("ndisc6 %s: no advertisement: %s", addr, strings.TrimSpace(out))
}

// FlushNeighbors empties the neighbor (ARP and NDP) cache of namespace ns.
func (l *Lab) FlushNeighbors(ctx context.Context, ns string) error {
	_, err := run(ctx, ns, "ip", "neigh", "flush", "all")
	return err
}

// Neighbor returns the hardware address namespace ns's neighbor cache holds
// for addr, or nil when none is there (`ip neigh show <addr>`).
func (l *Lab) Neighbor(ctx context.Context, ns string, addr netip.Addr) (net.HardwareAddr, error) {
	out, err := run(ctx, ns, "ip", "neigh", "show", addr.String())
	if err != nil {
		return nil, err
	}
	if m := macRE.FindString(out); m != "" {
		return net.ParseMAC(m)
	}
	return nil, nil
}

// ICMPRedirects returns the IPv4 ICMP redirect counters (RFC 792 type 5)
// of network namespace ns from its /proc/net/snmp: received and sent.
// The lab's router must send none and its client accept none (see
// routerSysctls): a cached redirect would hide a route that moved.
func (l *Lab) ICMPRedirects(ctx context.Context, ns string) (in, out int, err error) {
	snmp, err := run(ctx, ns, "cat", "/proc/net/snmp")
	if err != nil {
		return 0, 0, err
	}
	return parseICMPRedirects(snmp)
}

// parseICMPRedirects reads InRedirects and OutRedirects from the "Icmp:"
// header and value lines of /proc/net/snmp.
func parseICMPRedirects(snmp string) (in, out int, err error) {
	var header []string
	for _, line := range strings.Split(snmp, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != "Icmp:" {
			continue
		}
		if header == nil {
			header = fields
			continue
		}
		if len(fields) != len(header) {
			return 0, 0, fmt.Errorf("/proc/net/snmp: Icmp values have %d fields, header %d", len(fields), len(header))
		}
		in, out = -1, -1
		for i, name := range header {
			switch name {
			case "InRedirects":
				in, err = strconv.Atoi(fields[i])
			case "OutRedirects":
				out, err = strconv.Atoi(fields[i])
			}
			if err != nil {
				return 0, 0, fmt.Errorf("/proc/net/snmp: Icmp %s: %w", name, err)
			}
		}
		if in < 0 || out < 0 {
			return 0, 0, fmt.Errorf("/proc/net/snmp: no Icmp InRedirects/OutRedirects")
		}
		return in, out, nil
	}
	return 0, 0, fmt.Errorf("/proc/net/snmp: no Icmp lines")
}

// md5Counters are the TcpExt counters of /proc/net/netstat for inbound
// segments the kernel dropped for TCP-MD5 (RFC 2385): a key was expected
// and the segment had no signature, the segment was signed but no key was
// expected, or the signature was wrong.
var md5Counters = []string{"TCPMD5NotFound", "TCPMD5Unexpected", "TCPMD5Failure"}

// MD5Refused returns how many TCP segments the kernel of network namespace
// ns (the router's, [Lab.RouterNamespace]) has dropped for TCP-MD5 since the
// namespace was made: the sum of md5Counters in its /proc/net/netstat. The
// count is per namespace, not per peer.
func (l *Lab) MD5Refused(ctx context.Context, ns string) (int, error) {
	netstat, err := run(ctx, ns, "cat", "/proc/net/netstat")
	if err != nil {
		return 0, err
	}
	return parseMD5Refused(netstat)
}

// parseMD5Refused sums md5Counters from the "TcpExt:" header and value
// lines of /proc/net/netstat; a counter missing from the header is an error.
func parseMD5Refused(netstat string) (int, error) {
	var header []string
	for _, line := range strings.Split(netstat, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != "TcpExt:" {
			continue
		}
		if header == nil {
			header = fields
			continue
		}
		if len(fields) != len(header) {
			return 0, fmt.Errorf("/proc/net/netstat: TcpExt values have %d fields, header %d", len(fields), len(header))
		}
		sum := 0
		for _, name := range md5Counters {
			i := slices.Index(header, name)
			if i < 0 {
				return 0, fmt.Errorf("/proc/net/netstat: no TcpExt %s", name)
			}
			n, err := strconv.Atoi(fields[i])
			if err != nil {
				return 0, fmt.Errorf("/proc/net/netstat: TcpExt %s: %w", name, err)
			}
			sum += n
		}
		return sum, nil
	}
	return 0, fmt.Errorf("/proc/net/netstat: no TcpExt lines")
}

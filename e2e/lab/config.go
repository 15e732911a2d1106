package lab

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
)

// PersistentPrefix is the namespace prefix of the lab `make lab` keeps up.
const PersistentPrefix = "herald-lab"

// Fixed lab addressing, all in documentation ranges (RFC 5737, RFC 3849).
var (
	// Segment is the shared Ethernet segment of every namespace.
	Segment = netip.MustParsePrefix("198.51.100.0/24")
	// SegmentV6 is the IPv6 prefix of the same segment.
	SegmentV6 = netip.MustParsePrefix("2001:db8:100::/64")

	// APIServerAddr is kube-apiserver's address in the ctl namespace.
	APIServerAddr = netip.MustParseAddr("198.51.100.254")
	// APIServerPort is kube-apiserver's secure port.
	APIServerPort = 6443

	// RouterAddr and RouterAddrV6 are the FRR router's segment addresses.
	RouterAddr   = netip.MustParseAddr("198.51.100.1")
	RouterAddrV6 = netip.MustParseAddr("2001:db8:100::1")
	// RouterASN is the router's autonomous system number.
	RouterASN uint32 = 64500
	// NodeASN is the ASN the router expects from the nodes (speakers).
	NodeASN uint32 = 64512

	// ClientAddr and ClientAddrV6 are the client namespace's addresses.
	ClientAddr   = netip.MustParseAddr("198.51.100.100")
	ClientAddrV6 = netip.MustParseAddr("2001:db8:100::100")

	// L2RangeV4 and L2RangeV6 are on-segment Service addresses for layer 2
	// announcement (inclusive ranges); the client reaches them by ARP/NDP.
	L2RangeV4 = Range{First: netip.MustParseAddr("198.51.100.200"), Last: netip.MustParseAddr("198.51.100.250")}
	L2RangeV6 = Range{First: netip.MustParseAddr("2001:db8:100::200"), Last: netip.MustParseAddr("2001:db8:100::250")}
	// BGPPrefixV4 and BGPPrefixV6 are off-segment Service prefixes for BGP
	// announcement; the client routes them via the router.
	BGPPrefixV4 = netip.MustParsePrefix("203.0.113.0/24")
	BGPPrefixV6 = netip.MustParsePrefix("2001:db8:203::/64")

	// ServiceClusterIPRanges is kube-apiserver's ClusterIP range. ClusterIPs
	// are only data here (no kube-proxy), never routed.
	ServiceClusterIPRanges = "10.96.0.0/16,2001:db8:96::/112"

	// BackendPort is the TCP port the lab backend answers on in every node.
	BackendPort = 80
)

// MaxNodes bounds Config.Nodes: node addresses are 198.51.100.11-.99 and
// .101-.111 (see [NodeAddr]), between the router (.1), the client (.100)
// and the layer 2 Service range (.200-.250). The switch is one Linux bridge
// (up to 1024 ports).
const MaxNodes = 100

// Config describes one lab.
type Config struct {
	// Prefix names every namespace ("<Prefix>-sw", "<Prefix>-n1", ...) and
	// the FRR instance ("<Prefix>-rtr"). At most 20 characters of
	// [a-z0-9-]. Unique per run for tests (see [RandomPrefix]);
	// [PersistentPrefix] for `make lab`.
	Prefix string
	// Nodes is the number of node namespaces, 1..MaxNodes; 0 means 3.
	Nodes int
	// StateDir holds state.json, logs, etcd data, keys and kubeconfigs.
	// Required, absolute or relative to the working directory.
	StateDir string
	// AssetsDir holds kube-apiserver and etcd; empty means $KUBEBUILDER_ASSETS,
	// else <module root>/bin/k8s.
	AssetsDir string
	// HelperBinary is the herald-lab binary used for the lab's own
	// long-lived helpers (node backends, loopback proxy). Empty means: the
	// running executable if it is herald-lab, else it is built with
	// `go build` into StateDir.
	HelperBinary string
	// LoopbackProxy starts a proxy from 127.0.0.1 in the root namespace to
	// the API server and writes StateDir/kubeconfig for it (for humans).
	LoopbackProxy bool
}

// Range is an inclusive range of addresses of one family.
type Range struct{ First, Last netip.Addr }

// String returns "first-last".
func (r Range) String() string { return r.First.String() + "-" + r.Last.String() }

// Contains reports whether a lies in r.
func (r Range) Contains(a netip.Addr) bool {
	return a.BitLen() == r.First.BitLen() && r.First.Compare(a) <= 0 && a.Compare(r.Last) <= 0
}

// Prefixes returns the smallest list of prefixes covering exactly r.
func (r Range) Prefixes() []netip.Prefix {
	var out []netip.Prefix
	cur := r.First
	for cur.IsValid() && cur.Compare(r.Last) <= 0 {
		bits := cur.BitLen()
		// Grow the prefix while it stays aligned and inside the range.
		best := netip.PrefixFrom(cur, bits)
		for l := bits - 1; l >= 0; l-- {
			p := netip.PrefixFrom(cur, l)
			if p.Masked().Addr() != cur || lastAddr(p).Compare(r.Last) > 0 {
				break
			}
			best = p
		}
		out = append(out, best)
		next := lastAddr(best).Next()
		if !next.IsValid() {
			break
		}
		cur = next
	}
	return out
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// ServiceLocalPrefixes are the prefixes each node accepts as local (lab
// scaffolding in place of kube-proxy): every Service range above.
func ServiceLocalPrefixes() []netip.Prefix {
	var out []netip.Prefix
	out = append(out, L2RangeV4.Prefixes()...)
	out = append(out, BGPPrefixV4)
	out = append(out, L2RangeV6.Prefixes()...)
	out = append(out, BGPPrefixV6)
	return out
}

var prefixRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,19}$`)

// RandomPrefix returns a fresh prefix "hl-<4 hex>" for one test run.
func RandomPrefix() string {
	var b [2]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return "hl-" + hex.EncodeToString(b[:])
}

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("invalid lab config")

func (c *Config) normalize() error {
	if !prefixRE.MatchString(c.Prefix) {
		return fmt.Errorf("%w: Prefix %q: want 1-20 of [a-z0-9-]", ErrConfig, c.Prefix)
	}
	if c.Nodes == 0 {
		c.Nodes = 3
	}
	if c.Nodes < 1 || c.Nodes > MaxNodes {
		return fmt.Errorf("%w: Nodes %d: want 1..%d", ErrConfig, c.Nodes, MaxNodes)
	}
	if c.StateDir == "" {
		return fmt.Errorf("%w: StateDir is required", ErrConfig)
	}
	abs, err := filepath.Abs(c.StateDir)
	if err != nil {
		return fmt.Errorf("%w: StateDir: %v", ErrConfig, err)
	}
	c.StateDir = abs
	return nil
}

// NodeName returns the Kubernetes name of node i (1-based): "n1", "n2", ...
func NodeName(i int) string { return fmt.Sprintf("n%d", i) }

// nodeHost is the last part of node i's addresses (1-based, up to
// [MaxNodes]): 10+i, skipping the client's 100 (node 90 is 101, node 100 is
// 111).
func nodeHost(i int) int {
	if 10+i < int(ClientAddr.As4()[3]) {
		return 10 + i
	}
	return 11 + i
}

// NodeAddr returns node i's IPv4 address: 198.51.100.(10+i) for nodes 1-89,
// 198.51.100.(11+i) from node 90 on (the client has .100).
func NodeAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 51, 100, byte(nodeHost(i))}) }

// NodeAddrV6 returns node i's IPv6 address, 2001:db8:100::<the last octet of
// NodeAddr(i) written in decimal digits> (node 1 is 2001:db8:100::11, node
// 100 is 2001:db8:100::111).
func NodeAddrV6(i int) netip.Addr {
	return netip.MustParseAddr(fmt.Sprintf("2001:db8:100::%d", nodeHost(i)))
}

package layer2

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// linkInfo is the part of a network interface the announcer looks at.
type linkInfo struct {
	Name        string
	Index       int
	MTU         int
	MAC         net.HardwareAddr
	Flags       net.Flags
	RawFlags    uint32 // IFF_* flags as reported by the kernel
	MasterIndex int    // non-zero when enslaved (bond, bridge, team, VRF)
	// LinkLocal is a usable (not tentative, not failed DAD) IPv6 link-local
	// address, or the zero Addr.
	LinkLocal netip.Addr
	// TentativeLinkLocal is set when a link-local address exists but is
	// still tentative (duplicate address detection running).
	TentativeLinkLocal bool
}

// eligibility says which responders a link may run and, if neither, why.
type eligibility struct {
	ARP, NDP bool
	Reason   string // empty when ARP or NDP is allowed
}

// eligible applies MetalLB's interface rules: the link must be up, not
// enslaved (so a bond is used rather than its slaves), not NOARP, have an
// Ethernet MAC and not match an exclude pattern. ARP also needs
// IFF_BROADCAST; NDP needs a usable IPv6 link-local address.
func eligible(l linkInfo, exclude []*regexp.Regexp) eligibility {
	for _, re := range exclude {
		if re.MatchString(l.Name) {
			return eligibility{Reason: "excluded by " + re.String()}
		}
	}
	switch {
	case l.Flags&net.FlagUp == 0:
		return eligibility{Reason: "down"}
	case l.MasterIndex != 0:
		return eligibility{Reason: "enslaved"}
	case l.RawFlags&unix.IFF_NOARP != 0:
		return eligibility{Reason: "NOARP"}
	case len(l.MAC) != 6:
		return eligibility{Reason: "no Ethernet address"}
	}
	e := eligibility{ARP: l.Flags&net.FlagBroadcast != 0, NDP: l.LinkLocal.IsValid()}
	if !e.ARP && !e.NDP {
		e.Reason = "neither broadcast-capable nor an IPv6 link-local address"
	}
	return e
}

func (l linkInfo) netInterface() *net.Interface {
	return &net.Interface{Index: l.Index, MTU: l.MTU, Name: l.Name, HardwareAddr: l.MAC, Flags: l.Flags}
}

// listLinks lists the links of the namespace h points into, with their usable
// IPv6 link-local address.
func listLinks(h *netlink.Handle) ([]linkInfo, error) {
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	addrs, err := h.AddrList(nil, netlink.FAMILY_V6)
	if err != nil {
		return nil, fmt.Errorf("list IPv6 addresses: %w", err)
	}
	ll := map[int]netip.Addr{}
	tentative := map[int]bool{}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || !ip.Is6() || !ip.IsLinkLocalUnicast() {
			continue
		}
		if a.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) != 0 {
			tentative[a.LinkIndex] = a.Flags&unix.IFA_F_TENTATIVE != 0
			continue
		}
		if _, seen := ll[a.LinkIndex]; !seen {
			ll[a.LinkIndex] = ip
		}
	}
	out := make([]linkInfo, 0, len(links))
	for _, l := range links {
		at := l.Attrs()
		out = append(out, linkInfo{
			Name: at.Name, Index: at.Index, MTU: at.MTU, MAC: at.HardwareAddr,
			Flags: at.Flags, RawFlags: at.RawFlags, MasterIndex: at.MasterIndex,
			LinkLocal: ll[at.Index], TentativeLinkLocal: tentative[at.Index] && !ll[at.Index].IsValid(),
		})
	}
	return out, nil
}

// inNetNS runs fn on an OS thread switched into ns and switches back after.
// With ns not open it runs fn directly. Sockets created by fn stay in ns.
func inNetNS(ns netns.NsHandle, fn func() error) error {
	if !ns.IsOpen() {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("get current network namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter network namespace: %w", err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			// Leave the thread locked: it exits with this goroutine
			// instead of running other goroutines in the wrong namespace.
			errc <- errors.Join(ferr, fmt.Errorf("restore network namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

package ipam

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// u128 is an unsigned 128-bit integer, used for address arithmetic so that
// IPv6 pools of any size (a /64 has 2^64 addresses) need no big.Int. IPv4
// addresses use only lo.
type u128 struct{ hi, lo uint64 }

func (a u128) cmp(b u128) int {
	switch {
	case a.hi < b.hi:
		return -1
	case a.hi > b.hi:
		return 1
	case a.lo < b.lo:
		return -1
	case a.lo > b.lo:
		return 1
	}
	return 0
}

// add1 returns a+1, wrapping at 2^128.
func (a u128) add1() u128 {
	lo, carry := bits.Add64(a.lo, 1, 0)
	return u128{a.hi + carry, lo}
}

// sub1 returns a-1, wrapping at 0.
func (a u128) sub1() u128 {
	lo, borrow := bits.Sub64(a.lo, 1, 0)
	return u128{a.hi - borrow, lo}
}

// sub returns a-b, wrapping.
func (a u128) sub(b u128) u128 {
	lo, borrow := bits.Sub64(a.lo, b.lo, 0)
	return u128{a.hi - b.hi - borrow, lo}
}

// addrToU128 returns the numeric value of a (IPv4 in the low 32 bits).
func addrToU128(a netip.Addr) u128 {
	if a.Is4() {
		b := a.As4()
		return u128{0, uint64(binary.BigEndian.Uint32(b[:]))}
	}
	b := a.As16()
	return u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

// u128ToAddr is the inverse of addrToU128 for the given family.
func u128ToAddr(v u128, f Family) netip.Addr {
	if f == IPv4 {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(v.lo))
		return netip.AddrFrom4(b)
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], v.hi)
	binary.BigEndian.PutUint64(b[8:], v.lo)
	return netip.AddrFrom16(b)
}

// prefixBounds returns the first and last address of p as numbers.
func prefixBounds(p netip.Prefix) (first, last u128) {
	first = addrToU128(p.Masked().Addr())
	hostBits := p.Addr().BitLen() - p.Bits()
	var mask u128
	switch {
	case hostBits >= 128:
		mask = u128{^uint64(0), ^uint64(0)}
	case hostBits >= 64:
		mask = u128{(uint64(1) << (hostBits - 64)) - 1, ^uint64(0)}
	default:
		mask = u128{0, (uint64(1) << hostBits) - 1}
	}
	last = u128{first.hi | mask.hi, first.lo | mask.lo}
	return first, last
}

// isBuggy reports whether a is an IPv4 address ending in .0 or .255, which
// some consumer firmwares drop as network or broadcast addresses (the
// avoidBuggyIPs rule of IPAddressPool).
func isBuggy(a netip.Addr) bool {
	if !a.Is4() {
		return false
	}
	last := a.As4()[3]
	return last == 0 || last == 255
}

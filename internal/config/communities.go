package config

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"

	"github.com/herald-lb/herald/internal/bgp"
)

// Community is a BGP community value: either a standard community (RFC 1997,
// two 16-bit halves, written "65000:100") or a large community (RFC 8092,
// three 32-bit parts, written "large:65000:1:2"). Community is comparable and
// usable as a map key.
type Community struct {
	Large bool   // true for an RFC 8092 large community
	A     uint32 // standard: high 16 bits (usually an ASN); large: Global Administrator
	B     uint32 // standard: low 16 bits; large: Local Data Part 1
	C     uint32 // large only: Local Data Part 2
}

// Standard returns the 32-bit wire value of a standard community
// (RFC 1997 §"COMMUNITIES attribute"); meaningless for large communities.
func (c Community) Standard() uint32 { return c.A<<16 | c.B }

// String renders c in the syntax ParseCommunity accepts.
func (c Community) String() string {
	if c.Large {
		return fmt.Sprintf("large:%d:%d:%d", c.A, c.B, c.C)
	}
	return fmt.Sprintf("%d:%d", c.A, c.B)
}

// Compare orders standard communities before large ones, then numerically.
func (c Community) Compare(o Community) int {
	if c.Large != o.Large {
		if c.Large {
			return 1
		}
		return -1
	}
	return cmp.Or(cmp.Compare(c.A, o.A), cmp.Compare(c.B, o.B), cmp.Compare(c.C, o.C))
}

// ParseCommunity parses "x:y" (two decimal uint16, RFC 1997) or
// "large:a:b:c" (three decimal uint32, RFC 8092; the "large" keyword is case
// insensitive). Surrounding whitespace is not accepted. A large community
// must also pass bgp.CheckLargeCommunity (the Global Administrator
// 4294967295 is reserved), the check every announced path gets, so that a
// community this accepts can always be announced.
func ParseCommunity(s string) (Community, error) {
	parts := strings.Split(s, ":")
	if len(parts) == 4 && strings.EqualFold(parts[0], "large") {
		var v [3]uint32
		for i, p := range parts[1:] {
			n, err := parseUint(p, 32)
			if err != nil {
				return Community{}, fmt.Errorf("large community %q: part %d %w (want large:<uint32>:<uint32>:<uint32>, RFC 8092)", s, i+1, err)
			}
			v[i] = uint32(n)
		}
		if err := bgp.CheckLargeCommunity(v); err != nil {
			return Community{}, fmt.Errorf("large community %q: %w", s, err)
		}
		return Community{Large: true, A: v[0], B: v[1], C: v[2]}, nil
	}
	if len(parts) == 2 {
		hi, err := parseUint(parts[0], 16)
		if err != nil {
			return Community{}, fmt.Errorf("community %q: first half %w (want <uint16>:<uint16>, RFC 1997)", s, err)
		}
		lo, err := parseUint(parts[1], 16)
		if err != nil {
			return Community{}, fmt.Errorf("community %q: second half %w (want <uint16>:<uint16>, RFC 1997)", s, err)
		}
		return Community{A: uint32(hi), B: uint32(lo)}, nil
	}
	return Community{}, fmt.Errorf("community %q: want <uint16>:<uint16> (RFC 1997) or large:<uint32>:<uint32>:<uint32> (RFC 8092)", s)
}

// parseUint accepts only plain decimal digits (no sign, no 0x, no "_").
func parseUint(s string, bits int) (uint64, error) {
	if s == "" {
		return 0, fmt.Errorf("is empty")
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, fmt.Errorf("%q is not a decimal number", s)
		}
	}
	n, err := strconv.ParseUint(s, 10, bits)
	if err != nil {
		return 0, fmt.Errorf("%q does not fit in %d bits", s, bits)
	}
	return n, nil
}

// CommunityAlias is one named community from a Community object
// (spec.communities[]), usable by name in BGPAdvertisement spec.communities.
type CommunityAlias struct {
	Name   string    // alias name, unique across all Community objects
	Value  Community // parsed value
	Source string    // "namespace/name" of the Community object defining it
}

// buildCommunityAliases parses every Community object. Alias names must be
// unique across all Community objects; values must parse. An empty name is
// accepted, as MetalLB does (communitiesFromCrs): a BGPAdvertisement
// community "" then means that alias.
func buildCommunityAliases(objs []communityObj, p *problems) map[string]CommunityAlias {
	aliases := map[string]CommunityAlias{}
	defined := map[string]string{} // alias name -> object that defined it first
	for _, o := range objs {
		for i, a := range o.aliases {
			field := fmt.Sprintf("spec.communities[%d]", i)
			if strings.TrimSpace(a.Name) != a.Name {
				p.add(o.ref.invalid(field+".name", a.Name, "alias name must not have leading or trailing whitespace"))
				continue
			}
			v, err := ParseCommunity(a.Value)
			if err != nil {
				p.add(o.ref.invalid(field+".value", a.Value, "%s", err))
				continue
			}
			if prev, dup := defined[a.Name]; dup {
				p.add(o.ref.invalid(field+".name", a.Name, "alias is already defined by Community %s; alias names must be unique across all Community objects", prev))
				continue
			}
			defined[a.Name] = o.ref.ns + "/" + o.ref.name
			aliases[a.Name] = CommunityAlias{Name: a.Name, Value: v, Source: o.ref.ns + "/" + o.ref.name}
		}
	}
	return aliases
}

// communityObj is the part of a Community object the parser needs.
type communityObj struct {
	ref     objRef
	aliases []aliasSpec
}

type aliasSpec struct{ Name, Value string }

// resolveCommunity turns one BGPAdvertisement spec.communities entry into a
// value. An exact alias name wins; otherwise a string containing ':' must be
// a literal community (invalid if it does not parse), and anything else is an
// alias name that is not defined (yet), which is transient.
func resolveCommunity(s string, aliases map[string]CommunityAlias) (c Community, transient bool, err error) {
	if a, ok := aliases[s]; ok {
		return a.Value, false, nil
	}
	if strings.Contains(s, ":") {
		c, err := ParseCommunity(s)
		return c, false, err
	}
	if s == "" {
		return Community{}, false, fmt.Errorf("empty community")
	}
	return Community{}, true, fmt.Errorf("no Community object defines the alias %q", s)
}

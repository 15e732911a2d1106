package ipam_test

import (
	"fmt"
	"net/netip"

	"github.com/herald-lb/herald/internal/ipam"
)

// The controller's start-up sequence: pools first, then every existing
// assignment is imported, and only then are Services allocated.
func Example() {
	a := ipam.New()
	_, _ = a.SetPools([]ipam.Pool{{
		Name:       "public",
		Prefixes:   []netip.Prefix{netip.MustParsePrefix("198.51.100.0/30")},
		AutoAssign: true,
	}})

	web := ipam.Request{Key: "shop/web", Namespace: "shop", Families: []ipam.Family{ipam.IPv4}}
	api := ipam.Request{Key: "shop/api", Namespace: "shop", Families: []ipam.Family{ipam.IPv4}}

	// shop/web already had 198.51.100.0 before the restart.
	if _, err := a.Import(web.Key, []netip.Addr{netip.MustParseAddr("198.51.100.0")}, web); err != nil {
		fmt.Println(err)
	}
	for _, r := range []ipam.Request{api, web} {
		asg, err := a.Allocate(r)
		fmt.Println(r.Key, asg.IPs, asg.Pool, err)
	}
	a.Release(api.Key)
	fmt.Println(a.Stats()[0].AssignedIPv4, "assigned")
	// Output:
	// shop/api [198.51.100.1] public <nil>
	// shop/web [198.51.100.0] public <nil>
	// 1 assigned
}

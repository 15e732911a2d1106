package config_test

import (
	"fmt"
	"net/netip"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/config"
)

func ExampleBuild() {
	pool := v1beta1.IPAddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: "pool-a", Namespace: "herald-system"},
		Spec:       v1beta1.IPAddressPoolSpec{Addresses: []string{"198.51.100.0/24", "198.51.101.5-198.51.101.1"}},
	}
	_, err := config.Build(config.Resources{Pools: []v1beta1.IPAddressPool{pool}}, config.Options{Namespace: "herald-system"})
	fmt.Println(err)

	pool.Spec.Addresses[1] = "198.51.101.1-198.51.101.5"
	snap, err := config.Build(config.Resources{Pools: []v1beta1.IPAddressPool{pool}}, config.Options{Namespace: "herald-system"})
	if err != nil {
		panic(err)
	}
	p, _ := snap.Pool("pool-a")
	fmt.Println(p.Prefixes)
	_, ok := snap.PoolFor(netip.MustParseAddr("198.51.101.6"))
	fmt.Println(ok)
	// Output:
	// IPAddressPool herald-system/pool-a: spec.addresses[1] "198.51.101.5-198.51.101.1": range start is after end
	// [198.51.100.0/24 198.51.101.1/32 198.51.101.2/31 198.51.101.4/31]
	// false
}

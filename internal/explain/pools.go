package explain

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/herald-lb/herald/internal/svcreq"
)

// PoolsReport is kubectl herald pools.
type PoolsReport struct {
	Pools []PoolRow `json:"pools"`
	// Pending are the Services that hold no address, with the allocator's
	// error.
	Pending  []PendingService `json:"pending,omitempty"`
	Notes    []string         `json:"notes,omitempty"`
	Problems []string         `json:"problems,omitempty"`
}

// PoolRow is one pool and family.
type PoolRow struct {
	Pool   string `json:"pool"`
	Family string `json:"family"`
	// Size, Used and Free count addresses (ipam.PoolStats after the
	// replay); Size is math.MaxInt64 for an IPv6 prefix of 62 or more host
	// bits ("unbounded" in tables).
	Size int64 `json:"size"`
	Used int64 `json:"used"`
	Free int64 `json:"free"`
	// AutoAssign and Priority (serviceAllocation.priority, 0 unset).
	AutoAssign bool `json:"autoAssign"`
	Priority   int  `json:"priority,omitempty"`
	// L2Advertisements and BGPAdvertisements select the pool.
	L2Advertisements  []string `json:"l2Advertisements,omitempty"`
	BGPAdvertisements []string `json:"bgpAdvertisements,omitempty"`
	// Namespaces the pool serves: "*" for every namespace, else the listed
	// ones and those whose labels match a namespaceSelector now.
	Namespaces []string `json:"namespaces"`
	// ServiceSelectors restrict the Services ("" none).
	ServiceSelectors []string `json:"serviceSelectors,omitempty"`
	// Services hold an address of the family.
	Services []string `json:"services,omitempty"`
	// ReportedUsed and ReportedFree are the IPAddressPool's status
	// (assignedIPv4/availableIPv4, ...), written by the controller's
	// leader; -1 when the status has not been written.
	ReportedUsed int64 `json:"reportedUsed"`
	ReportedFree int64 `json:"reportedFree"`
}

// PendingService is a Service without address.
type PendingService struct {
	Service string `json:"service"`
	Error   string `json:"error"`
}

// Pools reports every pool per family.
func Pools(c *Cluster) *PoolsReport {
	v := newView(c)
	r := &PoolsReport{}
	if v.snap == nil {
		r.Problems = oneLine(append(r.Problems, fmt.Sprintf("the configuration does not build: %v", v.buildErr)))
		return r
	}
	stats := map[string][2][3]int64{}
	for _, st := range v.alloc.Stats() {
		stats[st.Pool] = [2][3]int64{{st.TotalIPv4, st.AssignedIPv4, st.AvailableIPv4}, {st.TotalIPv6, st.AssignedIPv6, st.AvailableIPv6}}
	}
	holders := map[string][]string{} // pool/family -> services
	for key, asg := range v.alloc.Assignments() {
		for _, ip := range asg.IPs {
			fam := "IPv4"
			if ip.Is6() {
				fam = "IPv6"
			}
			holders[asg.Pool+"/"+fam] = append(holders[asg.Pool+"/"+fam], key)
		}
	}
	for _, p := range v.snap.Pools() {
		for fi, fam := range []string{"IPv4", "IPv6"} {
			if (fi == 0 && !p.HasIPv4()) || (fi == 1 && !p.HasIPv6()) {
				continue
			}
			st := stats[p.Name][fi]
			row := PoolRow{Pool: p.Name, Family: fam, Size: st[0], Used: st[1], Free: st[2], AutoAssign: p.AutoAssign, Priority: p.Priority()}
			for _, a := range p.L2Advertisements {
				row.L2Advertisements = append(row.L2Advertisements, a.Name)
			}
			for _, a := range p.BGPAdvertisements {
				row.BGPAdvertisements = append(row.BGPAdvertisements, a.Name)
			}
			row.Namespaces = []string{"*"}
			if a := p.Allocation; a != nil {
				if len(a.Namespaces) > 0 || len(a.NamespaceSelectors) > 0 {
					row.Namespaces = slices.Clone(a.Namespaces)
					for _, ns := range c.Namespaces {
						for _, s := range a.NamespaceSelectors {
							if s != nil && s.Matches(labels.Set(ns.Labels)) && !slices.Contains(row.Namespaces, ns.Name) {
								row.Namespaces = append(row.Namespaces, ns.Name)
							}
						}
					}
					sort.Strings(row.Namespaces)
				}
				for _, s := range a.ServiceSelectors {
					row.ServiceSelectors = append(row.ServiceSelectors, s.String())
				}
			}
			row.ReportedUsed, row.ReportedFree = reportedCounters(c, p.Name, fi)
			if row.ReportedUsed >= 0 && (row.ReportedUsed != row.Used || row.ReportedFree != row.Free) {
				r.Notes = append(r.Notes, fmt.Sprintf("pool %s (%s): its status says %d used, %d free; the replay %d used, %d free (the controller writes the status a moment after each change; a lasting difference means it is not running or not leader)",
					p.Name, fam, row.ReportedUsed, row.ReportedFree, row.Used, row.Free))
			}
			row.Services = holders[p.Name+"/"+fam]
			sort.Strings(row.Services)
			if !p.Advertised() && row.Used > 0 {
				r.Problems = append(r.Problems, fmt.Sprintf("pool %s (%s): %d addresses in use, but no L2Advertisement or BGPAdvertisement selects the pool: nobody announces them", p.Name, fam, row.Used))
			}
			if row.Free == 0 && row.Size != math.MaxInt64 {
				r.Notes = append(r.Notes, fmt.Sprintf("pool %s (%s) is full: the next Service that needs it stays pending", p.Name, fam))
			}
			r.Pools = append(r.Pools, row)
		}
	}
	for _, s := range v.handled() {
		key := svcreq.Key(s)
		if len(svcreq.IngressIPs(s)) > 0 {
			if err := v.importErr[key]; err != nil {
				r.Problems = append(r.Problems, fmt.Sprintf("Service %s: the addresses its status shows are not valid: %v", key, err))
			}
			continue
		}
		var msg string
		if err := v.reqErr[key]; err != nil {
			msg = err.Error()
		} else if _, err := v.alloc.Allocate(v.reqs[key]); err != nil {
			msg = err.Error()
		} else {
			msg = "the allocator has an address for it now; the controller has not written it"
		}
		r.Pending = append(r.Pending, PendingService{Service: key, Error: msg})
		r.Problems = append(r.Problems, fmt.Sprintf("Service %s is pending: %s", key, msg))
	}
	r.Problems = oneLine(r.Problems)
	return r
}

// reportedCounters returns the status counters of pool name for family fi
// (0 IPv4, 1 IPv6), or -1, -1 when the status was never written.
func reportedCounters(c *Cluster, name string, fi int) (used, free int64) {
	for i := range c.Resources.Pools {
		p := &c.Resources.Pools[i]
		if p.Name != name {
			continue
		}
		st := p.Status
		if st.AssignedIPv4 == 0 && st.AvailableIPv4 == 0 && st.AssignedIPv6 == 0 && st.AvailableIPv6 == 0 {
			return -1, -1
		}
		if fi == 0 {
			return st.AssignedIPv4, st.AvailableIPv4
		}
		return st.AssignedIPv6, st.AvailableIPv6
	}
	return -1, -1
}

package ipam

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
)

// TestSelectsAndCandidates: Pool.Selects gives the allocator's own answer
// (the pool is a candidate exactly when it selects the request) and names
// the part of serviceAllocation that refuses it; Candidates lists the pools
// in Allocate's order.
func TestSelectsAndCandidates(t *testing.T) {
	team := labels.SelectorFromSet(labels.Set{"team": "blue"})
	web := labels.SelectorFromSet(labels.Set{"app": "web"})
	pools := []Pool{
		{Name: "general", Prefixes: mustPrefixes(t, "198.51.100.0/30"), AutoAssign: true},
		{Name: "ns-list", Prefixes: mustPrefixes(t, "198.51.100.8/30"), AutoAssign: true, ServiceAllocation: &ServiceAllocation{Priority: 20, Namespaces: []string{"prod"}}},
		{Name: "ns-sel", Prefixes: mustPrefixes(t, "198.51.100.16/30"), AutoAssign: true, ServiceAllocation: &ServiceAllocation{Priority: 10, NamespaceSelectors: []labels.Selector{team}}},
		{Name: "svc-sel", Prefixes: mustPrefixes(t, "198.51.100.24/30"), AutoAssign: true, ServiceAllocation: &ServiceAllocation{ServiceSelectors: []labels.Selector{web}}},
		{Name: "manual", Prefixes: mustPrefixes(t, "198.51.100.32/30"), AutoAssign: false},
	}
	a := New()
	if _, err := a.SetPools(pools); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		req      Request
		selected map[string]string // pool -> "" or a substring of why not
		cands    []string
	}{
		{"plain", Request{Key: "dev/a", Namespace: "dev"},
			map[string]string{"general": "", "ns-list": `namespace "dev" is not in serviceAllocation.namespaces [prod]`,
				"ns-sel": "match none of serviceAllocation.namespaceSelectors [{team=blue}]", "svc-sel": "match none of serviceAllocation.serviceSelectors [{app=web}]", "manual": ""},
			[]string{"general"}},
		{"everything", Request{Key: "prod/a", Namespace: "prod", NamespaceLabels: map[string]string{"team": "blue"}, Labels: map[string]string{"app": "web"}},
			map[string]string{"general": "", "ns-list": "", "ns-sel": "", "svc-sel": "", "manual": ""},
			[]string{"ns-sel", "ns-list", "svc-sel", "general"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range pools {
				ok, why := pools[i].Selects(&tc.req)
				want := tc.selected[pools[i].Name]
				if ok != (want == "") || !strings.Contains(why, want) {
					t.Errorf("%s.Selects = %v, %q; want selected=%v, why containing %q", pools[i].Name, ok, why, want == "", want)
				}
			}
			if got := a.Candidates(tc.req); strings.Join(got, ",") != strings.Join(tc.cands, ",") {
				t.Errorf("Candidates = %v, want %v", got, tc.cands)
			}
		})
	}
}

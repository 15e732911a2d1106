package allocation

import (
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/internal/annotations"
)

// statusPatch writes exactly these documents (the ones json.Marshal gave
// for the same patch built from maps, keys in sorted order): the ingress
// list, our condition or its deletion, the resourceVersion precondition
// and the pool annotation (null removes it), each only when asked for.
func TestStatusPatch(t *testing.T) {
	ts := metav1.NewTime(time.Date(2026, 12, 5, 9, 30, 0, 0, time.UTC))
	ok := &metav1.Condition{Type: ConditionType, Status: metav1.ConditionTrue, Reason: ReasonAllocated,
		Message: `Assigned IP ["198.51.100.1" "2001:db8::1"]`, ObservedGeneration: 3, LastTransitionTime: ts}
	fail := &metav1.Condition{Type: ConditionType, Status: metav1.ConditionFalse, Reason: ReasonInvalidRequest,
		Message: "bad <value> & \"quoted\"\n\ttab \u2028", LastTransitionTime: ts}
	pool, empty := "pool-a", ""
	two := []netip.Addr{netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("2001:db8::1")}
	for _, c := range []struct {
		name string
		rv   string
		ips  []netip.Addr
		cond *metav1.Condition
		pool *string
		want string
	}{
		{"addresses, condition and pool", "123", two, ok, &pool,
			`{"metadata":{"annotations":{"metallb.io/ip-allocated-from-pool":"pool-a"},"resourceVersion":"123"},"status":{"conditions":[{"type":"herald.io/IPAllocated","status":"True","observedGeneration":3,"lastTransitionTime":"2026-12-05T09:30:00Z","reason":"IPAllocated","message":"Assigned IP [\"198.51.100.1\" \"2001:db8::1\"]"}],"loadBalancer":{"ingress":[{"ip":"198.51.100.1","ipMode":"VIP"},{"ip":"2001:db8::1","ipMode":"VIP"}]}}}`},
		{"no pool", "123", two[:1], ok, nil,
			`{"metadata":{"resourceVersion":"123"},"status":{"conditions":[{"type":"herald.io/IPAllocated","status":"True","observedGeneration":3,"lastTransitionTime":"2026-12-05T09:30:00Z","reason":"IPAllocated","message":"Assigned IP [\"198.51.100.1\" \"2001:db8::1\"]"}],"loadBalancer":{"ingress":[{"ip":"198.51.100.1","ipMode":"VIP"}]}}}`},
		{"failure without precondition", "", nil, fail, nil,
			`{"status":{"conditions":[{"type":"herald.io/IPAllocated","status":"False","lastTransitionTime":"2026-12-05T09:30:00Z","reason":"InvalidRequest","message":"bad \u003cvalue\u003e \u0026 \"quoted\"\n\ttab \u2028"}],"loadBalancer":{"ingress":null}}}`},
		{"clear with pool removed", "7", nil, nil, &empty,
			`{"metadata":{"annotations":{"metallb.io/ip-allocated-from-pool":null},"resourceVersion":"7"},"status":{"conditions":[{"$patch":"delete","type":"herald.io/IPAllocated"}],"loadBalancer":{"ingress":null}}}`},
		{"clear", "", nil, nil, nil,
			`{"status":{"conditions":[{"$patch":"delete","type":"herald.io/IPAllocated"}],"loadBalancer":{"ingress":null}}}`},
	} {
		got, err := statusPatch(c.rv, c.ips, c.cond, c.pool)
		if err != nil || string(got) != c.want {
			t.Errorf("%s: statusPatch = %s, %v\nwant %s", c.name, got, err, c.want)
		}
	}

	// The annotation key spelled in patchPoolAnnotation's tag is the pool
	// annotation's.
	b, err := statusPatch("", nil, nil, &pool)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(b, &doc); err != nil || doc.Metadata.Annotations[annotations.AllocatedFromPool] != pool {
		t.Errorf("patch %s sets annotations %v (%v), want %s=%s", b, doc.Metadata.Annotations, err, annotations.AllocatedFromPool, pool)
	}
}

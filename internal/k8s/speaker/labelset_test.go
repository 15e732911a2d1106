package speaker

import (
	"maps"
	"runtime"
	"testing"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// TestLabelSetMatchesAsMap checks that label selectors give the same
// answer on a labelSet as on the map it was made from.
func TestLabelSetMatchesAsMap(t *testing.T) {
	objLabels := []map[string]string{
		nil,
		{},
		{"app": "web"},
		{"app.kubernetes.io/name": "svc-1", "app.kubernetes.io/part-of": "shop", "tier": ""},
		{"z": "1", "a": "2", "m": "3", "b": "4"},
	}
	selectors := []metav1.LabelSelector{
		{},
		{MatchLabels: map[string]string{"app": "web"}},
		{MatchLabels: map[string]string{"app.kubernetes.io/part-of": "shop"}},
		{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpExists}}},
		{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpDoesNotExist}}},
		{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: metav1.LabelSelectorOpIn, Values: []string{"2", "9"}}}},
		{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "m", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"3"}}}},
	}
	for _, m := range objLabels {
		ls := newLabelSet(m)
		if got := ls.Map(); !maps.Equal(got, m) {
			t.Errorf("newLabelSet(%v).Map() = %v", m, got)
		}
		for _, s := range selectors {
			sel, err := metav1.LabelSelectorAsSelector(&s)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := sel.Matches(ls), sel.Matches(labels.Set(m)); got != want {
				t.Errorf("selector %v on %v: labelSet %v, map %v", sel, m, got, want)
			}
		}
		for k, v := range m {
			if got, ok := ls.Lookup(k); !ok || got != v {
				t.Errorf("Lookup(%q) on %v = %q, %v", k, m, got, ok)
			}
		}
		if ls.Has("absent") || ls.Get("absent") != "" {
			t.Errorf("%v has a label it was not given", m)
		}
	}
}

// TestLabelSetSharesAcrossCollections: a label made after a garbage
// collection shares the canonical strings of one made before it while the
// first set is alive (the handles keep them), so a speaker whose Services
// arrive one at a time holds each common key and value once.
func TestLabelSetSharesAcrossCollections(t *testing.T) {
	m := map[string]string{"app.kubernetes.io/part-of": "shop"}
	first := newLabelSet(m)
	runtime.GC()
	runtime.GC()
	second := newLabelSet(maps.Clone(m))
	k1, _ := first.Lookup("app.kubernetes.io/part-of")
	k2, _ := second.Lookup("app.kubernetes.io/part-of")
	if unsafe.StringData(k1) != unsafe.StringData(k2) {
		t.Error("a label set made after a collection holds its own copies of the strings")
	}
	runtime.KeepAlive(first)
}

package speaker

import (
	"cmp"
	"slices"
	"unique"

	"k8s.io/apimachinery/pkg/labels"
)

// labelSet is an object's metadata.labels as key/value pairs sorted by key:
// what the speaker's cache keeps of a Service's labels, for the
// advertisements' serviceSelectors (labels.Labels). A Go map of three
// labels costs about 300 bytes before its strings; a pair here costs 16
// bytes, two handles of canonical strings (package unique): a key or value
// that many Services carry (app.kubernetes.io/part-of=shop) is held once
// while any record holds it. Read only.
type labelSet []labelPair

type labelPair struct{ key, value unique.Handle[string] }

// newLabelSet returns m as a labelSet (nil when m is empty).
func newLabelSet(m map[string]string) labelSet {
	if len(m) == 0 {
		return nil
	}
	out := make(labelSet, 0, len(m))
	for k, v := range m {
		out = append(out, labelPair{key: unique.Make(k), value: unique.Make(v)})
	}
	slices.SortFunc(out, func(a, b labelPair) int { return cmp.Compare(a.key.Value(), b.key.Value()) })
	return out
}

// Lookup returns the value of label and whether it is set.
func (l labelSet) Lookup(label string) (string, bool) {
	i, ok := slices.BinarySearchFunc(l, label, func(p labelPair, k string) int { return cmp.Compare(p.key.Value(), k) })
	if !ok {
		return "", false
	}
	return l[i].value.Value(), true
}

// Has reports whether label is set.
func (l labelSet) Has(label string) bool {
	_, ok := l.Lookup(label)
	return ok
}

// Get returns the value of label ("" when it is not set).
func (l labelSet) Get(label string) string {
	v, _ := l.Lookup(label)
	return v
}

// Map returns the labels as a new map (nil when there are none).
func (l labelSet) Map() map[string]string {
	if len(l) == 0 {
		return nil
	}
	m := make(map[string]string, len(l))
	for _, p := range l {
		m[p.key.Value()] = p.value.Value()
	}
	return m
}

var _ labels.Labels = labelSet(nil)

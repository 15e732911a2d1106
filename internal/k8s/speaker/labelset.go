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
// labels costs about 300 bytes before its strings; the pairs cost 32 bytes
// each, and their strings are shared (newLabelSet). Read only.
type labelSet []labelPair

type labelPair struct{ key, value string }

// newLabelSet returns m as a labelSet (nil when m is empty). The keys and
// values are canonical strings (package unique): the same key or value in
// many objects (app.kubernetes.io/part-of=shop) is held once; a value equal
// to name (app.kubernetes.io/name=<the Service's name>) shares name's
// bytes.
func newLabelSet(m map[string]string, name string) labelSet {
	if len(m) == 0 {
		return nil
	}
	out := make(labelSet, 0, len(m))
	for k, v := range m {
		if v == name {
			v = name
		} else {
			v = unique.Make(v).Value()
		}
		out = append(out, labelPair{key: unique.Make(k).Value(), value: v})
	}
	slices.SortFunc(out, func(a, b labelPair) int { return cmp.Compare(a.key, b.key) })
	return out
}

// Lookup returns the value of label and whether it is set.
func (l labelSet) Lookup(label string) (string, bool) {
	i, ok := slices.BinarySearchFunc(l, label, func(p labelPair, k string) int { return cmp.Compare(p.key, k) })
	if !ok {
		return "", false
	}
	return l[i].value, true
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
		m[p.key] = p.value
	}
	return m
}

var _ labels.Labels = labelSet(nil)

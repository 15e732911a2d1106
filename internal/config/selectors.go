package config

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// convertSelectors converts a list of label selectors (field is its JSON path,
// e.g. "spec.nodeSelectors"). It rejects selectors that do not convert,
// duplicate selectors in the list, duplicate match expressions within one
// selector and duplicate values within one expression. An empty list yields
// nil, which callers read as "matches everything".
func convertSelectors(o objRef, field string, in []metav1.LabelSelector, p *problems) []labels.Selector {
	if len(in) == 0 {
		return nil
	}
	out := make([]labels.Selector, 0, len(in))
	seen := map[string]int{}
	for i := range in {
		f := fmt.Sprintf("%s[%d]", field, i)
		sel, ok := convertSelector(o, f, &in[i], p)
		if !ok {
			continue
		}
		key := sel.String()
		if j, dup := seen[key]; dup {
			p.add(o.invalid(f, key, "duplicate of %s[%d]", field, j))
			continue
		}
		seen[key] = i
		out = append(out, sel)
	}
	return out
}

// convertSelector converts one selector (see convertSelectors).
func convertSelector(o objRef, field string, in *metav1.LabelSelector, p *problems) (labels.Selector, bool) {
	ok := true
	exprs := map[string]int{}
	for j, e := range in.MatchExpressions {
		f := fmt.Sprintf("%s.matchExpressions[%d]", field, j)
		key := e.Key + " " + string(e.Operator) + " " + strings.Join(sortedCopy(e.Values), ",")
		if k, dup := exprs[key]; dup {
			p.add(o.invalid(f, "", "duplicate of matchExpressions[%d]", k))
			ok = false
		}
		exprs[key] = j
		vals := map[string]bool{}
		for _, v := range e.Values {
			if vals[v] {
				p.add(o.invalid(f+".values", v, "duplicate value"))
				ok = false
			}
			vals[v] = true
		}
	}
	sel, err := metav1.LabelSelectorAsSelector(in)
	if err != nil {
		p.add(o.invalid(field, "", "invalid label selector: %s", err))
		return nil, false
	}
	return sel, ok
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// matchesAny reports whether set matches at least one selector; an empty
// list matches everything, and a nil set is no labels.
func matchesAny(sels []labels.Selector, set labels.Labels) bool {
	if len(sels) == 0 {
		return true
	}
	if set == nil {
		set = labels.Set(nil) // no labels
	}
	for _, s := range sels {
		if s.Matches(set) {
			return true
		}
	}
	return false
}

// selectsEverything reports whether a selector list matches every label set
// (empty list, or a list containing an empty selector).
func selectsEverything(sels []labels.Selector) bool {
	if len(sels) == 0 {
		return true
	}
	for _, s := range sels {
		if s.Empty() {
			return true
		}
	}
	return false
}

// selectorStrings renders selectors canonically (for fingerprints and
// duplicate detection).
func selectorStrings(sels []labels.Selector) []string {
	out := make([]string, len(sels))
	for i, s := range sels {
		out[i] = s.String()
	}
	return out
}

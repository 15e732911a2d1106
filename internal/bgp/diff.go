package bgp

import (
	"slices"
	"strings"
)

// PeerUpdate is a peer whose configuration changed.
type PeerUpdate struct {
	Old, New PeerConfig
}

// PeerDiff is the minimal set of session operations, each list sorted by name.
type PeerDiff struct {
	Add    []PeerConfig
	Update []PeerUpdate
	Delete []PeerConfig
}

// Empty reports whether nothing changes.
func (d PeerDiff) Empty() bool { return len(d.Add)+len(d.Update)+len(d.Delete) == 0 }

// DiffPeers compares desired against applied by Name. A peer present in both
// with any differing field is an Update; unchanged peers appear nowhere.
// Names are assumed unique (ValidatePeers).
func DiffPeers(desired, applied []PeerConfig) PeerDiff {
	var d PeerDiff
	old := make(map[string]PeerConfig, len(applied))
	for _, p := range applied {
		old[p.Name] = p
	}
	seen := make(map[string]bool, len(desired))
	for _, p := range desired {
		seen[p.Name] = true
		o, ok := old[p.Name]
		switch {
		case !ok:
			d.Add = append(d.Add, p)
		case o != p:
			d.Update = append(d.Update, PeerUpdate{Old: o, New: p})
		}
	}
	for _, p := range applied {
		if !seen[p.Name] {
			d.Delete = append(d.Delete, p)
		}
	}
	byName := func(a, b PeerConfig) int { return strings.Compare(a.Name, b.Name) }
	slices.SortFunc(d.Add, byName)
	slices.SortFunc(d.Delete, byName)
	slices.SortFunc(d.Update, func(a, b PeerUpdate) int { return strings.Compare(a.New.Name, b.New.Name) })
	return d
}

// PathDiff is the minimal set of path operations, each list sorted by prefix.
// Update holds the new version of a prefix whose attributes or peers changed.
type PathDiff struct {
	Add    []Path
	Update []Path
	Delete []Path
}

// Empty reports whether nothing changes.
func (d PathDiff) Empty() bool { return len(d.Add)+len(d.Update)+len(d.Delete) == 0 }

// DiffPaths compares desired against applied by prefix. Both inputs are
// normalised with MergePaths first, so duplicate prefixes are merged rather
// than treated as separate paths. Unchanged prefixes appear nowhere.
func DiffPaths(desired, applied []Path) PathDiff {
	want, _ := MergePaths(desired)
	have, _ := MergePaths(applied)
	var d PathDiff
	i, j := 0, 0
	for i < len(want) || j < len(have) {
		switch {
		case j == len(have) || (i < len(want) && comparePrefix(want[i].Prefix, have[j].Prefix) < 0):
			d.Add = append(d.Add, want[i])
			i++
		case i == len(want) || comparePrefix(want[i].Prefix, have[j].Prefix) > 0:
			d.Delete = append(d.Delete, have[j])
			j++
		default:
			if !want[i].Equal(have[j]) {
				d.Update = append(d.Update, want[i])
			}
			i++
			j++
		}
	}
	return d
}

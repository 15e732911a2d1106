// Package intern shares equal read-only values between the objects of an
// informer cache, so that thousands of cached objects repeating one small
// map (an annotation every Service carries with the same value) hold one
// copy of it. What it hands out must never be written to: the caches'
// objects are replaced by the informer, not modified.
package intern

import (
	"strings"
	"sync"
)

// Maps hands out one shared map per (key, value) for maps holding that
// single entry, for a bounded number of distinct pairs (the values are anyone's to
// write who may write the object, so the set is bounded by NewMaps). Safe for
// concurrent use.
type Maps struct {
	mu    sync.Mutex
	limit int
	maps  map[[2]string]map[string]string
}

// NewMaps returns a Maps that keeps at most limit shared maps.
func NewMaps(limit int) *Maps {
	return &Maps{limit: limit, maps: map[[2]string]map[string]string{}}
}

// Single returns the shared map {key: value}. m must hold exactly that
// entry: it becomes the shared map when there is none yet and room, and
// is returned as it is when there is no room.
func (s *Maps) Single(key, value string, m map[string]string) map[string]string {
	kv := [2]string{key, value}
	s.mu.Lock()
	defer s.mu.Unlock()
	if shared, ok := s.maps[kv]; ok {
		return shared
	}
	if len(s.maps) < s.limit {
		// Own copies of the strings: kv may point into a larger decoded
		// buffer.
		s.maps[[2]string{strings.Clone(key), strings.Clone(value)}] = m
	}
	return m
}

// Len returns how many shared maps s holds.
func (s *Maps) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.maps)
}

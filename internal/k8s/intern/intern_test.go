package intern

import (
	"reflect"
	"testing"
)

func TestMapsSingle(t *testing.T) {
	s := NewMaps(2)
	a1 := s.Single("k", "a", map[string]string{"k": "a"})
	a2 := s.Single("k", "a", map[string]string{"k": "a"})
	if reflect.ValueOf(a1).Pointer() != reflect.ValueOf(a2).Pointer() {
		t.Error("two maps {k: a}: not shared")
	}
	b := s.Single("k", "b", map[string]string{"k": "b"})
	if b["k"] != "b" || reflect.ValueOf(b).Pointer() == reflect.ValueOf(a1).Pointer() {
		t.Errorf("{k: b} got %v, the map of {k: a}", b)
	}
	// Full (2 pairs): a third pair gets its own map back, and is not kept.
	own := map[string]string{"k": "c"}
	if got := s.Single("k", "c", own); reflect.ValueOf(got).Pointer() != reflect.ValueOf(own).Pointer() {
		t.Error("beyond the bound: not the caller's own map")
	}
	if s.Len() != 2 {
		t.Errorf("Len = %d, want 2 (the bound)", s.Len())
	}
	if got := s.Single("other", "a", map[string]string{"other": "a"}); got["other"] != "a" {
		t.Errorf("another key with a known value got %v", got)
	}
}

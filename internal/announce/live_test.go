package announce

import (
	"maps"
	"testing"
)

func TestLiveFromNodeConditions(t *testing.T) {
	t.Parallel()
	got := LiveFromNodeConditions([]Node{
		{Name: "ready", Ready: true},
		{Name: "not-ready"},
		{Name: "network-unavailable", Ready: true, NetworkUnavailable: true},
		{Name: "out-of-service", Ready: true, OutOfService: true},
		{Name: "all-bad", NetworkUnavailable: true, OutOfService: true},
	})
	want := map[string]bool{
		"ready":               true,
		"not-ready":           false,
		"network-unavailable": false,
		"out-of-service":      false,
		"all-bad":             false,
	}
	if !maps.Equal(got, want) {
		t.Errorf("LiveFromNodeConditions = %v, want %v", got, want)
	}
	if got := LiveFromNodeConditions(nil); len(got) != 0 {
		t.Errorf("no nodes: %v, want empty", got)
	}
}

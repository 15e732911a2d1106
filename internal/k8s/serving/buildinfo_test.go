package serving

import (
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/herald-lb/herald/internal/version"
)

// TestBuildInfo gathers herald_build_info from a registry: one series, value
// 1, labelled with the stamped version and commit and the Go version.
func TestBuildInfo(t *testing.T) {
	defer func(v, c string) { version.Version, version.Commit = v, c }(version.Version, version.Commit)
	version.Version, version.Commit = "v9.8.7", "feedface"
	reg := prometheus.NewPedanticRegistry()
	if err := RegisterBuildInfo(reg); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != BuildInfoName || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v, want one %s series", mfs, BuildInfoName)
	}
	m := mfs[0].GetMetric()[0]
	if v := m.GetGauge().GetValue(); v != 1 {
		t.Errorf("%s = %v, want 1", BuildInfoName, v)
	}
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	want := map[string]string{"version": "v9.8.7", "commit": "feedface", "goversion": runtime.Version()}
	if len(got) != len(want) {
		t.Errorf("labels %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("label %s = %q, want %q", k, got[k], v)
		}
	}
}

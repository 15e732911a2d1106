package serving

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/herald-lb/herald/internal/version"
)

// BuildInfoName is the build-information metric both binaries export.
const BuildInfoName = "herald_build_info"

// NewBuildInfo returns the gauge herald_build_info, always 1, whose labels
// name the running build: version (internal/version.Version, "v0.1.0"),
// commit (version.Revision) and goversion ("go1.26.8"). It follows the
// Prometheus convention of an "_info" metric (as go_build_info and
// kube-state-metrics' *_info): join on it to label other series by release.
func NewBuildInfo() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: BuildInfoName,
		Help: "A metric with a constant '1' value labeled by the version, commit and Go version Herald was built with.",
		ConstLabels: prometheus.Labels{
			"version":   version.Version,
			"commit":    version.Revision(),
			"goversion": version.GoVersion(),
		},
	})
	g.Set(1)
	return g
}

// RegisterBuildInfo registers NewBuildInfo on reg (the binaries pass
// controller-runtime's metrics registry, which they serve on --port).
func RegisterBuildInfo(reg prometheus.Registerer) error {
	return reg.Register(NewBuildInfo())
}

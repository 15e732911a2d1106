// Package serving holds the flags and controller-runtime options that both
// binaries share for what they serve besides their main job: Prometheus
// metrics (HTTPS with Kubernetes authentication and authorization by default,
// as MetalLB does, or plain HTTP on request) and the /healthz and /readyz
// probes, and the METALLB_* environment fallbacks of their flags (env.go).
package serving

import (
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Flags are the serving flags, named as MetalLB names them where MetalLB has
// them (--port, --health-probe-port, --tls-min-version, --metrics-cert-dir).
type Flags struct {
	// MetricsPort is --port: the metrics port, 0 disables metrics.
	MetricsPort int
	// MetricsBindHost is --metrics-bind-host: the address metrics listen on
	// ("" = every address).
	MetricsBindHost string
	// MetricsSecure is --metrics-secure: serve HTTPS and require a bearer
	// token allowed to GET /metrics (TokenReview + SubjectAccessReview).
	// false serves plain HTTP without authentication.
	MetricsSecure bool
	// MetricsCertDir is --metrics-cert-dir: tls.crt and tls.key for metrics;
	// empty means a self-signed certificate.
	MetricsCertDir string
	// HealthProbePort is --health-probe-port: /healthz and /readyz.
	HealthProbePort int
	// HealthProbeHost is the address the probes bind to ("" = every address;
	// the speaker, on the host network, binds 127.0.0.1 like MetalLB).
	HealthProbeHost string
	// TLSMinVersion is --tls-min-version: VersionTLS12 or VersionTLS13.
	TLSMinVersion string
}

// Register adds the flags to fs with the given default metrics port.
func (f *Flags) Register(fs *flag.FlagSet, defaultMetricsPort int) {
	fs.IntVar(&f.MetricsPort, "port", defaultMetricsPort, "Port of the /metrics endpoint; 0 disables metrics.")
	fs.StringVar(&f.MetricsBindHost, "metrics-bind-host", "", "Address the metrics endpoint listens on (empty: all addresses).")
	fs.BoolVar(&f.MetricsSecure, "metrics-secure", true, "Serve metrics over HTTPS with Kubernetes authentication and authorization; false serves plain HTTP.")
	fs.StringVar(&f.MetricsCertDir, "metrics-cert-dir", "", "Directory with tls.crt and tls.key for the metrics endpoint (empty: self-signed).")
	fs.IntVar(&f.HealthProbePort, "health-probe-port", 17472, "Port of /healthz and /readyz; 0 disables them.")
	fs.StringVar(&f.TLSMinVersion, "tls-min-version", "VersionTLS12", "Minimum TLS version for metrics and webhooks: VersionTLS12 or VersionTLS13.")
}

// TLSOptions returns the TLS settings --tls-min-version asks for, or an error
// naming the flag.
func (f *Flags) TLSOptions() ([]func(*tls.Config), error) {
	var v uint16
	switch f.TLSMinVersion {
	case "VersionTLS12", "":
		v = tls.VersionTLS12
	case "VersionTLS13":
		v = tls.VersionTLS13
	default:
		return nil, fmt.Errorf("--tls-min-version %q: must be VersionTLS12 or VersionTLS13", f.TLSMinVersion)
	}
	return []func(*tls.Config){func(c *tls.Config) {
		c.MinVersion = v
		// HTTP/2 stays off (CVE-2023-44487 rapid reset), as MetalLB does.
		c.NextProtos = []string{"http/1.1"}
	}}, nil
}

// MetricsOptions returns the controller-runtime metrics server options.
func (f *Flags) MetricsOptions() (metricsserver.Options, error) {
	tlsOpts, err := f.TLSOptions()
	if err != nil {
		return metricsserver.Options{}, err
	}
	if f.MetricsPort == 0 {
		return metricsserver.Options{BindAddress: "0"}, nil
	}
	o := metricsserver.Options{
		BindAddress:   net.JoinHostPort(f.MetricsBindHost, strconv.Itoa(f.MetricsPort)),
		SecureServing: f.MetricsSecure,
	}
	if f.MetricsSecure {
		o.FilterProvider = filters.WithAuthenticationAndAuthorization
		o.CertDir = f.MetricsCertDir
		o.TLSOpts = tlsOpts
	}
	return o, nil
}

// HealthProbeAddress returns the probes' bind address, "0" when disabled.
func (f *Flags) HealthProbeAddress() string {
	if f.HealthProbePort == 0 {
		return "0"
	}
	return net.JoinHostPort(f.HealthProbeHost, strconv.Itoa(f.HealthProbePort))
}

// AddHandler serves h at path on the metrics server of o, behind the same
// authentication and authorization as /metrics when metrics are secure
// (controller-runtime applies o.FilterProvider's filter to every extra
// handler; the caller then needs the verb, e.g. put, on the non-resource
// URL path). Nothing is added when metrics are disabled (BindAddress "0").
func AddHandler(o *metricsserver.Options, path string, h http.Handler) {
	if o.BindAddress == "0" {
		return
	}
	if o.ExtraHandlers == nil {
		o.ExtraHandlers = map[string]http.Handler{}
	}
	o.ExtraHandlers[path] = h
}

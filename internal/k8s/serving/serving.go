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
	"strings"

	cliflag "k8s.io/component-base/cli/flag"

	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Flags are the serving flags, named as MetalLB names them where MetalLB has
// them (--port, --health-probe-port, --tls-min-version, --tls-cipher-suites,
// --tls-curve-preferences, --metrics-cert-dir).
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
	// TLSMinVersion is --tls-min-version: VersionTLS12 or VersionTLS13
	// (RFC 8446); "" = VersionTLS13, MetalLB's default.
	TLSMinVersion string
	// TLSCipherSuites is --tls-cipher-suites: comma-separated Go/IANA
	// cipher suite names (crypto/tls constants, e.g.
	// TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256) offered to TLS 1.2 clients;
	// "" = Go's defaults. TLS 1.3 suites are not configurable in Go, so a
	// list with VersionTLS13 is an error, as in MetalLB.
	TLSCipherSuites string
	// TLSCurvePreferences is --tls-curve-preferences: comma-separated
	// numeric tls.CurveID values in order of preference (29 = X25519,
	// 23 = P-256, 4588 = X25519MLKEM768), the format of Kubernetes' and
	// MetalLB's flag; "" = Go's defaults.
	TLSCurvePreferences string
}

// Register adds the flags to fs with the given default metrics port.
func (f *Flags) Register(fs *flag.FlagSet, defaultMetricsPort int) {
	fs.IntVar(&f.MetricsPort, "port", defaultMetricsPort, "Port of the /metrics endpoint; 0 disables metrics.")
	fs.StringVar(&f.MetricsBindHost, "metrics-bind-host", "", "Address the metrics endpoint listens on (empty: all addresses).")
	fs.BoolVar(&f.MetricsSecure, "metrics-secure", true, "Serve metrics over HTTPS with Kubernetes authentication and authorization; false serves plain HTTP.")
	fs.StringVar(&f.MetricsCertDir, "metrics-cert-dir", "", "Directory with tls.crt and tls.key for the metrics endpoint (empty: self-signed).")
	fs.IntVar(&f.HealthProbePort, "health-probe-port", 17472, "Port of /healthz and /readyz; 0 disables them.")
	fs.StringVar(&f.TLSMinVersion, "tls-min-version", "VersionTLS13", "Minimum TLS version for metrics and webhooks: VersionTLS12 or VersionTLS13 (empty: VersionTLS13).")
	fs.StringVar(&f.TLSCipherSuites, "tls-cipher-suites", "", "Comma-separated TLS 1.2 cipher suite names for metrics and webhooks (Go crypto/tls names); empty: Go's defaults. Needs --tls-min-version=VersionTLS12.")
	fs.StringVar(&f.TLSCurvePreferences, "tls-curve-preferences", "", "Comma-separated numeric CurveID values (https://pkg.go.dev/crypto/tls#CurveID, e.g. 4588,29) for metrics and webhooks; empty: Go's defaults.")
}

// TLSOptions returns the TLS settings of --tls-min-version,
// --tls-cipher-suites and --tls-curve-preferences for every TLS server of
// the binary (metrics, webhooks), or an error naming the flag and the value
// it refuses: an unknown version, cipher suite name or curve ID, a
// duplicate curve, or cipher suites with VersionTLS13. Names and numbers
// are parsed by k8s.io/component-base/cli/flag, as MetalLB and the
// Kubernetes components do.
func (f *Flags) TLSOptions() ([]func(*tls.Config), error) {
	var v uint16
	switch f.TLSMinVersion {
	case "VersionTLS13", "":
		v = tls.VersionTLS13
	case "VersionTLS12":
		v = tls.VersionTLS12
	default:
		return nil, fmt.Errorf("--tls-min-version %q: must be VersionTLS12 or VersionTLS13", f.TLSMinVersion)
	}
	ciphers, err := parseCipherSuites(f.TLSCipherSuites)
	if err != nil {
		return nil, fmt.Errorf("--tls-cipher-suites %q: %w", f.TLSCipherSuites, err)
	}
	if ciphers != nil && v == tls.VersionTLS13 {
		return nil, fmt.Errorf("--tls-cipher-suites %q: cipher suites apply to TLS 1.2 only (Go does not configure TLS 1.3 suites); set --tls-min-version=VersionTLS12 or remove the list", f.TLSCipherSuites)
	}
	curves, err := parseCurvePreferences(f.TLSCurvePreferences)
	if err != nil {
		return nil, fmt.Errorf("--tls-curve-preferences %q: %w", f.TLSCurvePreferences, err)
	}
	return []func(*tls.Config){func(c *tls.Config) {
		c.MinVersion = v
		if ciphers != nil {
			c.CipherSuites = ciphers
		}
		if curves != nil {
			c.CurvePreferences = curves
		}
		// HTTP/2 stays off (CVE-2023-44487 rapid reset), as MetalLB does.
		c.NextProtos = []string{"http/1.1"}
	}}, nil
}

// splitList splits a comma-separated flag value, trimming spaces; nil for
// "".
func splitList(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// parseCipherSuites returns the IDs of the comma-separated cipher suite
// names, nil for "".
func parseCipherSuites(s string) ([]uint16, error) {
	names := splitList(s)
	if names == nil {
		return nil, nil
	}
	return cliflag.TLSCipherSuites(names)
}

// parseCurvePreferences returns the curves of the comma-separated numeric
// CurveIDs, nil for "".
func parseCurvePreferences(s string) ([]tls.CurveID, error) {
	parts := splitList(s)
	if parts == nil {
		return nil, nil
	}
	ids := make([]int32, 0, len(parts))
	for _, p := range parts {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("curve %q: must be a numeric CurveID (1-65535, https://pkg.go.dev/crypto/tls#CurveID)", p)
		}
		ids = append(ids, int32(n))
	}
	return cliflag.TLSCurvePreferences(ids)
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

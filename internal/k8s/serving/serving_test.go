package serving

import (
	"context"
	"crypto/tls"
	"flag"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/herald-lb/herald/internal/poll"
)

func TestMetricsOptions(t *testing.T) {
	var f Flags
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	f.Register(fs, 9120)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	o, err := f.MetricsOptions()
	if err != nil {
		t.Fatal(err)
	}
	if o.BindAddress != ":9120" || !o.SecureServing || o.FilterProvider == nil {
		t.Errorf("default must be secure on :9120 with authn/authz, got %+v", o)
	}
	if err := fs.Parse([]string{"--metrics-secure=false", "--port=7472", "--metrics-bind-host=127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	o, _ = f.MetricsOptions()
	if o.BindAddress != "127.0.0.1:7472" || o.SecureServing || o.FilterProvider != nil {
		t.Errorf("plain metrics wanted, got %+v", o)
	}
	f.MetricsPort = 0
	if o, _ = f.MetricsOptions(); o.BindAddress != "0" {
		t.Errorf("port 0 must disable metrics, got %q", o.BindAddress)
	}
	f.HealthProbePort = 0
	if got := f.HealthProbeAddress(); got != "0" {
		t.Errorf("health probe port 0 must disable, got %q", got)
	}
}

func TestTLSOptions(t *testing.T) {
	f := Flags{TLSMinVersion: "VersionTLS13"}
	opts, err := f.TLSOptions()
	if err != nil {
		t.Fatal(err)
	}
	var c tls.Config
	for _, o := range opts {
		o(&c)
	}
	if c.MinVersion != tls.VersionTLS13 || len(c.NextProtos) != 1 || c.NextProtos[0] != "http/1.1" {
		t.Errorf("got min %x protos %v", c.MinVersion, c.NextProtos)
	}
	f.TLSMinVersion = "TLS1.0"
	if _, err := f.TLSOptions(); err == nil {
		t.Error("bad version accepted")
	}
}

// startMetrics starts controller-runtime's secure metrics server as the
// binaries do (MetricsOptions from the flags args; self-signed certificate),
// without the Kubernetes authentication filter, which needs an API server
// and runs after the TLS handshake. It returns the server's address.
func startMetrics(t *testing.T, args ...string) string {
	t.Helper()
	var f Flags
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	f.Register(fs, 0)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	if err := fs.Parse(append([]string{"--metrics-bind-host=127.0.0.1", "--port=" + strconv.Itoa(port)}, args...)); err != nil {
		t.Fatal(err)
	}
	o, err := f.MetricsOptions()
	if err != nil {
		t.Fatal(err)
	}
	o.FilterProvider = nil
	srv, err := metricsserver.NewServer(o, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("metrics server: %v", err)
		}
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	poll.Until(t, 30*time.Second, "metrics server listening", func() error {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	})
	return addr
}

// handshake connects to addr with client and returns the negotiated state.
func handshake(addr string, client *tls.Config) (tls.ConnectionState, error) {
	client.InsecureSkipVerify = true // unverified: self-signed test server; only the handshake parameters matter
	c, err := tls.Dial("tcp", addr, client)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer c.Close()
	return c.ConnectionState(), nil
}

// TestTLSServer runs the real metrics server with the TLS flags and
// connects real TLS clients: TLS 1.3 only by default (MetalLB's default),
// TLS 1.2 on request with the chosen cipher suite, and the server's curve
// preferences win.
func TestTLSServer(t *testing.T) {
	tls12 := &tls.Config{MaxVersion: tls.VersionTLS12}

	addr := startMetrics(t)
	if _, err := handshake(addr, tls12.Clone()); err == nil {
		t.Error("default: a TLS 1.2 client was accepted")
	}
	st, err := handshake(addr, &tls.Config{})
	if err != nil || st.Version != tls.VersionTLS13 || st.NegotiatedProtocol != "" {
		t.Errorf("default: TLS 1.3 client: version %x ALPN %q err %v", st.Version, st.NegotiatedProtocol, err)
	}

	addr = startMetrics(t, "--tls-min-version=VersionTLS12", "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384")
	st, err = handshake(addr, tls12.Clone())
	if err != nil || st.Version != tls.VersionTLS12 || st.CipherSuite != tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 {
		t.Errorf("VersionTLS12: TLS 1.2 client: version %x suite %s err %v", st.Version, tls.CipherSuiteName(st.CipherSuite), err)
	}
	if _, err := handshake(addr, &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}}); err == nil {
		t.Error("a TLS 1.2 client without the configured cipher suite was accepted")
	}

	// 23 = P-256. A default Go client offers X25519MLKEM768 and X25519
	// first; the server's preference decides.
	addr = startMetrics(t, "--tls-curve-preferences=23")
	st, err = handshake(addr, &tls.Config{})
	if err != nil || st.CurveID != tls.CurveP256 {
		t.Errorf("--tls-curve-preferences=23: curve %s err %v", st.CurveID, err)
	}
	if _, err := handshake(addr, &tls.Config{CurvePreferences: []tls.CurveID{tls.X25519}}); err == nil {
		t.Error("--tls-curve-preferences=23: an X25519-only client was accepted")
	}
}

// TestTLSOptionsRefused: bad values fail with the flag and value named.
func TestTLSOptionsRefused(t *testing.T) {
	for _, tc := range []struct {
		f    Flags
		want []string
	}{
		{Flags{TLSMinVersion: "VersionTLS11"}, []string{"--tls-min-version", "VersionTLS11"}},
		{Flags{TLSMinVersion: "VersionTLS12", TLSCipherSuites: "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_NO_SUCH_SUITE"}, []string{"--tls-cipher-suites", "TLS_NO_SUCH_SUITE"}},
		{Flags{TLSCipherSuites: "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"}, []string{"--tls-cipher-suites", "TLS 1.2 only", "--tls-min-version=VersionTLS12"}},
		{Flags{TLSCurvePreferences: "X25519"}, []string{"--tls-curve-preferences", `"X25519"`, "numeric"}},
		{Flags{TLSCurvePreferences: "29,29"}, []string{"--tls-curve-preferences", "duplicate"}},
		{Flags{TLSCurvePreferences: "65000"}, []string{"--tls-curve-preferences", "65000", "not supported"}},
	} {
		_, err := tc.f.TLSOptions()
		if err == nil {
			t.Errorf("%+v accepted", tc.f)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: error %q does not name %q", tc.f, err, w)
			}
		}
	}
	// Accepted: spaces around names, both versions, curves.
	for _, f := range []Flags{
		{TLSMinVersion: "VersionTLS12", TLSCipherSuites: " TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 , TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"},
		{TLSMinVersion: "", TLSCurvePreferences: "4588, 29,23"},
	} {
		if _, err := f.TLSOptions(); err != nil {
			t.Errorf("%+v: %v", f, err)
		}
	}
}

package serving

import (
	"crypto/tls"
	"flag"
	"testing"
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

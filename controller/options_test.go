package main

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/herald-lb/herald/internal/k8s/serving"
)

func TestOptions(t *testing.T) {
	saFile := func(ns string) func(string) ([]byte, error) {
		return func(path string) ([]byte, error) {
			if path != serving.ServiceAccountNamespaceFile || ns == "" {
				return nil, errors.New("no such file")
			}
			return []byte(ns + "\n"), nil
		}
	}
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		sa      string
		wantNS  string
		wantErr string
		check   func(*testing.T, *options)
	}{
		{name: "defaults from the service account", sa: "herald-system", wantNS: "herald-system",
			check: func(t *testing.T, o *options) {
				if o.webhookMode != webhookEnabled || o.webhookPort != 9443 || o.apiQPS != 500 || o.apiBurst != 1000 ||
					!o.leaderElect || o.mlSecretName != "" || o.serving.MetricsPort != 9120 || o.serving.HealthProbePort != 17472 ||
					o.certService != "herald-webhook-service" || o.webhookSecret != "herald-webhook-cert" ||
					o.webhookConfig != "herald-webhook-configuration" || o.certDir != "/tmp/k8s-webhook-server/serving-certs" {
					t.Errorf("defaults = %+v", o)
				}
			}},
		{name: "environment", env: map[string]string{"METALLB_NAMESPACE": "lb", "METALLB_ML_SECRET_NAME": "herald-memberlist",
			"METALLB_DEPLOYMENT": "herald-controller", "METALLB_POD_NAME": "herald-controller-abc"}, wantNS: "lb",
			check: func(t *testing.T, o *options) {
				if o.mlSecretName != "herald-memberlist" || o.deployment != "herald-controller" || o.podName != "herald-controller-abc" {
					t.Errorf("env not used: %+v", o)
				}
			}},
		{name: "speaker labels", sa: "x", wantNS: "x", env: map[string]string{"HERALD_SPEAKER_LABELS": "app.kubernetes.io/component=speaker"},
			args: []string{"--speaker-gone-grace", "30s"},
			check: func(t *testing.T, o *options) {
				if o.speakerSelector == nil || o.speakerSelector.String() != "app.kubernetes.io/component=speaker" || o.speakerGrace != 30*time.Second {
					t.Errorf("speaker selector %v, grace %v", o.speakerSelector, o.speakerGrace)
				}
			}},
		{name: "no speaker labels by default", sa: "x", wantNS: "x",
			check: func(t *testing.T, o *options) {
				if o.speakerSelector != nil || o.speakerGrace != time.Minute {
					t.Errorf("speaker selector %v, grace %v", o.speakerSelector, o.speakerGrace)
				}
			}},
		{name: "bad speaker labels", sa: "x", args: []string{"--speaker-labels", "a=b=c"}, wantErr: "--speaker-labels"},
		{name: "bad speaker grace", sa: "x", args: []string{"--speaker-gone-grace", "0s"}, wantErr: "--speaker-gone-grace"},
		{name: "flag wins over environment", args: []string{"--namespace", "flag-ns"}, env: map[string]string{"METALLB_NAMESPACE": "env-ns"}, wantNS: "flag-ns"},
		{name: "no namespace anywhere", wantErr: "--namespace"},
		{name: "bad webhook mode", sa: "x", args: []string{"--webhook-mode", "sometimes"}, wantErr: "--webhook-mode"},
		{name: "bad TLS version", sa: "x", args: []string{"--tls-min-version", "VersionTLS10"}, wantErr: "--tls-min-version"},
		{name: "only webhook, lb class, no leader election", sa: "x", wantNS: "x",
			args: []string{"--webhook-mode", "onlywebhook", "--lb-class", "herald.io/lb", "--leader-elect=false", "--kube-api-qps", "50"},
			check: func(t *testing.T, o *options) {
				if o.webhookMode != webhookOnly || o.lbClass != "herald.io/lb" || o.leaderElect || o.apiQPS != 50 {
					t.Errorf("flags = %+v", o)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("controller", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var o options
			o.register(fs, func(k string) string { return tc.env[k] })
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := o.complete(saFile(tc.sa))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.namespace != tc.wantNS {
				t.Errorf("namespace = %q, want %q", o.namespace, tc.wantNS)
			}
			if tc.check != nil {
				tc.check(t, &o)
			}
		})
	}
}

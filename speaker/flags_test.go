package main

import (
	"errors"
	"flag"
	"io/fs"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/herald-lb/herald/internal/explain"
	"github.com/herald-lb/herald/internal/k8s/serving"
)

// TestElectionNamesAgree: kubectl herald reads the speakers' --l2-election
// values with explain's names and rules (explain.ElectionFromFlags); they
// must be the speaker's, and every value the speaker accepts must give
// the election it runs.
func TestElectionNamesAgree(t *testing.T) {
	for _, tc := range []struct {
		flag string
		want explain.L2Election
	}{{l2ElectionPerAddress, explain.L2ElectionPerAddress}, {l2ElectionBalanced, explain.L2ElectionBalanced}, {l2ElectionMetalLB, explain.L2ElectionMetalLB}} {
		if string(tc.want) != tc.flag {
			t.Errorf("speaker %q, explain %q", tc.flag, tc.want)
		}
		for _, kd := range []string{"herald", "metallb"} {
			o := options{l2Election: tc.flag, mlKeyDerivation: kd, nodeName: "n", namespace: "ns", mlBindPort: 7946}
			err := o.complete(func(string) ([]byte, error) { return nil, fs.ErrNotExist })
			got, gotErr := explain.ElectionFromFlags(tc.flag, kd)
			if (err != nil) != (gotErr != nil) {
				t.Errorf("--l2-election=%s --ml-key-derivation=%s: speaker error %v, explain %v", tc.flag, kd, err, gotErr)
				continue
			}
			if err != nil {
				continue
			}
			want := explain.L2ElectionPerAddress
			switch {
			case o.balancedL2():
				want = explain.L2ElectionBalanced
			case o.announceOptions().ElectByServiceFirstIP:
				want = explain.L2ElectionMetalLB
			}
			if got != want {
				t.Errorf("--l2-election=%s --ml-key-derivation=%s: speaker runs %s, explain says %s", tc.flag, kd, want, got)
			}
		}
	}
}

func TestFlagsEnvFallback(t *testing.T) {
	env := map[string]string{
		"METALLB_NODE_NAME": "n-env", "METALLB_NAMESPACE": "ns-env", "METALLB_ML_BIND_ADDR": "198.51.100.1",
		"METALLB_ML_BIND_PORT": "7947", "METALLB_ML_LABELS": "app=speaker", "METALLB_POD_NAME": "pod-env",
	}
	var o options
	fset := flag.NewFlagSet("t", flag.ContinueOnError)
	o.register(fset, func(k string) string { return env[k] })
	if err := fset.Parse([]string{"--node-name", "n-flag"}); err != nil {
		t.Fatal(err)
	}
	if err := o.complete(func(string) ([]byte, error) { return nil, fs.ErrNotExist }); err != nil {
		t.Fatal(err)
	}
	if o.nodeName != "n-flag" || o.namespace != "ns-env" || o.mlBindPort != 7947 || o.podName != "pod-env" || !o.memberlistEnabled() {
		t.Fatalf("options = %+v", o)
	}
	if !o.enableL2 || !o.enableBGP || o.serving.HealthProbeHost != "127.0.0.1" || o.serving.MetricsPort != 9120 {
		t.Fatalf("defaults wrong: %+v", o)
	}
}

func TestFlagsRequired(t *testing.T) {
	var o options
	fset := flag.NewFlagSet("t", flag.ContinueOnError)
	o.register(fset, func(string) string { return "" })
	if err := fset.Parse(nil); err != nil {
		t.Fatal(err)
	}
	err := o.complete(func(string) ([]byte, error) { return nil, fs.ErrNotExist })
	if err == nil {
		t.Fatal("missing --node-name and namespace accepted")
	}
	if o.memberlistEnabled() {
		t.Fatal("memberlist enabled without --ml-bindaddr/--ml-labels")
	}
	// The namespace falls back to the service account's.
	o.nodeName = "n"
	if err := o.complete(func(p string) ([]byte, error) {
		if p != serving.ServiceAccountNamespaceFile {
			return nil, fs.ErrNotExist
		}
		return []byte("herald-system\n"), nil
	}); err != nil || o.namespace != "herald-system" {
		t.Fatalf("namespace %q, err %v", o.namespace, err)
	}
}

func TestExcludeL2(t *testing.T) {
	tests := []struct {
		name    string
		content string // "" = file missing
		want    []string
		wantErr bool
	}{
		{name: "missing file: defaults", want: nil},
		{name: "list", content: "announcedInterfacesToExclude:\n- ^eth9$\n- ^dummy.*\n", want: []string{"^eth9$", "^dummy.*"}},
		{name: "empty list excludes nothing", content: "announcedInterfacesToExclude: []\n", want: []string{}},
		{name: "key absent: defaults", content: "other: 1\n", want: nil},
		{name: "bad yaml", content: "announcedInterfacesToExclude: {\n", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			read := func(string) ([]byte, error) {
				if tc.content == "" {
					return nil, &fs.PathError{Op: "open", Path: "x", Err: os.ErrNotExist}
				}
				return []byte(tc.content), nil
			}
			got, err := excludeL2("x", read)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v", err)
			}
			if !tc.wantErr && (!reflect.DeepEqual(got, tc.want) || (got == nil) != (tc.want == nil)) {
				t.Fatalf("excludeL2 = %#v, want %#v", got, tc.want)
			}
		})
	}
}

func TestMemberlistSecretRawBytes(t *testing.T) {
	o := options{mlSecretKeyPath: "/secret"}
	got, err := o.memberlistSecret(func(p string) ([]byte, error) {
		if p != "/secret/secretkey" {
			return nil, errors.New("wrong path " + p)
		}
		return []byte("abc\n"), nil
	})
	if err != nil || string(got) != "abc\n" {
		t.Fatalf("secret %q, err %v", got, err)
	}
	o.mlSecretKeyPath = ""
	if got, err := o.memberlistSecret(nil); got != nil || err != nil {
		t.Fatalf("no path: %q, %v", got, err)
	}
}

func TestMemberlistPreviousSecret(t *testing.T) {
	o := options{mlSecretKeyPath: "/secret"}
	for _, tc := range []struct {
		name    string
		read    func(string) ([]byte, error)
		want    string
		wantErr bool
	}{
		{name: "kept by the controller", read: func(p string) ([]byte, error) {
			if p != "/secret/previoussecretkey" {
				return nil, errors.New("wrong path " + p)
			}
			return []byte("old\n"), nil
		}, want: "old\n"},
		{name: "none (the usual case)", read: func(string) ([]byte, error) { return nil, fs.ErrNotExist }},
		{name: "unreadable", read: func(string) ([]byte, error) { return nil, fs.ErrPermission }, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := o.memberlistPreviousSecret(tc.read)
			if (err != nil) != tc.wantErr || string(got) != tc.want {
				t.Errorf("got %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestMigrationModeElection: --l2-election=metallb turns on MetalLB's
// per-Service layer 2 election, and so does --ml-key-derivation=metallb;
// the default keeps Herald's per-address election.
func TestMigrationModeElection(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want bool
	}{{nil, false}, {[]string{"--ml-key-derivation", "herald"}, false}, {[]string{"--ml-key-derivation", "metallb"}, true},
		{[]string{"--l2-election", "metallb"}, true}, {[]string{"--l2-election", "per-address"}, false}} {
		var o options
		fset := flag.NewFlagSet("t", flag.ContinueOnError)
		o.register(fset, func(string) string { return "" })
		if err := fset.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		if got := o.announceOptions().ElectByServiceFirstIP; got != tt.want {
			t.Errorf("%v: ElectByServiceFirstIP %v, want %v", tt.args, got, tt.want)
		}
	}
}

func TestL2ElectionRefused(t *testing.T) {
	var o options
	fset := flag.NewFlagSet("t", flag.ContinueOnError)
	o.register(fset, func(string) string { return "" })
	if err := fset.Parse([]string{"--node-name", "n", "--namespace", "ns", "--l2-election", "per-service"}); err != nil {
		t.Fatal(err)
	}
	if err := o.complete(func(string) ([]byte, error) { return nil, fs.ErrNotExist }); err == nil || !strings.Contains(err.Error(), "--l2-election") {
		t.Fatalf("unknown --l2-election accepted: %v", err)
	}
}

// TestBalancedElectionFlag: --l2-election=balanced turns on the balanced
// layer 2 election and nothing else; it is refused with
// --ml-key-derivation=metallb (which implies MetalLB's election).
func TestBalancedElectionFlag(t *testing.T) {
	for _, tt := range []struct {
		args     []string
		balanced bool
		refused  bool
	}{
		{nil, false, false},
		{[]string{"--l2-election", "balanced"}, true, false},
		{[]string{"--l2-election", "metallb"}, false, false},
		{[]string{"--l2-election", "balanced", "--ml-key-derivation", "metallb"}, true, true},
	} {
		var o options
		fset := flag.NewFlagSet("t", flag.ContinueOnError)
		o.register(fset, func(string) string { return "" })
		if err := fset.Parse(append([]string{"--node-name", "n", "--namespace", "ns"}, tt.args...)); err != nil {
			t.Fatal(err)
		}
		err := o.complete(func(string) ([]byte, error) { return nil, fs.ErrNotExist })
		if (err != nil) != tt.refused || (err != nil && !strings.Contains(err.Error(), "--l2-election balanced")) {
			t.Errorf("%v: complete() = %v, refused want %v", tt.args, err, tt.refused)
		}
		if o.balancedL2() != tt.balanced {
			t.Errorf("%v: balanced %v, want %v", tt.args, o.balancedL2(), tt.balanced)
		}
		if !tt.refused && tt.balanced && o.announceOptions().ElectByServiceFirstIP {
			t.Errorf("%v: balanced with ElectByServiceFirstIP", tt.args)
		}
	}
}

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/herald-lb/herald/e2e/lab"
)

// TestValidation proves that broken configuration applied the way users
// apply it (kubectl apply of a YAML file) is refused by Herald's webhook
// through the real API server with a message that names the object and what
// is wrong, and that nothing of it is stored.
func TestValidation(t *testing.T) {
	e := newEnv(t, 1, lab.InstallOptions{SpeakerNodes: []string{}})
	// A valid pool the overlap case collides with.
	if out, err := e.applyYAML(t, "existing", `apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: existing, namespace: herald-system}
spec:
  addresses: [203.0.113.0/28]
`); err != nil {
		t.Fatalf("valid pool refused: %v\n%s", err, out)
	}
	cases := []struct {
		name, kind, yaml string
		// want are fragments the refusal must contain (case-insensitive).
		want []string
	}{{
		name: "bad-address", kind: "ipaddresspool",
		yaml: `apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: bad-address, namespace: herald-system}
spec:
  addresses: [198.51.100.300/32]
`,
		want: []string{"IPAddressPool herald-system/bad-address", "spec.addresses[0]", "198.51.100.300/32"},
	}, {
		name: "reversed-range", kind: "ipaddresspool",
		yaml: `apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: reversed-range, namespace: herald-system}
spec:
  addresses: [203.0.113.40-203.0.113.30]
`,
		want: []string{"IPAddressPool herald-system/reversed-range", "spec.addresses[0]", "203.0.113.40-203.0.113.30"},
	}, {
		name: "overlap", kind: "ipaddresspool",
		yaml: `apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: overlap, namespace: herald-system}
spec:
  addresses: [203.0.113.8/29]
`,
		want: []string{"IPAddressPool herald-system/overlap", "203.0.113.8/29", "overlaps", "herald-system/existing", "203.0.113.0/28"},
	}, {
		name: "bad-hold-time", kind: "bgppeer",
		yaml: `apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: bad-hold-time, namespace: herald-system}
spec:
  myASN: 64512
  peerASN: 64500
  peerAddress: 198.51.100.1
  holdTime: 1s
`,
		want: []string{"BGPPeer herald-system/bad-hold-time", "spec.holdTime", "1s"},
	}, {
		name: "bad-peer-address", kind: "bgppeer",
		yaml: `apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: bad-peer-address, namespace: herald-system}
spec:
  myASN: 64512
  peerASN: 64500
  peerAddress: not-an-address
`,
		want: []string{"BGPPeer herald-system/bad-peer-address", "spec.peerAddress", "not-an-address"},
	}, {
		name: "bad-community", kind: "bgpadvertisement",
		yaml: `apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: bad-community, namespace: herald-system}
spec:
  ipAddressPools: [existing]
  communities: [65536:1]
`,
		want: []string{"BGPAdvertisement herald-system/bad-community", "spec.communities[0]", "65536:1"},
	}, {
		name: "bad-alias", kind: "community",
		yaml: `apiVersion: metallb.io/v1beta1
kind: Community
metadata: {name: bad-alias, namespace: herald-system}
spec:
  communities:
  - name: broken
    value: "1:2:3"
`,
		want: []string{"Community herald-system/bad-alias", "spec.communities[0].value", "1:2:3"},
	}, {
		name: "bad-aggregation", kind: "bgpadvertisement",
		yaml: `apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: bad-aggregation, namespace: herald-system}
spec:
  ipAddressPools: [existing]
  aggregationLength: 24
`,
		want: []string{"BGPAdvertisement herald-system/bad-aggregation", "spec.aggregationLength", "/28"},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := e.applyYAML(t, c.name, c.yaml)
			if err == nil {
				t.Fatalf("kubectl apply accepted a broken %s:\n%s", c.kind, out)
			}
			msg := strings.ToLower(out + err.Error())
			if !strings.Contains(msg, "denied the request") {
				t.Errorf("refused, but not by Herald's webhook:\n%s", out)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, strings.ToLower(w)) {
					t.Errorf("refusal does not mention %q:\n%s", w, out)
				}
			}
			t.Logf("kubectl said: %s", strings.TrimSpace(out))
			ctx := testCtx(t, time.Minute)
			if got, err := e.l.Kubectl(ctx, "-n", lab.HeraldNamespace, "get", c.kind, c.name, "--ignore-not-found", "-o", "name"); err != nil || strings.TrimSpace(got) != "" {
				t.Errorf("the refused %s is stored anyway: %q %v", c.kind, got, err)
			}
		})
	}
}

// applyYAML writes body to a file and applies it with kubectl, returning
// kubectl's output.
func (e *env) applyYAML(t *testing.T, name, body string) (string, error) {
	t.Helper()
	f := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return e.l.Apply(testCtx(t, time.Minute), f)
}

package webhook_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/k8s/webhook"
	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

// base is the configuration the broken objects are applied against.
const base = `
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: lab, namespace: herald-system}
spec:
  addresses: [198.51.100.200-198.51.100.250]
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: public, namespace: herald-system}
spec:
  addresses: [203.0.113.0/26]
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: upstream, namespace: herald-system}
spec: {myASN: 64512, peerASN: 64500, peerAddress: 198.51.100.1}
---
apiVersion: metallb.io/v1beta1
kind: Community
metadata: {name: comms, namespace: herald-system}
spec:
  communities:
  - {name: prefer, value: "64500:300"}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: ad, namespace: herald-system}
spec:
  ipAddressPools: [public]
  communities: [prefer]
---
apiVersion: metallb.io/v1beta1
kind: BFDProfile
metadata: {name: unused, namespace: herald-system}
spec: {}
`

// TestAdmission runs the webhooks of manifests/webhook through a real API
// server, as kubectl apply and kubectl delete exercise them.
func TestAdmission(t *testing.T) {
	env := testenv.StartWith(t, testenv.Options{WebhookPaths: []string{"manifests/webhook"}})
	c := env.Client
	createNamespace(t, c, heraldNS)
	startWebhooks(t, env, webhook.Options{
		Namespace: heraldNS,
		Host:      env.Webhook.Host,
		Port:      env.Webhook.Port,
		CertDir:   env.Webhook.CertDir,
		// envtest wrote the certificate there.
		SecretMounted: true,
	})
	waitServing(t, c)
	// The server refuses TLS 1.2 (the binaries' default), so the API
	// server's admission requests above and below are TLS 1.3.
	addr := net.JoinHostPort(env.Webhook.Host, strconv.Itoa(env.Webhook.Port))
	if conn, err := tls.Dial("tcp", addr, &tls.Config{MaxVersion: tls.VersionTLS12, InsecureSkipVerify: true}); err == nil { // unverified: only the version matters
		conn.Close()
		t.Fatal("the webhook server accepted a TLS 1.2 client")
	}
	k := newKubectl(t, env)

	t.Run("BGPPeer v1beta1", func(t *testing.T) { testBGPPeerV1beta1(t, c) })

	t.Run("samples", func(t *testing.T) {
		root, err := testenv.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		files, err := filepath.Glob(filepath.Join(root, "manifests", "samples", "*.yaml"))
		if err != nil || len(files) < 7 {
			t.Fatalf("samples: %v %v", files, err)
		}
		for _, f := range files {
			t.Run(filepath.Base(f), func(t *testing.T) {
				defer deleteAll(t, c)
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				out, ok := k.run(t, "", "apply", "-f", f)
				if !ok {
					t.Fatalf("kubectl apply -f %s refused:\n%s", f, out)
				}
				// Every metallb.io object of the file is stored.
				want := strings.Count(string(b), "apiVersion: metallb.io/")
				if got := len(stored(t, c)); got != want {
					t.Fatalf("%d metallb.io objects stored, the file has %d:\n%s", got, want, out)
				}
				if strings.Contains(out, "Warning:") {
					t.Errorf("sample %s draws warnings:\n%s", filepath.Base(f), out)
				}
			})
		}
	})

	t.Run("broken", func(t *testing.T) {
		defer deleteAll(t, c)
		if out, ok := k.apply(t, base); !ok {
			t.Fatalf("base configuration refused:\n%s", out)
		}
		cases := []struct {
			name string
			yaml string
			want []string // all must appear in kubectl's output
		}{{
			name: "overlapping pools",
			yaml: pool("second", "198.51.100.240/28"),
			want: []string{"denied the request", "IPAddressPool herald-system/", "overlaps with", "addresses must not overlap within or across pools"},
		}, {
			name: "update makes pools overlap",
			yaml: pool("lab", "198.51.100.200-198.51.100.250", "203.0.113.32/27"),
			want: []string{`IPAddressPool herald-system/lab: spec.addresses[1] "203.0.113.32/27": overlaps with IPAddressPool herald-system/public`},
		}, {
			name: "bad CIDR",
			yaml: pool("bad-cidr", "203.0.113.64/33"),
			want: []string{`IPAddressPool herald-system/bad-cidr: spec.addresses[0] "203.0.113.64/33": invalid CIDR`},
		}, {
			name: "range start after end",
			yaml: pool("backwards", "203.0.113.120-203.0.113.100"),
			want: []string{`IPAddressPool herald-system/backwards: spec.addresses[0] "203.0.113.120-203.0.113.100": range start is after end`},
		}, {
			name: "duplicate namespaces",
			yaml: `apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: dup-ns, namespace: herald-system}
spec:
  addresses: [203.0.113.128/28]
  serviceAllocation:
    namespaces: [team-a, team-a]
`,
			want: []string{`IPAddressPool herald-system/dup-ns: spec.serviceAllocation.namespaces[1] "team-a": duplicate of spec.serviceAllocation.namespaces[0]`},
		}, {
			name: "bad community",
			yaml: ad("bad-community", "communities: [\"70000:1\"]"),
			want: []string{`BGPAdvertisement herald-system/bad-community: spec.communities[0] "70000:1": community "70000:1": first half`},
		}, {
			name: "aggregationLength shorter than the pool mask",
			yaml: ad("too-short", "aggregationLength: 24"),
			want: []string{`BGPAdvertisement herald-system/too-short: spec.aggregationLength "24": shorter than the /26 of IPAddressPool public`},
		}, {
			name: "password and passwordSecret",
			yaml: peer("both-passwords", "peerASN: 64501, peerAddress: 198.51.100.2, password: secret, passwordSecret: {name: x, namespace: herald-system}"),
			want: []string{"BGPPeer herald-system/both-passwords: spec.passwordSecret: password and passwordSecret are mutually exclusive"},
		}, {
			name: "peerASN and dynamicASN",
			yaml: peer("both-asns", "peerASN: 64501, dynamicASN: external, peerAddress: 198.51.100.3"),
			want: []string{`BGPPeer herald-system/both-asns: spec.dynamicASN "external": set exactly one of peerASN and dynamicASN, not both`},
		}, {
			name: "dynamicASN (the BGP backend cannot check it)",
			yaml: peer("dynamic", "dynamicASN: external, peerAddress: 198.51.100.3"),
			want: []string{`BGPPeer herald-system/dynamic: spec.dynamicASN "external": not supported by Herald's BGP backend`, "set spec.peerASN"},
		}, {
			name: "zoned peerAddress",
			yaml: peer("zoned", "peerASN: 64501, peerAddress: \"fe80::1%eth1\""),
			want: []string{`BGPPeer herald-system/zoned: spec.peerAddress "fe80::1%eth1": an IPv6 zone is not supported by Herald's BGP backend`, "use the router's global address"},
		}, {
			name: "holdTime above 65535s",
			yaml: peer("long-hold", "peerASN: 64501, peerAddress: 198.51.100.4, holdTime: 20h"),
			want: []string{`BGPPeer herald-system/long-hold: spec.holdTime "20h0m0s": must be at most 65535s`},
		}, {
			name: "holdTime 2s",
			yaml: peer("short-hold", "peerASN: 64501, peerAddress: 198.51.100.4, holdTime: 2s"),
			want: []string{`BGPPeer herald-system/short-hold: spec.holdTime "2s": must be at least 3s`},
		}, {
			name: "unnumbered (gobgp announces with next hop ::)",
			yaml: peer("unnumbered", "peerASN: 64501, interface: eth1"),
			want: []string{`BGPPeer herald-system/unnumbered: spec.interface "eth1": unnumbered BGP is not supported by Herald's BGP backend`, "set spec.peerAddress"},
		}, {
			name: "holdTime 0 (gobgp would send 90s)",
			yaml: peer("zero-hold", "peerASN: 64501, peerAddress: 198.51.100.4, holdTime: 0s"),
			want: []string{`BGPPeer herald-system/zero-hold: spec.holdTime "0s": a hold time of 0 (no keepalives, allowed by RFC 4271 §4.2) is not supported by Herald's BGP backend`},
		}, {
			// Passes the CRD schema (a string), not the Go type: the
			// decode error used to name neither object nor field.
			name: "holdTime that is not a duration",
			yaml: peer("bad-duration", "peerASN: 64501, peerAddress: 198.51.100.4, holdTime: abc"),
			want: []string{`BGPPeer herald-system/bad-duration: spec.holdTime "abc": does not decode: time: invalid duration "abc"`},
		}, {
			name: "ebgpMultiHop on iBGP",
			yaml: peer("ibgp-multihop", "peerASN: 64512, peerAddress: 198.51.100.5, ebgpMultiHop: true"),
			want: []string{"BGPPeer herald-system/ibgp-multihop: spec.ebgpMultiHop: cannot be set on an iBGP session"},
		}, {
			name: "bfdProfile in a VRF",
			yaml: peer("with-bfd", "peerASN: 64501, peerAddress: 198.51.100.6, vrf: red, bfdProfile: fast"),
			want: []string{`BGPPeer herald-system/with-bfd: spec.bfdProfile "fast": BFD is not supported on a peer in a VRF (spec.vrf)`},
		}, {
			name: "BFDProfile with echoMode",
			yaml: "apiVersion: metallb.io/v1beta1\nkind: BFDProfile\nmetadata: {name: echo, namespace: herald-system}\nspec: {echoMode: true}\n",
			want: []string{`BFDProfile herald-system/echo: spec.echoMode "true": the BFD Echo function (RFC 5880 §6.4) is not supported by Herald`},
		}, {
			name: "wrong namespace",
			yaml: strings.Replace(pool("elsewhere", "203.0.113.200/29"), "namespace: herald-system", "namespace: default", 1),
			want: []string{`IPAddressPool default/elsewhere: Herald only reads metallb.io objects in namespace "herald-system"`},
		}}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				before := stored(t, c)
				out, ok := k.apply(t, tc.yaml)
				if ok {
					t.Fatalf("accepted:\n%s", out)
				}
				t.Logf("kubectl apply: %s", out)
				for _, w := range tc.want {
					if !strings.Contains(out, w) {
						t.Errorf("output lacks %q:\n%s", w, out)
					}
				}
				if after := stored(t, c); !maps.Equal(before, after) {
					t.Errorf("stored objects changed:\nbefore %v\nafter  %v", before, after)
				}
			})
		}

		// Admitted, as MetalLB's webhook admits it (aliases are left out of
		// its validation, so that the order of creation does not matter:
		// kubectl apply -f of a directory, a GitOps sync), with a warning
		// that kubectl prints, naming the object, field and alias.
		t.Run("undefined community alias is admitted with a warning", func(t *testing.T) {
			out, ok := k.apply(t, ad("typo-alias", "communities: [\"64500:1\", prefr]"))
			if !ok {
				t.Fatalf("refused:\n%s", out)
			}
			want := `BGPAdvertisement herald-system/typo-alias: spec.communities[1] "prefr": no Community object defines the alias "prefr" (a community is AA:NN (RFC 1997) or large:AA:BB:CC (RFC 8092), else the name of an alias in a Community object: until a Community defines it, Herald keeps its last valid configuration and reports this in ConfigurationState)`
			if !strings.Contains(out, "Warning: ") || !strings.Contains(out, want) {
				t.Errorf("output lacks the warning %q:\n%s", want, out)
			}
			if out, ok := k.run(t, "", "delete", "-n", heraldNS, "bgpadvertisement", "typo-alias"); !ok {
				t.Fatalf("delete typo-alias: %s", out)
			}
		})

		// A node's peers move from no routerID to routerID R one ordinary
		// apply at a time (refusing set next to unset, as MetalLB's FRR
		// mode does, refused the first of these edits); two different
		// routerIDs stay refused, naming both peers.
		t.Run("routerID introduced one peer at a time", func(t *testing.T) {
			const upstream = "peerASN: 64500, peerAddress: 198.51.100.1"
			defer func() {
				if out, ok := k.apply(t, peer("upstream", upstream)); !ok {
					t.Errorf("restoring upstream: %s", out)
				}
				if out, ok := k.run(t, "", "delete", "-n", heraldNS, "bgppeer", "second"); !ok {
					t.Errorf("delete: %s", out)
				}
			}()
			if out, ok := k.apply(t, peer("second", "peerASN: 64501, peerAddress: 198.51.100.7")); !ok {
				t.Fatalf("second peer refused:\n%s", out)
			}
			out, ok := k.apply(t, peer("upstream", upstream+", routerID: 198.51.100.50"))
			if !ok {
				t.Fatalf("routerID on the first peer refused:\n%s", out)
			}
			want := `Warning: BGPPeer herald-system/second: spec.routerID: unset, so on the nodes it shares with BGPPeer upstream this session uses that peer's routerID 198.51.100.50`
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
			out, ok = k.apply(t, peer("second", "peerASN: 64501, peerAddress: 198.51.100.7, routerID: 198.51.100.50"))
			if !ok {
				t.Fatalf("the same routerID on the second peer refused:\n%s", out)
			}
			if strings.Contains(out, "Warning") {
				t.Errorf("routerID on every peer draws a warning:\n%s", out)
			}
			before := stored(t, c)
			out, ok = k.apply(t, peer("second", "peerASN: 64501, peerAddress: 198.51.100.7, routerID: 198.51.100.51"))
			if ok {
				t.Fatalf("a second routerID for the node accepted:\n%s", out)
			}
			want = `BGPPeer herald-system/second: spec.routerID "198.51.100.51": BGPPeer upstream selects the same node with routerID 198.51.100.50`
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
			if after := stored(t, c); !maps.Equal(before, after) {
				t.Errorf("stored objects changed:\nbefore %v\nafter  %v", before, after)
			}
		})

		t.Run("deleting a Community alias in use is refused", func(t *testing.T) {
			before := stored(t, c)
			out, ok := k.run(t, "", "delete", "-n", heraldNS, "community", "comms")
			if ok {
				t.Fatalf("accepted:\n%s", out)
			}
			t.Logf("kubectl delete: %s", out)
			want := `deleting Community herald-system/comms would leave a dangling reference: BGPAdvertisement herald-system/ad: spec.communities[0] "prefer": no Community object defines the alias "prefer"`
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
			if after := stored(t, c); !maps.Equal(before, after) {
				t.Errorf("stored objects changed:\nbefore %v\nafter  %v", before, after)
			}
		})

		t.Run("deleting a pool's last advertisement warns", func(t *testing.T) {
			out, ok := k.apply(t, "apiVersion: metallb.io/v1beta1\nkind: L2Advertisement\nmetadata: {name: lab-only, namespace: herald-system}\nspec: {ipAddressPools: [lab]}\n")
			if !ok {
				t.Fatalf("refused:\n%s", out)
			}
			if strings.Contains(out, "Warning") {
				t.Errorf("creating the advertisement draws a warning:\n%s", out)
			}
			out, ok = k.run(t, "", "delete", "-n", heraldNS, "l2advertisement", "lab-only")
			if !ok {
				t.Fatalf("delete refused:\n%s", out)
			}
			want := "Warning: IPAddressPool herald-system/lab: no L2Advertisement or BGPAdvertisement selects this pool any more"
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
			if strings.Contains(out, "herald-system/public") {
				t.Errorf("warns about a pool that is still advertised:\n%s", out)
			}
		})

		t.Run("deleting a peer an advertisement names warns", func(t *testing.T) {
			if out, ok := k.apply(t, peer("extra", "peerASN: 64501, peerAddress: 198.51.100.9")+"---\n"+ad("to-extra", "peers: [extra]")); !ok {
				t.Fatalf("refused:\n%s", out)
			}
			out, ok := k.run(t, "", "delete", "-n", heraldNS, "bgppeer", "extra")
			if !ok {
				t.Fatalf("delete refused:\n%s", out)
			}
			want := `Warning: BGPAdvertisement herald-system/to-extra: spec.peers[0]: no BGPPeer named "extra"`
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
			if out, ok := k.run(t, "", "delete", "-n", heraldNS, "bgpadvertisement", "to-extra"); !ok {
				t.Fatalf("delete: %s", out)
			}
		})

		t.Run("deleting a pool with assigned addresses warns", func(t *testing.T) {
			if out, ok := k.apply(t, pool("used", "203.0.113.200/30")); !ok {
				t.Fatalf("refused:\n%s", out)
			}
			var p v1beta1.IPAddressPool
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: heraldNS, Name: "used"}, &p); err != nil {
				t.Fatal(err)
			}
			p.Status.AssignedIPv4, p.Status.AvailableIPv4 = 2, 2
			if err := c.Status().Update(context.Background(), &p); err != nil {
				t.Fatal(err)
			}
			// Growing draws nothing, shrinking warns.
			if out, ok := k.apply(t, pool("used", "203.0.113.200/29")); !ok || strings.Contains(out, "Warning") {
				t.Fatalf("growing the pool: ok=%v\n%s", ok, out)
			}
			out, ok := k.apply(t, pool("used", "203.0.113.200/31"))
			if !ok {
				t.Fatalf("shrinking refused:\n%s", out)
			}
			if want := "Warning: IPAddressPool herald-system/used: this change removes addresses while 2 are assigned"; !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
			out, ok = k.run(t, "", "delete", "-n", heraldNS, "ipaddresspool", "used")
			if !ok {
				t.Fatalf("delete refused:\n%s", out)
			}
			want := "Warning: IPAddressPool herald-system/used had 2 address(es) assigned"
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		})

		t.Run("deleting an unreferenced BFDProfile succeeds", func(t *testing.T) {
			if out, ok := k.run(t, "", "delete", "-n", heraldNS, "bfdprofile", "unused"); !ok {
				t.Fatalf("refused:\n%s", out)
			}
			if _, ok := stored(t, c)["BFDProfile/unused"]; ok {
				t.Fatal("still stored")
			}
		})

		t.Run("warnings are returned", func(t *testing.T) {
			out, ok := k.apply(t, peer("legacy", "peerASN: 64501, peerAddress: 198.51.100.7, disableMP: true"))
			if !ok {
				t.Fatalf("refused:\n%s", out)
			}
			want := "Warning: BGPPeer herald-system/legacy: spec.disableMP: deprecated and ignored"
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		})
	})

	t.Run("already invalid objects block only themselves", func(t *testing.T) {
		defer deleteAll(t, c)
		if out, ok := k.apply(t, base); !ok {
			t.Fatalf("base configuration refused:\n%s", out)
		}
		// Store an overlapping pool while the webhook is not registered (as
		// if it had been created before Herald was installed).
		ctx := context.Background()
		var vwc admissionv1.ValidatingWebhookConfiguration
		if err := c.Get(ctx, client.ObjectKey{Name: webhook.DefaultWebhookConfigName}, &vwc); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, &vwc); err != nil {
			t.Fatal(err)
		}
		stale := &v1beta1.IPAddressPool{
			ObjectMeta: metav1.ObjectMeta{Name: "stale", Namespace: heraldNS},
			Spec:       v1beta1.IPAddressPoolSpec{Addresses: []string{"198.51.100.244/30"}},
		}
		// The API server learns of the deleted configuration through its own
		// informer, so the webhook may still be called for a moment: retry
		// until the create gets through.
		poll.Until(t, 30*time.Second, "storing the stale pool without the webhook", func() error {
			err := c.Create(ctx, stale)
			if err != nil && !strings.Contains(err.Error(), "admission webhook") {
				t.Fatalf("storing the stale pool without the webhook: %v", err)
			}
			return err
		})
		vwc.ResourceVersion, vwc.UID = "", ""
		if err := c.Create(ctx, &vwc); err != nil {
			t.Fatal(err)
		}
		waitServing(t, c)

		out, ok := k.apply(t, `apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: lab, namespace: herald-system}
spec: {ipAddressPools: [lab]}
`)
		if !ok {
			t.Fatalf("an unrelated change is refused:\n%s", out)
		}
		want := `Warning: the stored configuration already has errors unrelated to this change (Herald keeps running its last valid configuration): IPAddressPool herald-system/stale: spec.addresses[0] "198.51.100.244/30": overlaps with IPAddressPool herald-system/lab`
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}

		// Editing the invalid object without fixing it is refused.
		out, ok = k.run(t, "", "label", "-n", heraldNS, "ipaddresspool", "stale", "touched=yes")
		if ok {
			t.Fatalf("update of the invalid pool accepted:\n%s", out)
		}
		if !strings.Contains(out, "IPAddressPool herald-system/stale: spec.addresses[0]") {
			t.Errorf("refusal does not name the pool's error:\n%s", out)
		}
		// Fixing it is accepted.
		if out, ok := k.apply(t, pool("stale", "203.0.113.240/29")); !ok {
			t.Fatalf("fix refused:\n%s", out)
		}
	})
}

// waitServing waits until the API server reaches the webhook: a dry-run
// create of an invalid pool is refused by Herald's handler.
func waitServing(t *testing.T, c client.Client) {
	t.Helper()
	p := &v1beta1.IPAddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: heraldNS},
		Spec:       v1beta1.IPAddressPoolSpec{Addresses: []string{"not-an-address"}},
	}
	poll.Until(t, 90*time.Second, "webhook serving", func() error {
		err := c.Create(context.Background(), p.DeepCopy(), client.DryRunAll)
		if err == nil {
			return errors.New("invalid pool accepted")
		}
		if !strings.Contains(err.Error(), "configuration rejected") {
			return err
		}
		return nil
	})
}

func pool(name string, addrs ...string) string {
	return fmt.Sprintf("apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: %s, namespace: herald-system}\nspec:\n  addresses: [%s]\n", name, strings.Join(addrs, ", "))
}

func ad(name, spec string) string {
	return fmt.Sprintf("apiVersion: metallb.io/v1beta1\nkind: BGPAdvertisement\nmetadata: {name: %s, namespace: herald-system}\nspec:\n  ipAddressPools: [public]\n  %s\n", name, spec)
}

func peer(name, spec string) string {
	return fmt.Sprintf("apiVersion: metallb.io/v1beta2\nkind: BGPPeer\nmetadata: {name: %s, namespace: herald-system}\nspec: {myASN: 64512, %s}\n", name, spec)
}

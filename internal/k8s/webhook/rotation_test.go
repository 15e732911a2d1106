package webhook_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/k8s/fieldmanager"
	"github.com/herald-lb/herald/internal/k8s/webhook"
	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

// TestCertRotation lets Setup manage the serving certificate: the rotator
// fills Secret herald-webhook-cert, the files reach CertDir, the CA is
// injected into the ValidatingWebhookConfiguration, and the API server,
// trusting only that caBundle, reaches the webhook.
func TestCertRotation(t *testing.T) {
	env := testenv.Start(t)
	c := env.Client
	ctx := context.Background()
	createNamespace(t, c, heraldNS)

	port := freePort(t)
	const configName = "herald-rotation-test"
	path := webhook.PathIPAddressPool
	url := fmt.Sprintf("https://localhost:%d%s", port, path)
	fail, none := admissionv1.Fail, admissionv1.SideEffectClassNone
	vwc := &admissionv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: configName},
		Webhooks: []admissionv1.ValidatingWebhook{{
			Name:                    "ipaddresspoolvalidationwebhook.metallb.io",
			AdmissionReviewVersions: []string{"v1"},
			ClientConfig:            admissionv1.WebhookClientConfig{URL: &url},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			Rules: []admissionv1.RuleWithOperations{{
				Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
				Rule:       admissionv1.Rule{APIGroups: []string{"metallb.io"}, APIVersions: []string{"v1beta1"}, Resources: []string{"ipaddresspools"}},
			}},
		}},
	}
	if err := c.Create(ctx, vwc); err != nil {
		t.Fatal(err)
	}

	// Serve BGPPeer v1beta1 through the conversion webhook at /convert (as
	// manifests/base configures it), without a caBundle: the rotator must
	// inject it.
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	if err := c.Get(ctx, client.ObjectKey{Name: "bgppeers.metallb.io"}, crd); err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		if v := v.(map[string]any); v["name"] == "v1beta1" {
			v["served"] = true
		}
	}
	convertURL := fmt.Sprintf("https://localhost:%d%s", port, webhook.PathConvert)
	must(t, unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"))
	must(t, unstructured.SetNestedMap(crd.Object, map[string]any{
		"strategy": "Webhook",
		"webhook": map[string]any{
			"conversionReviewVersions": []any{"v1"},
			"clientConfig":             map[string]any{"url": convertURL},
		},
	}, "spec", "conversion"))
	must(t, c.Update(ctx, crd))

	certDir := filepath.Join(t.TempDir(), "certs")
	startWebhooks(t, env, webhook.Options{
		Namespace:          heraldNS,
		Host:               "127.0.0.1",
		Port:               port,
		CertDir:            certDir,
		CertRotation:       true,
		SecretPollInterval: time.Second,
		ExtraDNSNames:      []string{"localhost"},
		WebhookConfigName:  configName,
		// ipaddresspools has no conversion webhook: skipped, not fatal.
		ConversionCRDs: []string{"bgppeers.metallb.io", "ipaddresspools.metallb.io"},
	})

	// The rotator writes the CA and the serving certificate into the Secret
	// (which Setup created).
	secret := &corev1.Secret{}
	poll.Until(t, 60*time.Second, "certificate Secret filled", func() error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: heraldNS, Name: webhook.DefaultSecretName}, secret); err != nil {
			return err
		}
		for _, k := range []string{"ca.crt", "tls.crt", "tls.key"} {
			if len(secret.Data[k]) == 0 {
				return fmt.Errorf("Secret has no %s yet", k)
			}
		}
		return nil
	})

	// Setup created the Secret as the controller. (The rotator writes with
	// the manager's client: the controller's user agent names it.)
	if !slices.ContainsFunc(secret.ManagedFields, func(m metav1.ManagedFieldsEntry) bool { return m.Manager == fieldmanager.Controller }) {
		t.Errorf("certificate Secret: no field manager %q in %+v", fieldmanager.Controller, secret.ManagedFields)
	}

	// The caBundle injected into the webhook configuration is the Secret's CA.
	var caBundle []byte
	poll.Until(t, 60*time.Second, "caBundle injected", func() error {
		got := &admissionv1.ValidatingWebhookConfiguration{}
		if err := c.Get(ctx, client.ObjectKey{Name: configName}, got); err != nil {
			return err
		}
		caBundle = got.Webhooks[0].ClientConfig.CABundle
		if len(caBundle) == 0 {
			return errors.New("no caBundle yet")
		}
		return nil
	})
	if !bytes.Equal(caBundle, secret.Data["ca.crt"]) {
		t.Fatalf("caBundle is not the Secret's ca.crt")
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caBundle) {
		t.Fatal("caBundle holds no PEM certificate")
	}

	// The certificate in the Secret is for the webhook Service and chains to
	// the caBundle.
	block, _ := pem.Decode(secret.Data["tls.crt"])
	if block == nil {
		t.Fatal("tls.crt is not PEM")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	svcName := webhook.DefaultServiceName + "." + heraldNS + ".svc"
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: svcName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatalf("serving certificate does not verify for %s against the caBundle: %v", svcName, err)
	}
	if time.Until(leaf.NotAfter) < 300*24*time.Hour {
		t.Errorf("serving certificate expires %s, want about a year ahead", leaf.NotAfter)
	}

	// The files reached CertDir and the server serves that certificate,
	// HTTP/1.1 only.
	if b, err := os.ReadFile(filepath.Join(certDir, "tls.crt")); err != nil || !bytes.Equal(b, secret.Data["tls.crt"]) {
		t.Fatalf("CertDir tls.crt is not the Secret's (err %v)", err)
	}
	poll.Until(t, 90*time.Second, "server serves the rotated certificate", func() error {
		conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{
			RootCAs: roots, ServerName: svcName, NextProtos: []string{"h2", "http/1.1"},
		})
		if err != nil {
			return err
		}
		defer conn.Close()
		st := conn.ConnectionState()
		if !st.PeerCertificates[0].Equal(leaf) {
			return errors.New("served certificate differs from the Secret's")
		}
		if st.NegotiatedProtocol == "h2" {
			t.Errorf("server negotiated HTTP/2; want HTTP/1.1 only")
		}
		return nil
	})

	// A serving certificate close to expiry (inside the 90-day lookahead) is
	// renewed with the same CA (so the caBundle stays valid), and the
	// server picks the new one up without a restart.
	expiring := signLeaf(t, secret.Data["ca.crt"], secret.Data["ca.key"], svcName, 30*24*time.Hour)
	secret.Data["tls.crt"], secret.Data["tls.key"] = expiring.cert, expiring.key
	if err := c.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	var renewed *x509.Certificate
	poll.Until(t, 90*time.Second, "expiring serving certificate renewed", func() error {
		s := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: heraldNS, Name: webhook.DefaultSecretName}, s); err != nil {
			return err
		}
		if !bytes.Equal(s.Data["ca.crt"], caBundle) {
			t.Fatalf("CA replaced while still valid")
		}
		b, _ := pem.Decode(s.Data["tls.crt"])
		if b == nil {
			return errors.New("tls.crt is not PEM")
		}
		crt, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return err
		}
		if time.Until(crt.NotAfter) < 300*24*time.Hour {
			return fmt.Errorf("serving certificate still expires %s", crt.NotAfter)
		}
		renewed = crt
		return nil
	})
	poll.Until(t, 90*time.Second, "server serves the renewed certificate", func() error {
		conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{RootCAs: roots, ServerName: svcName})
		if err != nil {
			return err
		}
		defer conn.Close()
		if !conn.ConnectionState().PeerCertificates[0].Equal(renewed) {
			return errors.New("server still serves the previous certificate")
		}
		return nil
	})

	// The CRD's conversion webhook got the same caBundle, and the API server
	// converts a stored v1beta2 BGPPeer to v1beta1 through /convert.
	poll.Until(t, 60*time.Second, "caBundle injected into the CRD", func() error {
		got := crd.DeepCopy()
		if err := c.Get(ctx, client.ObjectKey{Name: "bgppeers.metallb.io"}, got); err != nil {
			return err
		}
		b, _, _ := unstructured.NestedString(got.Object, "spec", "conversion", "webhook", "clientConfig", "caBundle")
		if b != base64.StdEncoding.EncodeToString(caBundle) {
			return errors.New("CRD caBundle is not the Secret's CA")
		}
		return nil
	})
	peer := &v1beta2.BGPPeer{
		ObjectMeta: metav1.ObjectMeta{Name: "tor", Namespace: heraldNS},
		Spec:       v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64500, PeerAddress: "198.51.100.1", VRF: "red"},
	}
	must(t, c.Create(ctx, peer))
	old := &unstructured.Unstructured{}
	old.SetGroupVersionKind(schema.GroupVersionKind{Group: "metallb.io", Version: "v1beta1", Kind: "BGPPeer"})
	poll.Until(t, 60*time.Second, "BGPPeer read as v1beta1", func() error {
		return c.Get(ctx, client.ObjectKeyFromObject(peer), old)
	})
	if asn, _, _ := unstructured.NestedInt64(old.Object, "spec", "peerASN"); asn != 64500 {
		t.Errorf("v1beta1 spec.peerASN = %d, want 64500", asn)
	}
	if a := old.GetAnnotations()[v1beta1.AnnotationV1beta2Fields]; !strings.Contains(a, `"vrf":"red"`) {
		t.Errorf("v1beta1 object lacks the v1beta2-only fields annotation: %q", a)
	}

	// The API server trusts the webhook through the injected caBundle: an
	// invalid pool is refused by Herald, a valid one stored.
	bad := &v1beta1.IPAddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: heraldNS},
		Spec:       v1beta1.IPAddressPoolSpec{Addresses: []string{"203.0.113.9-203.0.113.1"}},
	}
	err = c.Create(ctx, bad)
	if err == nil || !strings.Contains(err.Error(), "range start is after end") {
		t.Fatalf("invalid pool: err = %v, want Herald's refusal", err)
	}
	good := &v1beta1.IPAddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: "good", Namespace: heraldNS},
		Spec:       v1beta1.IPAddressPoolSpec{Addresses: []string{"203.0.113.0/28"}},
	}
	if err := c.Create(ctx, good); err != nil {
		t.Fatalf("valid pool refused: %v", err)
	}

	// Without rotation (cert-manager writes the Secret), the server waits
	// for the copied files and then serves the Secret's certificate.
	t.Run("certificate from another issuer", func(t *testing.T) {
		issued := signLeaf(t, secret.Data["ca.crt"], secret.Data["ca.key"], svcName, 90*24*time.Hour)
		must(t, c.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "herald-cert-manager-cert", Namespace: heraldNS},
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{"tls.crt": issued.cert, "tls.key": issued.key},
		}))
		port2 := freePort(t)
		startWebhooks(t, env, webhook.Options{
			Namespace:          heraldNS,
			Host:               "127.0.0.1",
			Port:               port2,
			CertDir:            filepath.Join(t.TempDir(), "certs"),
			SecretName:         "herald-cert-manager-cert",
			SecretPollInterval: time.Second,
		})
		want, _ := pem.Decode(issued.cert)
		poll.Until(t, 60*time.Second, "server serves the issued certificate", func() error {
			conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port2), &tls.Config{RootCAs: roots, ServerName: svcName})
			if err != nil {
				return err
			}
			defer conn.Close()
			if !bytes.Equal(conn.ConnectionState().PeerCertificates[0].Raw, want.Bytes) {
				return errors.New("served certificate is not the Secret's")
			}
			return nil
		})
	})
}

type keyPair struct{ cert, key []byte }

// signLeaf issues a serving certificate for dnsName, valid for validFor,
// signed by the PEM CA certificate and PKCS#1 key.
func signLeaf(t *testing.T, caPEM, caKeyPEM []byte, dnsName string, validFor time.Duration) keyPair {
	t.Helper()
	cb, _ := pem.Decode(caPEM)
	kb, _ := pem.Decode(caKeyPEM)
	if cb == nil || kb == nil {
		t.Fatal("CA certificate or key is not PEM")
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := x509.ParsePKCS1PrivateKey(kb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: dnsName},
		DNSNames:     []string{dnsName, "localhost"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(validFor),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return keyPair{
		cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:  pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/k8s/fieldmanager"
	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

// A controller started while the API server is unreachable (the kubelet
// restarts it there after it exited on lost leadership) waits for it,
// answering its liveness probe, instead of exiting (a crash loop whose
// growing back-off delayed its return long after the API server was
// back), and serves a Service once the API server is reachable.
func TestStartsDuringAPIOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real API server; skipped under -short")
	}
	env := testenv.Start(t)
	dir := t.TempDir()
	bin := buildController(t, dir)
	// The controller reaches the API server through a loopback TCP proxy
	// that is not listening yet: connection refused, as in an outage.
	proxy := env.NewProxy(t)
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, proxy.KubeConfig(env), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	herald, app, vwc := heraldFixture(t, env.Client, "198.51.100.0/28")

	p := startController(t, bin, kc, herald, vwc.Name, "outage")
	exited := func() bool {
		select {
		case err := <-p.done:
			p.done <- err
			return true
		default:
			return false
		}
	}
	poll.Until(t, 60*time.Second, "the controller waits for the API server", func() bool {
		if exited() {
			b, _ := os.ReadFile(p.log)
			t.Fatalf("the controller exited while the API server was unreachable:\n%s", b)
		}
		b, _ := os.ReadFile(p.log)
		return strings.Contains(string(b), "waiting for the API server") && p.alive()
	})
	// The API server is back.
	proxy.Open(t)
	if err := env.Client.Create(ctx, lbService(app, "after")); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 60*time.Second, "Service after addressed", func() error {
		var s corev1.Service
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: app, Name: "after"}, &s); err != nil {
			return err
		}
		if ingress(&s) == "" {
			return errors.New("no ingress address")
		}
		return nil
	})
	// The controller's writes name it in managedFields: the Service's and
	// the pool's status, its ConfigurationState.
	poll.Until(t, 60*time.Second, "the controller's field manager on its writes", func() error {
		var svc corev1.Service
		var pool v1beta1.IPAddressPool
		var cs v1beta1.ConfigurationState
		for _, g := range []struct {
			key client.ObjectKey
			obj client.Object
		}{{client.ObjectKey{Namespace: app, Name: "after"}, &svc}, {client.ObjectKey{Namespace: herald, Name: "pool"}, &pool}, {client.ObjectKey{Namespace: herald, Name: "controller"}, &cs}} {
			if err := env.Client.Get(ctx, g.key, g.obj); err != nil {
				return err
			}
			status := false
			for _, m := range g.obj.GetManagedFields() {
				if m.Subresource == "status" {
					status = true
				}
				if (m.Subresource == "status" || g.obj == &cs) && m.Manager != fieldmanager.Controller {
					return fmt.Errorf("%T %s: %s of %q by field manager %q, want %q", g.obj, g.key, m.Operation, m.Subresource, m.Manager, fieldmanager.Controller)
				}
			}
			if !status {
				return fmt.Errorf("%T %s: no status written yet", g.obj, g.key)
			}
		}
		return nil
	})
	// The binary names the allocation part: its lines carry
	// subsystem=serviceip, and every identity key once.
	b, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}
	checkIdentityKeys(t, string(b), "configuration loaded", "serviceip")
	if exited() {
		t.Errorf("the controller exited")
	}
}

// checkIdentityKeys checks the first JSON log line with message msg: it has
// component=controller and subsystem=subsystem, each once, and none of
// the keys a library must not add (internal/logging/keys.go).
func checkIdentityKeys(t *testing.T, log, msg, subsystem string) {
	t.Helper()
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, `"msg":"`+msg+`"`) {
			continue
		}
		for key, want := range map[string]string{"component": "controller", "subsystem": subsystem} {
			if n := strings.Count(line, `"`+key+`":`); n != 1 {
				t.Errorf("%q: key %s %d times, want once: %s", msg, key, n, line)
			}
			if !strings.Contains(line, `"`+key+`":"`+want+`"`) {
				t.Errorf("%q: %s is not %q: %s", msg, key, want, line)
			}
		}
		for _, key := range []string{"controller", "node", "source"} {
			if strings.Contains(line, `"`+key+`":`) {
				t.Errorf("%q: key %s (a library's identity key): %s", msg, key, line)
			}
		}
		return
	}
	t.Errorf("no log line %q", msg)
}

// alive reports whether /healthz answers 200.
func (p *process) alive() bool {
	resp, err := http.Get("http://" + p.health + "/healthz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

package speaker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/poll"
)

// freeLoopbackAddr returns a 127.0.0.1 address with a port that was free
// a moment ago, for a manager's health probe server.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	must(t, l.Close())
	return addr
}

// readyz GETs /readyz from the manager's health probe server at addr, as
// the kubelet's readinessProbe does; nil means 200.
func readyz(addr string) error {
	resp, err := http.Get("http://" + addr + "/readyz?verbose")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("readyz %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

// TestNotReadyWithoutSnapshot: a speaker whose configuration cannot be
// built (an overlapping IPAddressPool got in with the webhook off) has no
// snapshot, is no memberlist member and announces nothing; its /readyz must
// fail, or a DaemonSet rollout (maxUnavailable 1) walks on through every
// node and blacks out layer 2 and BGP. Once the bad object is removed it
// loads the configuration and becomes ready.
func TestNotReadyWithoutSnapshot(t *testing.T) {
	f := newL2Fixture(t, "n1")
	ctx := context.Background()
	bad := &v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "overlap", Namespace: f.ns},
		Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"198.51.100.8/29"}}} // inside "pool"
	must(t, f.c.Create(ctx, bad))
	addr := freeLoopbackAddr(t)
	live := &liveness{live: map[string]bool{"n1": true}}
	m := live.member("n1")
	s := startSpeakerProbed(t, f.env, f.ns, "n1", m, 7946, addr)
	s.members = m
	poll.Until(t, 30*time.Second, "configuration reported invalid", func() error {
		var cs v1beta1.ConfigurationState
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "speaker-n1"}, &cs); err != nil {
			return err
		}
		if cs.Status.Result != v1beta1.ConfigurationResultInvalid || !strings.Contains(cs.Status.ErrorSummary, "IPAddressPool "+f.ns+"/overlap") {
			return fmt.Errorf("ConfigurationState %+v", cs.Status)
		}
		return nil
	})
	// The probe server is up (healthz answers) yet the speaker is not ready.
	poll.Until(t, 30*time.Second, "health probe server up", func() error {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	if err := readyz(addr); err == nil {
		t.Fatal("/readyz answers 200 although the speaker has no configuration snapshot")
	} else if !strings.Contains(err.Error(), "configuration") {
		t.Errorf("/readyz fails without naming the configuration check: %v", err)
	}
	if s.members.isActivated() {
		t.Fatal("memberlist activated without a configuration snapshot")
	}
	if n := s.logs.count("configuration rejected, no configuration in force yet: announcing nothing, not ready, not a memberlist member"); n == 0 {
		t.Error(`rejection without a snapshot not logged as "no configuration in force yet"`)
	}
	if n := s.logs.count("configuration rejected, the last valid one stays in force"); n != 0 {
		t.Errorf(`logged "the last valid one stays in force" %d times, but there was none`, n)
	}

	must(t, f.c.Delete(ctx, bad))
	poll.Until(t, 30*time.Second, "ready once the configuration loads", func() error { return readyz(addr) })
	if !s.members.isActivated() {
		t.Error("ready but memberlist not activated")
	}

	// A later rejected configuration keeps the last valid one in force:
	// the speaker stays ready (it still announces).
	bad2 := bad.DeepCopy()
	bad2.ResourceVersion = ""
	must(t, f.c.Create(ctx, bad2))
	poll.Until(t, 30*time.Second, "second rejection logged", func() error {
		if s.logs.count("configuration rejected, the last valid one stays in force") == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	if err := readyz(addr); err != nil {
		t.Errorf("not ready while the last valid configuration is in force: %v", err)
	}
}

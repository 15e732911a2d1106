package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/e2e/lab"
	"github.com/herald-lb/herald/internal/members"
	"github.com/herald-lb/herald/internal/poll"
)

// TestMemberlistKeyRotation deletes the memberlist Secret under running
// speakers (chaos row "memberlist Secret deleted; key rotated"): the
// controller creates it again with a new key, the new key reaches the
// speakers one node at a time, as the kubelet updates mounted Secrets, and
// every speaker rotates to it without a restart. Throughout, the client's
// ARP requests for every layer 2 address are answered by exactly one node,
// the one that owned it before.
// logCount counts the lines of node's speaker log that contain part.
func logCount(t *testing.T, e l2Env, node, part string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.l.StateDir(), e.h.SpeakerProcessName(node)+".log"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), part)
}

func TestMemberlistKeyRotation(t *testing.T) {
	e := l2Env{newEnv(t, 3, lab.InstallOptions{})}
	const ns = "mlkey"
	e.namespace(t, ns, nil)
	e.put(t, pool("mlkey", "198.51.100.200-198.51.100.209"))
	e.put(t, l2adv("mlkey", "mlkey"))
	if err := e.h.WaitConfigValid(testCtx(t, 2*time.Minute), "controller"); err != nil {
		t.Fatal(err)
	}
	nodes := e.allNodes()
	var ips []netip.Addr
	for i := range 4 {
		name := fmt.Sprintf("mlkey-%d", i)
		e.createService(t, lbService(ns, name), nodes...)
		ips = append(ips, e.ips(t, ns, name, 1)...)
	}
	owner := map[netip.Addr]string{}
	for _, ip := range ips {
		poll.Until(t, 30*time.Second, fmt.Sprintf("one node answers for %s", ip), func() error {
			who, err := e.l.ARPAnswerers(testCtx(t, 10*time.Second), ip, 2)
			if err != nil {
				return err
			}
			if len(who) != 1 {
				return fmt.Errorf("answered by %v", who)
			}
			owner[ip] = who[0]
			return nil
		})
	}
	t.Logf("owners before the rotation: %v", owner)

	// single fails the test unless every address is answered by its owner
	// alone.
	observations := 0
	single := func(stage string) {
		t.Helper()
		observations++
		for _, ip := range ips {
			who, err := e.l.ARPAnswerers(testCtx(t, 10*time.Second), ip, 2)
			if err != nil {
				t.Fatalf("%s: arping %s: %v", stage, ip, err)
			}
			if !slices.Equal(who, []string{owner[ip]}) {
				t.Fatalf("%s: %s answered by %v, want only %s", stage, ip, who, owner[ip])
			}
		}
	}
	// ownersAlone is nil when every address is answered by its owner alone.
	ownersAlone := func() error {
		for _, ip := range ips {
			who, err := e.l.ARPAnswerers(context.Background(), ip, 2)
			if err != nil {
				return err
			}
			if !slices.Equal(who, []string{owner[ip]}) {
				return fmt.Errorf("%s answered by %v, want only %s", ip, who, owner[ip])
			}
		}
		return nil
	}
	// until waits for cond (nil), checking single on every observation.
	until := func(stage string, timeout time.Duration, cond func() error) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for {
			single(stage)
			err := cond()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v", stage, err)
			}
		}
	}
	logHas := func(node string, parts ...string) error {
		b, err := os.ReadFile(filepath.Join(e.l.StateDir(), e.h.SpeakerProcessName(node)+".log"))
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
				return nil
			}
		}
		return fmt.Errorf("speaker %s has not logged %q", node, parts)
	}

	secrets := e.k.CoreV1().Secrets(lab.HeraldNamespace)
	ctx := testCtx(t, 5*time.Minute)
	old, err := secrets.Get(ctx, "herald-memberlist", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := secrets.Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var fresh *corev1.Secret
	until("Secret deleted: the controller creates it again", time.Minute, func() error {
		s, err := secrets.Get(ctx, old.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return err
		}
		if err != nil {
			return err
		}
		if s.UID == old.UID {
			return fmt.Errorf("still the old Secret")
		}
		fresh = s
		return nil
	})
	if string(fresh.Data["secretkey"]) == string(old.Data["secretkey"]) {
		t.Fatal("re-created Secret has the old key")
	}
	newID := members.SecretID(fresh.Data["secretkey"])
	t.Logf("key %s -> %s", members.SecretID(old.Data["secretkey"]), newID)
	if got := string(fresh.Data["previoussecretkey"]); got != string(old.Data["secretkey"]) {
		t.Errorf("re-created Secret's previoussecretkey = %q, want the deleted key", got)
	}

	// A speaker restarts before the kubelet updated the others' files: it
	// mounts the new key (and the previous one). It must join the others,
	// not elect as if alone once --ml-alone-after (10 s) has passed: the
	// observations go on past that, each with every address answered by
	// its owner alone. Before the previous key was kept, it held only the
	// new key and answered for addresses it does not own.
	restarted := nodes[len(nodes)-1]
	joinedBefore := logCount(t, e, restarted, "memberlist: joined the cluster")
	aloneBefore := logCount(t, e, restarted, "electing as if alone")
	if err := e.h.StopSpeaker(restarted); err != nil {
		t.Fatal(err)
	}
	if err := e.h.StartSpeaker(ctx, restarted); err != nil {
		t.Fatal(err)
	}
	restartedAt := time.Now()
	// While it is away, and until it has joined, another node answers for
	// its addresses: one answerer per address, not necessarily the owner.
	deadline := restartedAt.Add(time.Minute)
	for {
		observations++
		for _, ip := range ips {
			who, err := e.l.ARPAnswerers(testCtx(t, 10*time.Second), ip, 2)
			if err != nil {
				t.Fatalf("speaker restarted mid-rotation: arping %s: %v", ip, err)
			}
			if len(who) > 1 {
				t.Fatalf("speaker restarted mid-rotation: %s answered by %v: two answerers", ip, who)
			}
		}
		if n := logCount(t, e, restarted, "electing as if alone"); n > aloneBefore {
			t.Fatalf("restarted speaker on %s elected as if alone", restarted)
		}
		joined := logCount(t, e, restarted, "memberlist: joined the cluster") > joinedBefore
		if joined && time.Since(restartedAt) > 15*time.Second {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("speaker on %s restarted mid-rotation: joined the others %v within a minute", restarted, joined)
		}
	}
	poll.Until(t, 30*time.Second, "owners back after the restart mid-rotation", ownersAlone)
	for i, node := range nodes {
		if err := e.h.SyncSpeakerSecrets(ctx, node); err != nil {
			t.Fatal(err)
		}
		until(fmt.Sprintf("new key on %s (%d of %d)", node, i+1, len(nodes)), time.Minute, func() error {
			return logHas(node, "new key installed for decryption", newID)
		})
	}
	until("every speaker encrypts with the new key alone", time.Minute, func() error {
		for _, node := range nodes {
			if err := logHas(node, "memberlist key rotation complete", newID); err != nil {
				return err
			}
		}
		return nil
	})
	single("after the rotation")
	t.Logf("%d observations of %d addresses, each answered by its owner alone", observations, len(ips))

	// Speakers restarted after the rotation mount the new key and join.
	if err := e.h.StopSpeaker(nodes[0]); err != nil {
		t.Fatal(err)
	}
	if err := e.h.StartSpeaker(ctx, nodes[0]); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "owners back after a restart with the new key", ownersAlone)
}

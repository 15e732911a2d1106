package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/k8s/fieldmanager"
	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

// A speaker started while the API server is unreachable (a node rebooted
// during a control plane outage) waits for it instead of exiting into the
// kubelet's growing CrashLoopBackOff, and loads its configuration once the
// API server is reachable.
func TestProcessStartsDuringAPIOutage(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "speaker")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	must(t, env.Client.Create(ctx, node))
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.51.100.11"}}
	must(t, env.Client.Status().Update(ctx, node))
	proxy := env.NewProxy(t) // refuses connections until Open
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, proxy.KubeConfig(env), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs testenv.SyncBuffer
	cmd := exec.Command(bin, "--kubeconfig", kubeconfig, "--enable-l2=false", "--port", "0", "--health-probe-port", "0",
		"--log-level", "info")
	cmd.Env = append(os.Environ(), "METALLB_NODE_NAME=n1", "METALLB_NAMESPACE="+ns)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		}
		if t.Failed() {
			t.Logf("speaker output:\n%s", logs.String())
		}
	})
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		poll.Until(t, 60*time.Second, what, func() bool {
			select {
			case err := <-exited:
				t.Fatalf("speaker exited while waiting for %s: %v", what, err)
			default:
			}
			return cond()
		})
	}
	waitFor("the speaker to wait for the API server", func() bool {
		return strings.Contains(logs.String(), "waiting for the API server")
	})
	proxy.Open(t)
	waitFor("the speaker's ConfigurationState", func() bool {
		var cs v1beta1.ConfigurationState
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "speaker-n1"}, &cs)
		return err == nil && cs.Status.Result == v1beta1.ConfigurationResultValid
	})
	var cs v1beta1.ConfigurationState
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "speaker-n1"}, &cs))
	for _, m := range cs.ManagedFields {
		if m.Manager != fieldmanager.Speaker {
			t.Errorf("ConfigurationState speaker-n1: %s by field manager %q, want %q", m.Operation, m.Manager, fieldmanager.Speaker)
		}
	}
	checkLogs(t, logs.String(), "n1")
}

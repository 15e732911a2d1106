package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

// TestProcess runs the speaker binary against a real API server with a
// kubeconfig (as the lab does), BGP on (no peers, so no traffic) and layer 2
// off (no raw sockets in the test's namespace): it must load the
// configuration, write its ConfigurationState and a ServiceBGPStatus for a
// Service with endpoints, and stop cleanly on SIGTERM.
func TestProcess(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	c := env.Client
	ns := env.Namespace(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "speaker")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	must(t, c.Create(ctx, node))
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.51.100.11"}}
	must(t, c.Status().Update(ctx, node))
	must(t, c.Create(ctx, &v1beta1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns},
		Spec: v1beta1.IPAddressPoolSpec{Addresses: []string{"203.0.113.0/28"}}}))
	must(t, c.Create(ctx, &v1beta1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "bgp", Namespace: ns}}))
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
	must(t, c.Create(ctx, svc))
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.3"}}
	must(t, c.Status().Update(ctx, svc))
	nodeName := "n1"
	must(t, c.Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"203.0.113.50"}, NodeName: &nodeName}},
	}))

	var logs testenv.SyncBuffer
	cmd := exec.Command(bin, "--kubeconfig", kubeconfig, "--enable-l2=false", "--port", "0", "--health-probe-port", "0",
		"--log-level", "debug")
	cmd.Env = append(os.Environ(), "METALLB_NODE_NAME=n1", "METALLB_NAMESPACE="+ns)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() || testing.Verbose() {
			t.Logf("speaker output:\n%s", logs.String())
		}
	})

	poll.Until(t, 60*time.Second, "Valid ConfigurationState and ServiceBGPStatus from the process", func() error {
		select {
		case err := <-exited:
			return poll.Stop(fmt.Errorf("speaker exited early: %w", err))
		default:
		}
		var cs v1beta1.ConfigurationState
		var bgpStatus v1beta1.ServiceBGPStatusList
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "speaker-n1"}, &cs)
		if err == nil {
			err = c.List(ctx, &bgpStatus, client.InNamespace(ns), client.MatchingLabels{v1beta1.LabelNode: "n1"})
		}
		if err == nil && cs.Status.Result == v1beta1.ConfigurationResultValid && len(bgpStatus.Items) == 1 &&
			bgpStatus.Items[0].Status.ServiceName == "web" {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("status %+v, ServiceBGPStatus %+v", cs.Status, bgpStatus.Items)
	}, poll.Every(100*time.Millisecond))

	must(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("speaker exit: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("speaker did not stop within 30s of SIGTERM")
	}
	if out := logs.String(); !strings.Contains(out, `"msg":"stopped"`) {
		t.Fatalf("no clean stop in the logs:\n%s", out)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

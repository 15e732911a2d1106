package lab

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/herald-lb/herald/internal/poll"
)

// Surge ports: a second controller replica runs in the control namespace
// beside the first (the lab has no pod network, so every Deployment Pod
// shares 198.51.100.254) and gets ports of its own, as a second Pod gets
// an IP of its own in a cluster.
const (
	surgeMetricsPort = 9121
	surgeHealthPort  = 17473
	surgeWebhookPort = 9444
)

// StartSurgeController runs a second controller replica, as a surge
// rollout (maxSurge 1) does while the old one still runs: a Pod
// "<deployment>-<node>" from the Deployment's template on node (which
// must not be the controller's own node, so the names differ), run with
// the template's args followed by --port, --health-probe-port and
// --webhook-port of its own (the last flag wins). The webhook Service
// keeps pointing at the first replica. It waits until the replica's
// /readyz answers 200 (it serves health while it waits for the leader
// Lease) and returns its lab process; StopSurgeController ends it.
func (h *Herald) StartSurgeController(ctx context.Context, node string) (*Process, error) {
	if node == h.opts.ControllerNode {
		return nil, fmt.Errorf("surge controller: node %q already has the controller Pod", node)
	}
	pod, err := h.lab.CreateDeploymentPod(ctx, h.Namespace(), h.ctlDeploy, node)
	if err != nil {
		return nil, fmt.Errorf("surge controller: %w", err)
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	kc, err := h.lab.ServiceAccountKubeconfig(ctx, pod.Namespace, sa)
	if err != nil {
		return nil, fmt.Errorf("surge controller: %w", err)
	}
	argv, env, err := h.lab.ContainerProcess(ctx, pod, controllerContainer, filepath.Join(h.binDir, "controller"), kc)
	if err != nil {
		return nil, fmt.Errorf("surge controller: %w", err)
	}
	argv = append(argv, fmt.Sprintf("--port=%d", surgeMetricsPort),
		fmt.Sprintf("--health-probe-port=%d", surgeHealthPort), fmt.Sprintf("--webhook-port=%d", surgeWebhookPort))
	p, err := h.lab.Start(h.lab.ControlNamespace(), pod.Name, argv, env)
	if err != nil {
		return nil, fmt.Errorf("surge controller: %w", err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", surgeHealthPort)
	_, err = poll.Wait(ctx, h.opts.Timeout, "", func() error {
		if !p.Alive() {
			return poll.Stop(fmt.Errorf("the surge controller exited (log %s)", p.Log))
		}
		out, err := h.lab.Exec(ctx, h.lab.ControlNamespace(), "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "2", url)
		if err != nil || strings.TrimSpace(out) != "200" {
			return fmt.Errorf("readyz: %q %v", strings.TrimSpace(out), err)
		}
		return nil
	}, labEvery)
	if err != nil {
		return p, fmt.Errorf("surge controller not ready: %w", err)
	}
	return p, nil
}

// StopSurgeController stops the replica StartSurgeController started on
// node (SIGTERM) and deletes its Pod.
func (h *Herald) StopSurgeController(ctx context.Context, node string) error {
	name := TemplatePodName(h.ctlDeploy, node)
	var err error
	if h.lab.Process(name) != nil {
		err = h.lab.StopProcess(name)
	}
	if derr := h.lab.Client().CoreV1().Pods(h.Namespace()).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); derr != nil && err == nil {
		err = fmt.Errorf("surge controller: delete pod: %w", derr)
	}
	return err
}

package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// SyncSpeakerSecrets does for node's speaker Pod what the kubelet does some
// time after a mounted Secret changed (StartPod materializes volumes only
// once): it rewrites the files of the speaker container's Secret volume
// mounts from the API, each file atomically (written next to it, then
// renamed over it), so a reader sees the old or the new content, never a
// mix. Mounts with a subPath are left alone, as the kubelet does. A Secret
// that is missing is waited for, as at start.
func (h *Herald) SyncSpeakerSecrets(ctx context.Context, node string) error {
	h.mu.Lock()
	pod := h.spkPods[node]
	h.mu.Unlock()
	if pod == nil {
		return fmt.Errorf("sync speaker secrets: no speaker pod on node %q", node)
	}
	return h.lab.SyncPodSecrets(ctx, pod, speakerContainer)
}

// SyncPodSecrets rewrites the files of container's Secret volume mounts of
// pod (a Pod [Lab.StartPod] runs) from the API, as SyncSpeakerSecrets does
// for a speaker.
func (l *Lab) SyncPodSecrets(ctx context.Context, pod *corev1.Pod, container string) error {
	for _, c := range pod.Spec.Containers {
		if c.Name != container {
			continue
		}
		for _, m := range c.VolumeMounts {
			if m.SubPath != "" {
				continue
			}
			for _, v := range pod.Spec.Volumes {
				if v.Name != m.Name || v.Secret == nil {
					continue
				}
				files, err := l.volumeFiles(ctx, pod, v)
				if err != nil {
					return fmt.Errorf("pod %s/%s: volume %s: %w", pod.Namespace, pod.Name, v.Name, err)
				}
				dir := filepath.Join(l.cfg.StateDir, podsDir, pod.Name, filepath.Clean("/"+m.MountPath))
				for name, b := range files {
					p := filepath.Join(dir, filepath.Clean("/"+name))
					tmp := p + ".tmp"
					if err := os.WriteFile(tmp, b, 0o644); err != nil {
						return err
					}
					if err := os.Rename(tmp, p); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// StopSpeakerContainer does what the kubelet does when node's speaker
// container ends: it stops the speaker (SIGTERM with the Pod's grace
// period, see StopSpeaker; SIGKILL at once when kill is set, a crash or an
// OOM kill) and then reports the container Terminated in the Pod's status
// (exit code 0, reason Completed; 137, reason Error, after a kill), not
// ready, and the Pod not Ready. The Pod object stays, as it does while the
// kubelet restarts its container.
func (h *Herald) StopSpeakerContainer(ctx context.Context, node string, kill bool) error {
	var err error
	if kill {
		err = h.KillSpeaker(node)
	} else {
		err = h.StopSpeaker(node)
	}
	if err != nil {
		return err
	}
	exit := corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}
	if kill {
		exit = corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error"}
	}
	return h.setSpeakerContainer(ctx, node, func(cs *corev1.ContainerStatus) {
		t := exit
		t.FinishedAt = metav1.Now()
		if cs.State.Running != nil {
			t.StartedAt = cs.State.Running.StartedAt
		}
		cs.State = corev1.ContainerState{Terminated: &t}
		cs.Ready, cs.Started = false, ptr.To(false)
	})
}

// StartSpeakerContainer does what the kubelet does when it starts node's
// speaker container again: it runs the speaker from its Pod (the same
// binary, args, env and volumes as before, see StartSpeaker), reports the
// container Running, not ready, with its restartCount raised by one and the
// previous Terminated state as lastState, waits until the speaker's
// /readyz answers and then reports it ready. It fails when the speaker
// runs.
func (h *Herald) StartSpeakerContainer(ctx context.Context, node string) error {
	if p := h.Speaker(node); p != nil && p.Alive() {
		return fmt.Errorf("start speaker %s: it runs (pid %d)", node, p.PID)
	}
	if err := h.runSpeakerPod(ctx, node); err != nil {
		return err
	}
	started := metav1.Now()
	if err := h.setSpeakerContainer(ctx, node, func(cs *corev1.ContainerStatus) {
		if cs.State.Terminated != nil {
			cs.LastTerminationState = corev1.ContainerState{Terminated: cs.State.Terminated}
			cs.RestartCount++
		}
		cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}
		cs.Ready, cs.Started = false, ptr.To(true)
	}); err != nil {
		return err
	}
	if err := h.WaitSpeakerReady(ctx, node); err != nil {
		return err
	}
	return h.setSpeakerContainer(ctx, node, func(cs *corev1.ContainerStatus) { cs.Ready = true })
}

// RestartSpeakerContainer is StopSpeakerContainer followed by
// StartSpeakerContainer: the kubelet restarting node's speaker container
// (a liveness failure, a crash with kill set), the Pod and its flags
// unchanged. A speaker that does not run (stopped, crashed) is only
// started, as the kubelet starts a container that exited.
func (h *Herald) RestartSpeakerContainer(ctx context.Context, node string, kill bool) error {
	if p := h.Speaker(node); p == nil || !p.Alive() {
		// Stopped already (stop-speaker, a crash): the kubelet only
		// starts it again.
		return h.StartSpeakerContainer(ctx, node)
	}
	if err := h.StopSpeakerContainer(ctx, node, kill); err != nil {
		return err
	}
	return h.StartSpeakerContainer(ctx, node)
}

// setSpeakerContainer applies set to the speaker container's status in
// node's speaker Pod (read from the API) and sets the Pod's ContainersReady
// and Ready conditions from the containers' readiness, as the kubelet does.
func (h *Herald) setSpeakerContainer(ctx context.Context, node string, set func(*corev1.ContainerStatus)) error {
	h.mu.Lock()
	pod := h.spkPods[node]
	h.mu.Unlock()
	if pod == nil {
		return fmt.Errorf("speaker pod status: no speaker pod on node %q", node)
	}
	pods := h.lab.Client().CoreV1().Pods(pod.Namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("speaker pod status %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		found, ready := false, true
		for i := range cur.Status.ContainerStatuses {
			cs := &cur.Status.ContainerStatuses[i]
			if cs.Name == speakerContainer {
				set(cs)
				found = true
			}
			ready = ready && cs.Ready
		}
		if !found {
			return fmt.Errorf("speaker pod status %s/%s: no status of container %q", pod.Namespace, pod.Name, speakerContainer)
		}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		now := metav1.Now()
		for i, c := range cur.Status.Conditions {
			if (c.Type == corev1.ContainersReady || c.Type == corev1.PodReady) && c.Status != st {
				cur.Status.Conditions[i].Status, cur.Status.Conditions[i].LastTransitionTime = st, now
			}
		}
		_, err = pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

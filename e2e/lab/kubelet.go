package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
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

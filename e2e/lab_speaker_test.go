package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/e2e/lab"
)

// TestLabSpeakerCommands runs `herald-lab restart-speaker`, `stop-speaker`
// and `start-speaker` (hack/lab.sh's) against a lab with Herald, from
// another process as an operator does: the restarted speaker is a new
// process with the same command line, recorded in the lab's state (so lab
// down stops it), ready, and its Pod's container status tells the
// restart as a kubelet's would.
func TestLabSpeakerCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up a lab")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// Binaries outside the state directory (as make lab's bin/): the
	// commands must find them through the lab's record.
	binDir := os.Getenv(lab.BinDirEnv)
	if binDir == "" {
		var err error
		if binDir, err = lab.BuildHerald(ctx, t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	e := newEnv(t, 2, lab.InstallOptions{BinDir: binDir})
	bin := filepath.Join(t.TempDir(), "herald-lab")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/herald-lab")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build herald-lab: %v\n%s", err, out)
	}
	run := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, bin, append(args, "--state-dir", e.l.StateDir())...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// recorded is the speaker process of node in the lab's state file, as
	// a later `herald-lab down` finds it (nil when none).
	recorded := func(node string) *lab.Process {
		t.Helper()
		l, err := lab.Open(e.l.StateDir())
		if err != nil {
			t.Fatal(err)
		}
		return l.Process(e.h.SpeakerProcessName(node))
	}
	container := func(node string) (corev1.ContainerStatus, bool) {
		t.Helper()
		pod, err := e.k.CoreV1().Pods(lab.HeraldNamespace).Get(ctx, e.h.SpeakerProcessName(node), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		podReady := false
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady {
				podReady = c.Status == corev1.ConditionTrue
			}
		}
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.Name == "speaker" {
				return cs, podReady
			}
		}
		t.Fatalf("pod %s has no speaker container status", pod.Name)
		return corev1.ContainerStatus{}, false
	}

	t.Run("restart", func(t *testing.T) {
		old := e.h.Speaker("n1")
		oldLine := cmdline(t, old.PID)
		out, err := run("restart-speaker", "n1")
		if err != nil {
			t.Fatalf("restart-speaker n1: %v\n%s", err, out)
		}
		select {
		case <-old.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("the old speaker (pid %d) still runs after restart-speaker", old.PID)
		}
		p := recorded("n1")
		if p == nil || p.PID == old.PID || !p.Alive() {
			t.Fatalf("recorded speaker after the restart: %+v, old pid %d", p, old.PID)
		}
		if got := cmdline(t, p.PID); got != oldLine {
			t.Errorf("restarted speaker's command line\n%s\nwant the old one\n%s", got, oldLine)
		}
		cs, ready := container("n1")
		if cs.State.Running == nil || cs.RestartCount != 1 || !cs.Ready || !ready ||
			cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 0 {
			t.Errorf("speaker container after restart-speaker: %+v, pod ready %v; want running, ready, restartCount 1, last state exit 0", cs, ready)
		}
		// The restarted speaker serves: its ConfigurationState is Valid again.
		if err := e.h.WaitConfigValid(ctx, "speaker-n1"); err != nil {
			t.Error(err)
		}
	})

	t.Run("stop and start", func(t *testing.T) {
		old := e.h.Speaker("n2")
		out, err := run("stop-speaker", "--kill", "n2")
		if err != nil {
			t.Fatalf("stop-speaker --kill n2: %v\n%s", err, out)
		}
		if p := recorded("n2"); p != nil {
			t.Errorf("a speaker process is still recorded for n2 after stop-speaker: %+v", p)
		}
		select {
		case <-old.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("the speaker (pid %d) still runs after stop-speaker --kill", old.PID)
		}
		cs, ready := container("n2")
		if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 137 || cs.Ready || ready {
			t.Errorf("speaker container after stop-speaker --kill: %+v, pod ready %v; want terminated with 137, not ready", cs, ready)
		}
		// status names the stopped speaker as a problem (before, a stopped
		// first speaker made it skip the Services and say all was well).
		if out, err := run("status"); err == nil || !strings.Contains(out, "speaker on n2 not running") {
			t.Errorf("status with n2's speaker stopped: err %v, want a failure naming it:\n%s", err, out)
		}
		// restart-speaker of a stopped speaker starts it, as the kubelet
		// does (before: "stop speaker n2: not running").
		if out, err := run("restart-speaker", "n2"); err != nil {
			t.Fatalf("restart-speaker n2 (stopped): %v\n%s", err, out)
		}
		if p := recorded("n2"); p == nil || !p.Alive() {
			t.Fatalf("recorded speaker after restart-speaker of a stopped one: %+v", p)
		}
		cs, ready = container("n2")
		if cs.State.Running == nil || cs.RestartCount != 1 || !cs.Ready || !ready ||
			cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 137 {
			t.Errorf("speaker container after restart-speaker: %+v, pod ready %v; want running, ready, restartCount 1, last state exit 137", cs, ready)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"start-speaker", "n2"}, "it runs"},
			{[]string{"restart-speaker", "n9"}, `no speaker Pod on node "n9"`},
			{[]string{"restart-speaker"}, "want a node name"},
		} {
			out, err := run(c.args...)
			if err == nil || !strings.Contains(out, c.want) {
				t.Errorf("%q: err %v, output %q; want a failure saying %q", c.args, err, out, c.want)
			}
		}
	})
}

// cmdline is the command line of pid, arguments separated by spaces.
func cmdline(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

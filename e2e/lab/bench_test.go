package lab

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFinishTemp: the state directory goes after a clean run, stays (and
// is named) after a failure, a failed clean-up or when the logs are
// wanted; the lab is taken down in every case.
func TestFinishTemp(t *testing.T) {
	boom, downFailed := errors.New("boom"), errors.New("netns busy")
	for _, c := range []struct {
		name     string
		runErr   error
		downErr  error
		keepLogs bool
		kept     bool
		errParts []string
	}{
		{name: "clean run"},
		{name: "run failed", runErr: boom, kept: true, errParts: []string{"boom"}},
		{name: "logs wanted", keepLogs: true, kept: true},
		{name: "down failed", downErr: downFailed, kept: true, errParts: []string{"lab down: netns busy"}},
		{name: "both failed", runErr: boom, downErr: downFailed, kept: true, errParts: []string{"boom", "lab down: netns busy"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			if err := os.MkdirAll(filepath.Join(dir, "pods"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "speaker.log"), []byte("log"), 0o644); err != nil {
				t.Fatal(err)
			}
			downs := 0
			kept, err := finishTemp(dir, func() error { downs++; return c.downErr }, c.runErr, c.keepLogs)
			if downs != 1 {
				t.Errorf("lab taken down %d times, want 1", downs)
			}
			_, statErr := os.Stat(dir)
			if c.kept {
				if kept != dir || statErr != nil {
					t.Errorf("kept %q (stat %v), want %s kept", kept, statErr, dir)
				}
			} else if kept != "" || !os.IsNotExist(statErr) {
				t.Errorf("kept %q, stat %v: want the directory removed", kept, statErr)
			}
			if len(c.errParts) == 0 && err != nil {
				t.Errorf("error %v, want none", err)
			}
			for _, p := range c.errParts {
				if err == nil || !strings.Contains(err.Error(), p) {
					t.Errorf("error %v, want one containing %q", err, p)
				}
			}
		})
	}
}

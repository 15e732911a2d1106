package chaos

import (
	"os"
	"testing"
)

// TestProcMemory reads this process's VmRSS and VmHWM: both non-zero,
// the high-water mark at least the current RSS; a missing process is an
// error.
func TestProcMemory(t *testing.T) {
	rss, hwm, err := procMemory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if rss == 0 || hwm < rss {
		t.Errorf("VmRSS %d, VmHWM %d bytes: want 0 < VmRSS <= VmHWM", rss, hwm)
	}
	if _, _, err := procMemory(1 << 30); err == nil {
		t.Error("no error for a process that does not exist")
	}
}

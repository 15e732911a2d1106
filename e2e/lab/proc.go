package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is a long-lived process of the lab, running in its own session
// (so its process group can be signalled as a whole), with stdout and stderr
// in a log file under StateDir. Its PID is recorded in state.json.
type Process struct {
	// Name is unique within the lab; the log is StateDir/<Name>.log.
	Name string
	// Namespace is the network namespace it runs in ("" for the root one).
	Namespace string
	// PID is the process ID, also its process group ID.
	PID int
	// Log is the absolute path of its log.
	Log string

	startTime uint64
	done      chan struct{} // closed when it exited; nil for processes of another run
	err       error         // exit status, valid after done
}

// Done is closed when the process exited. For a process started by another
// program (a lab opened with [Open]) it is nil.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err returns the exit error after Done is closed.
func (p *Process) Err() error { return p.err }

// Alive reports whether the process still runs.
func (p *Process) Alive() bool {
	return procAlive(p.PID, p.startTime)
}

// Stop sends SIGTERM to the process group, then SIGKILL after grace, and
// waits until the process is gone.
func (p *Process) Stop(grace time.Duration) error {
	return killGroup(p.PID, p.startTime, grace)
}

// Start runs args in network namespace ns ("" for the root namespace) as a
// long-lived lab process called name, with env added to the current
// environment. The process outlives the caller's program unless stopped.
func (l *Lab) Start(ns, name string, args []string, env []string) (*Process, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, dup := l.procs[name]; dup {
		return nil, fmt.Errorf("start %s: a lab process of that name exists", name)
	}
	logPath := filepath.Join(l.cfg.StateDir, name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	defer logf.Close()
	argv := args
	if ns != "" {
		argv = append([]string{"ip", "netns", "exec", ns}, args...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	fmt.Fprintf(logf, "--- %s lab: %s\n", time.Now().UTC().Format(time.RFC3339), strings.Join(argv, " "))
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, Namespace: ns, PID: cmd.Process.Pid, Log: logPath, done: make(chan struct{})}
	p.startTime, _ = procStartTime(p.PID)
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	l.procs[name] = p
	l.st.Processes = append(l.st.Processes, procRecord{Name: name, Namespace: ns, PID: p.PID, StartTime: p.startTime, Log: logPath})
	if err := l.st.save(); err != nil {
		return p, err
	}
	return p, nil
}

// Process returns the lab process called name, or nil.
func (l *Lab) Process(name string) *Process {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.procs[name]
}

// StopProcess stops the lab process called name and forgets it.
func (l *Lab) StopProcess(name string) error {
	l.mu.Lock()
	p := l.procs[name]
	delete(l.procs, name)
	recs := l.st.Processes[:0]
	for _, r := range l.st.Processes {
		if r.Name != name {
			recs = append(recs, r)
		}
	}
	l.st.Processes = recs
	err := l.st.save()
	l.mu.Unlock()
	if p == nil {
		return fmt.Errorf("stop %s: no such lab process", name)
	}
	return errors.Join(p.Stop(3*time.Second), err)
}

// Exec runs args in network namespace ns ("" for the root namespace) and
// returns its combined output. A non-zero exit is an error that includes the output.
func (l *Lab) Exec(ctx context.Context, ns string, args ...string) (string, error) {
	return run(ctx, ns, args...)
}

func run(ctx context.Context, ns string, args ...string) (string, error) {
	argv := args
	if ns != "" {
		argv = append([]string{"ip", "netns", "exec", ns}, args...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// procStartTime reads field 22 of /proc/<pid>/stat.
func procStartTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may contain spaces; fields resume after ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	if f[0] == "Z" || f[0] == "X" {
		return 0, fmt.Errorf("process %d is a zombie", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// procAlive reports whether pid runs and (when startTime is not 0) is the
// same process that was recorded.
func procAlive(pid int, startTime uint64) bool {
	st, err := procStartTime(pid)
	if err != nil {
		return false
	}
	return startTime == 0 || st == startTime
}

// killGroup stops the process group led by pid: SIGTERM, then SIGKILL after
// grace. A pid that no longer runs (or was recycled) is left alone.
func killGroup(pid int, startTime uint64, grace time.Duration) error {
	if pid <= 1 || !procAlive(pid, startTime) {
		return nil
	}
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !procAlive(pid, startTime) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for range 100 {
		if !procAlive(pid, startTime) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("process %d survives SIGKILL", pid)
}

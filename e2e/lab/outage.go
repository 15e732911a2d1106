package lab

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
)

// apiServerProcess is the lab process name of kube-apiserver.
const apiServerProcess = "kube-apiserver"

// StopAPIServer stops kube-apiserver (SIGTERM, SIGKILL after 3 s), as in a
// control plane outage; etcd keeps running and its data stays. Every
// client (the controller, the speakers, the lab's own) loses the API until
// [Lab.StartAPIServer]. It returns the command line to start it with.
func (l *Lab) StopAPIServer() ([]string, error) {
	p := l.Process(apiServerProcess)
	if p == nil {
		return nil, fmt.Errorf("stop api server: not running")
	}
	// `ip netns exec` execs the server, so its PID holds the server's argv.
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/cmdline")
	if err != nil {
		return nil, fmt.Errorf("stop api server: command line: %w", err)
	}
	var argv []string
	for _, a := range bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0}) {
		argv = append(argv, string(a))
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("stop api server: empty command line of pid %d", p.PID)
	}
	if err := l.StopProcess(apiServerProcess); err != nil {
		return nil, fmt.Errorf("stop api server: %w", err)
	}
	return argv, nil
}

// StartAPIServer starts kube-apiserver again with argv (from
// [Lab.StopAPIServer]) in the control namespace and waits until /readyz
// answers.
func (l *Lab) StartAPIServer(ctx context.Context, argv []string) error {
	if _, err := l.Start(l.ControlNamespace(), apiServerProcess, argv, nil); err != nil {
		return fmt.Errorf("start api server: %w", err)
	}
	if err := l.waitAPIServer(ctx); err != nil {
		return fmt.Errorf("start api server: %w", err)
	}
	return nil
}

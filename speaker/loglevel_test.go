package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/internal/logging"
	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

// freePort returns a TCP port free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startProcess builds and starts the speaker binary against env with
// args (layer 2 off: no raw sockets in the test's namespace; BGP on, with
// no peers), logging into the returned buffer; it is stopped when the test
// ends.
func startProcess(t *testing.T, env *testenv.Env, ns string, args ...string) *testenv.SyncBuffer {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "speaker")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &testenv.SyncBuffer{}
	cmd := exec.Command(bin, append([]string{"--kubeconfig", kubeconfig, "--enable-l2=false", "--health-probe-port", "0"}, args...)...)
	cmd.Env = append(os.Environ(), "METALLB_NODE_NAME=n1", "METALLB_NAMESPACE="+ns)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() || testing.Verbose() {
			t.Logf("speaker output:\n%s", logs.String())
		}
	})
	t.Cleanup(func() { cmdPID = 0 })
	cmdPID = cmd.Process.Pid
	return logs
}

// cmdPID is the process started by startProcess (for signals).
var cmdPID int

func request(method, url, body string) (int, string, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestProcessLogLevel: the running speaker's log level changes without a
// restart. At info it logs no debug line; after PUT /debug/loglevel debug
// on the metrics server, the decision for a Service created afterwards is
// logged at debug level; after SIGUSR2 it is back at info and the next
// Service's decision has no debug line again.
func TestProcessLogLevel(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	c := env.Client
	ns := env.Namespace(t)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	must(t, c.Create(ctx, node))
	port := freePort(t)
	logs := startProcess(t, env, ns, "--port", strconv.Itoa(port), "--metrics-secure=false", "--log-level", "info")
	url := fmt.Sprintf("http://127.0.0.1:%d%s", port, logging.LevelPath)

	poll.Until(t, 60*time.Second, "GET "+logging.LevelPath, func() error {
		code, body, err := request(http.MethodGet, url, "")
		if err != nil || code != 200 || body != "info\n" {
			return fmt.Errorf("%d %q %w", code, body, err)
		}
		return nil
	})
	// Each Service (no address yet) is decided once: "not announcing"
	// at info level when its reason appears, and at debug level.
	decided := func(name, level string) string {
		return `"level":"` + level + `","msg":"not announcing","component":"speaker","node":"n1","service":"` + ns + "/" + name + `"`
	}
	create := func(name string) {
		t.Helper()
		must(t, c.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}))
		poll.Until(t, 60*time.Second, name+" decided", func() error {
			if !strings.Contains(logs.String(), decided(name, "INFO")) {
				return fmt.Errorf("no %s", decided(name, "INFO"))
			}
			return nil
		})
	}
	create("early")
	if out := logs.String(); strings.Contains(out, `"level":"DEBUG"`) {
		t.Fatalf("debug lines at --log-level info:\n%s", out)
	}

	if code, body, err := request(http.MethodPut, url, "debug"); err != nil || code != 200 || body != "debug\n" {
		t.Fatalf("PUT debug: %d %q %v", code, body, err)
	}
	create("late")
	if out := logs.String(); !strings.Contains(out, decided("late", "DEBUG")) {
		t.Fatalf("no debug line for late after PUT debug:\n%s", out)
	}
	if !strings.Contains(logs.String(), `"msg":"log level changed","component":"speaker","node":"n1","from":"info","to":"debug"`) {
		t.Error("the change is not logged")
	}

	must(t, syscall.Kill(cmdPID, syscall.SIGUSR2))
	poll.Until(t, 30*time.Second, "level info after SIGUSR2", func() error {
		code, body, err := request(http.MethodGet, url, "")
		if err != nil || body != "info\n" {
			return fmt.Errorf("%d %q %w", code, body, err)
		}
		return nil
	})
	create("later")
	if out := logs.String(); strings.Contains(out, decided("later", "DEBUG")) {
		t.Fatalf("debug line for later after SIGUSR2:\n%s", out)
	}
	checkLogs(t, logs.String(), "n1")
}

// TestProcessLogLevelSecure: with secure metrics (the default) the level
// endpoint is behind the metrics server's authentication: a request without
// a token is refused and changes nothing.
func TestProcessLogLevelSecure(t *testing.T) {
	env := testenv.Start(t)
	ns := env.Namespace(t)
	port := freePort(t)
	logs := startProcess(t, env, ns, "--port", strconv.Itoa(port), "--log-level", "info")
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: insecureTLS()}}
	url := fmt.Sprintf("https://127.0.0.1:%d%s", port, logging.LevelPath)
	var code int
	poll.Until(t, 60*time.Second, "metrics server answering", func() error {
		req, _ := http.NewRequest(http.MethodPut, url, strings.NewReader("debug"))
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		code = resp.StatusCode
		return nil
	})
	if code != http.StatusUnauthorized {
		t.Errorf("PUT without a token: %d, want 401", code)
	}
	if out := logs.String(); strings.Contains(out, "log level changed") {
		t.Errorf("level changed without a token:\n%s", out)
	}
}

func insecureTLS() *tls.Config {
	return &tls.Config{InsecureSkipVerify: true} // unverified: the test's self-signed metrics certificate
}

package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/herald-lb/herald/internal/poll"
)

// proxyPortFile records the loopback proxy's port in StateDir.
const proxyPortFile = "proxy.port"

// helperBinary returns the herald-lab binary for the lab's own helper
// processes (node backends, loopback proxy): Config.HelperBinary, the
// running executable when it is herald-lab, or a fresh `go build` into
// StateDir (cached by the Go build cache).
func (l *Lab) helperBinary(ctx context.Context) (string, error) {
	if l.cfg.HelperBinary != "" {
		return l.cfg.HelperBinary, nil
	}
	if exe, err := os.Executable(); err == nil && filepath.Base(exe) == "herald-lab" {
		return exe, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", fmt.Errorf("build herald-lab: %w", err)
	}
	out := filepath.Join(l.cfg.StateDir, "herald-lab")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./e2e/cmd/herald-lab")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build herald-lab: %w: %s", err, b)
	}
	return out, nil
}

// BackendProcessName is the name of node's backend process ("backend-n1").
func BackendProcessName(node string) string { return "backend-" + node }

// startBackends starts the lab backend in every node namespace and waits
// until each accepts connections on its node address.
func (l *Lab) startBackends(ctx context.Context, helper string) error {
	for _, n := range l.Nodes {
		if _, err := l.Start(n.Namespace, BackendProcessName(n.Name), []string{helper, "backend",
			"--node", n.Name, "--listen", ":" + strconv.Itoa(BackendPort)}, nil); err != nil {
			return err
		}
	}
	for _, n := range l.Nodes {
		addr := net.JoinHostPort(n.IPv4.String(), strconv.Itoa(BackendPort))
		dial := l.DialContext(n.Namespace)
		_, err := poll.Wait(ctx, 10*time.Second, "", func() error {
			if p := l.Process(BackendProcessName(n.Name)); p != nil && p.Done() != nil {
				select {
				case <-p.Done():
					return poll.Stop(fmt.Errorf("backend %s exited, see %s", n.Name, p.Log))
				default:
				}
			}
			c, err := dial(ctx, "tcp", addr)
			if err != nil {
				return err
			}
			return c.Close()
		}, labEvery)
		if err != nil {
			return fmt.Errorf("backend %s: %w", n.Name, err)
		}
	}
	return nil
}

// ProxyProcessName is the name of the loopback proxy process.
const ProxyProcessName = "apiserver-proxy"

// startProxy starts the loopback proxy in the root namespace and writes
// the host kubeconfig for it.
func (l *Lab) startProxy(ctx context.Context, helper string) error {
	portFile := filepath.Join(l.cfg.StateDir, proxyPortFile)
	_ = os.Remove(portFile)
	p, err := l.Start("", ProxyProcessName, []string{helper, "proxy",
		"--netns", l.ControlNamespace(), "--listen", "127.0.0.1:0",
		"--target", net.JoinHostPort(APIServerAddr.String(), strconv.Itoa(APIServerPort)),
		"--port-file", portFile}, nil)
	if err != nil {
		return err
	}
	var port int
	_, err = poll.Wait(ctx, 10*time.Second, "", func() error {
		select {
		case <-p.Done():
			return poll.Stop(fmt.Errorf("proxy exited, see %s", p.Log))
		default:
		}
		b, err := os.ReadFile(portFile)
		if err != nil {
			return err
		}
		port, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err
	}, labEvery)
	if err != nil {
		return fmt.Errorf("loopback proxy: %w", err)
	}
	l.mu.Lock()
	l.st.ProxyPort = port
	err = l.st.save()
	l.mu.Unlock()
	if err != nil {
		return err
	}
	return l.writeKubeconfig(filepath.Join(l.cfg.StateDir, HostKubeconfigFile), "https://"+net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
}

// RunProxy accepts connections on ln and forwards each to target, dialled
// inside network namespace ns, until ctx ends. It returns after every
// forwarding goroutine ended.
func RunProxy(ctx context.Context, ln net.Listener, ns, target string) error {
	dial := DialContextIn(ns)
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("proxy accept: %w", err)
		}
		wg.Go(func() {
			defer c.Close()
			dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			u, err := dial(dctx, "tcp", target)
			cancel()
			if err != nil {
				return
			}
			defer u.Close()
			done := context.AfterFunc(ctx, func() { c.Close(); u.Close() })
			defer done()
			var cw sync.WaitGroup
			cw.Go(func() { _, _ = io.Copy(u, c); closeWrite(u) })
			cw.Go(func() { _, _ = io.Copy(c, u); closeWrite(c) })
			cw.Wait()
		})
	}
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// BackendReply is what the lab backend answers: the node that served the
// request and the client address it saw.
type BackendReply struct {
	Node   string
	Client string
}

// ServeBackend answers every HTTP request on ln with "node=<node>\n
// client=<remote IP>\n" until ctx ends (lab scaffolding: plays the Service's
// endpoints behind kube-proxy on each node).
func ServeBackend(ctx context.Context, ln net.Listener, node string) error {
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprintf(w, "node=%s\nclient=%s\n", node, host)
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err := srv.Shutdown(sctx)
		if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
		return err
	}
}

// ParseBackendReply parses a body written by [ServeBackend].
func ParseBackendReply(body string) (BackendReply, error) {
	var r BackendReply
	for _, line := range strings.Split(strings.TrimSpace(body), "\n") {
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "node":
			r.Node = v
		case "client":
			r.Client = v
		}
	}
	if r.Node == "" {
		return r, fmt.Errorf("not a lab backend reply: %q", body)
	}
	return r, nil
}

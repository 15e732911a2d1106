package testenv

import (
	"bytes"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy is a loopback TCP proxy in front of the test API server, to play
// an API server outage: until Open, its address refuses connections (as
// a stopped kube-apiserver's port does); after Open it forwards every
// connection to the API server. The test's cleanup closes it.
type Proxy struct {
	// Addr is the proxy's host:port on 127.0.0.1.
	Addr   string
	target string
	mu     sync.Mutex
	l      net.Listener
	conns  []net.Conn
	wg     sync.WaitGroup
}

// NewProxy reserves a loopback port for a proxy to e's API server; it
// does not listen yet.
func (e *Env) NewProxy(t testing.TB) *Proxy {
	t.Helper()
	u, err := url.Parse(e.Config.Host)
	if err != nil {
		t.Fatalf("testenv: API server address %q: %v", e.Config.Host, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: reserve a port: %v", err)
	}
	p := &Proxy{Addr: l.Addr().String(), target: u.Host}
	l.Close()
	t.Cleanup(p.close)
	return p
}

// KubeConfig returns e's kubeconfig pointing at the proxy (the API
// server's certificate is valid for 127.0.0.1).
func (p *Proxy) KubeConfig(e *Env) []byte {
	return bytes.ReplaceAll(e.KubeConfig, []byte(p.target), []byte(p.Addr))
}

// Open starts forwarding: the API server is back.
func (p *Proxy) Open(t testing.TB) {
	t.Helper()
	l, err := net.Listen("tcp", p.Addr)
	if err != nil {
		t.Fatalf("testenv: proxy listen on %s: %v", p.Addr, err)
	}
	p.mu.Lock()
	p.l = l
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, b)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(b, c); b.Close() }()
			go func() { _, _ = io.Copy(c, b); c.Close() }()
		}
	})
}

func (p *Proxy) close() {
	p.mu.Lock()
	if p.l != nil {
		p.l.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

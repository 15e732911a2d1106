package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
)

// inNetns runs fn on a locked OS thread switched into the network namespace
// called name (/var/run/netns/<name>). Sockets fn creates belong to that
// namespace for their whole life, whichever thread uses them later. fn must
// create its sockets on the calling goroutine (dial IP literals, not names).
func inNetns(name string, fn func() error) error {
	target, err := netns.GetFromName(name)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", name, err)
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("current netns: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter netns %s: %w", name, err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			// Leave the thread locked: the runtime then ends it with this
			// goroutine instead of reusing a thread in the wrong namespace.
			errc <- errors.Join(ferr, fmt.Errorf("leave netns %s: %w", name, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// DialContextIn returns a dial function whose connections start in network
// namespace ns; addresses must be IP literals ("198.51.100.254:6443").
// It fits rest.Config.Dial and http.Transport.DialContext.
func DialContextIn(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := inNetns(ns, func() error {
			var err error
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("dial %s %s in netns %s: %w", network, addr, ns, err)
		}
		return c, nil
	}
}

// DialContext returns a dial function for lab namespace ns (see [DialContextIn]).
func (l *Lab) DialContext(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return DialContextIn(ns)
}

// ListenIn opens a listener inside network namespace ns.
func ListenIn(ns, network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := inNetns(ns, func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen %s %s in netns %s: %w", network, addr, ns, err)
	}
	return ln, nil
}

// netnsDir is where `ip netns` keeps named namespaces.
const netnsDir = "/var/run/netns"

// listNamespaces returns the names of the named network namespaces.
func listNamespaces() []string {
	ents, err := os.ReadDir(netnsDir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// NamespaceExists reports whether the named network namespace exists.
func NamespaceExists(name string) bool {
	_, err := os.Stat(filepath.Join(netnsDir, name))
	return err == nil
}

// killNamespacePIDs stops every process in network namespace ns: SIGTERM,
// then SIGKILL to those left after a second.
func killNamespacePIDs(ctx context.Context, ns string) error {
	pids := func() []int {
		out, err := run(ctx, "", "ip", "netns", "pids", ns)
		if err != nil {
			return nil
		}
		var ps []int
		for _, f := range strings.Fields(out) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
				ps = append(ps, pid)
			}
		}
		return ps
	}
	ps := pids()
	if len(ps) == 0 {
		return nil
	}
	for _, pid := range ps {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	for range 50 {
		if len(pids()) == 0 {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, pid := range pids() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for range 100 {
		if len(pids()) == 0 {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("processes %v survive in netns %s", pids(), ns)
}

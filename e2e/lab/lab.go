package lab

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"

	"github.com/herald-lb/herald/internal/poll"
)

// Lab is a running lab. Its methods are safe for concurrent use.
type Lab struct {
	cfg Config
	// Nodes are the node namespaces, in order n1, n2, ...
	Nodes []Node

	pki *pki

	mu     sync.Mutex
	st     *state
	procs  map[string]*Process
	client kubernetes.Interface
	// neigh is what Up raised of the host's neighbour table limits, "" when
	// nothing (see NeighbourLimitsRaised).
	neigh string
}

// NeighbourLimitsRaised returns the host's neighbour table limits Up raised
// for this lab ("net.ipv4.neigh.default.gc_thresh3 1024 -> 11530, ..."),
// "" when they sufficed. The kernel's ARP and NDP tables are shared by every
// network namespace; a lab of n nodes needs about NeighbourEntries(n)
// entries. They stay raised after Down (another lab may need them).
func (l *Lab) NeighbourLimitsRaised() string { return l.neigh }

// Config returns the lab's normalized configuration.
func (l *Lab) Config() Config { return l.cfg }

// Prefix returns the namespace prefix.
func (l *Lab) Prefix() string { return l.cfg.Prefix }

// StateDir returns the absolute state directory.
func (l *Lab) StateDir() string { return l.cfg.StateDir }

// SwitchNamespace returns the namespace holding the bridge br0.
func (l *Lab) SwitchNamespace() string { return nsName(l.cfg.Prefix, "sw") }

// ClientNamespace returns the client's namespace.
func (l *Lab) ClientNamespace() string { return nsName(l.cfg.Prefix, "cl") }

// Node returns the node called name ("n1"), or false.
func (l *Lab) Node(name string) (Node, bool) {
	for _, n := range l.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

func newLab(cfg Config, st *state) *Lab {
	l := &Lab{cfg: cfg, st: st, procs: map[string]*Process{}}
	for i := 1; i <= cfg.Nodes; i++ {
		l.Nodes = append(l.Nodes, Node{
			Name: NodeName(i), Namespace: nsName(cfg.Prefix, NodeName(i)),
			IPv4: NodeAddr(i), IPv6: NodeAddrV6(i), MAC: labMAC(NodeAddr(i)),
		})
	}
	return l
}

// Up removes the leftovers of an earlier lab in cfg.StateDir or with
// cfg.Prefix, then builds the topology, starts etcd, kube-apiserver, FRR and
// the node backends, and waits until the API server and FRR answer. On
// error everything created is removed again. ctx bounds only the start: the
// lab's processes outlive it (stop them with [Lab.Down]).
func Up(ctx context.Context, cfg Config) (_ *Lab, err error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	if err := Cleanup(cfg.StateDir, cfg.Prefix); err != nil {
		return nil, fmt.Errorf("lab up: clean leftovers: %w", err)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("lab up: %w", err)
	}
	// The previous lab's logs stay after Down for a post-mortem; a new lab
	// starts its own.
	oldLogs, _ := filepath.Glob(filepath.Join(cfg.StateDir, "*.log"))
	for _, f := range oldLogs {
		if err := os.Remove(f); err != nil {
			return nil, fmt.Errorf("lab up: remove the previous lab's log: %w", err)
		}
	}
	// The host-wide ARP/NDP tables must hold every member's entries for
	// every other member (a full memberlist mesh), see neigh.go.
	neigh, err := ensureNeighbourLimits(cfg.Nodes)
	if err != nil {
		return nil, fmt.Errorf("lab up: %w", err)
	}
	l := newLab(cfg, &state{Config: cfg})
	l.neigh = neigh
	if err := l.st.save(); err != nil {
		return nil, fmt.Errorf("lab up: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, l.Down())
		}
	}()
	assets, err := l.assetsDir()
	if err != nil {
		return nil, fmt.Errorf("lab up: %w", err)
	}
	// Independent preparations in parallel: key material, the helper binary
	// and the network topology.
	var helper string
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		var err error
		l.pki, err = genPKI(cfg.StateDir)
		return err
	})
	g.Go(func() error {
		var err error
		helper, err = l.helperBinary(gctx)
		return err
	})
	g.Go(func() error { return l.buildTopology(gctx) })
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("lab up: %w", err)
	}
	g, gctx = errgroup.WithContext(ctx)
	g.Go(func() error { return l.startAPIServer(gctx, assets) })
	g.Go(func() error { return l.startFRR(gctx) })
	g.Go(func() error { return l.startBackends(gctx, helper) })
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("lab up: %w", err)
	}
	if cfg.LoopbackProxy {
		if err := l.startProxy(ctx, helper); err != nil {
			return nil, fmt.Errorf("lab up: %w", err)
		}
	}
	return l, nil
}

// Open returns the lab recorded in stateDir by an earlier [Up] (possibly of
// another program), for inspection or to add processes. Processes it did
// not start itself have a nil [Process.Done].
func Open(stateDir string) (*Lab, error) {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, err
	}
	st, err := readState(abs)
	if err != nil {
		return nil, fmt.Errorf("open lab: %w", err)
	}
	l := newLab(st.Config, st)
	if l.pki, err = loadPKI(abs); err != nil {
		return nil, fmt.Errorf("open lab: %w", err)
	}
	for _, r := range st.Processes {
		l.procs[r.Name] = &Process{Name: r.Name, Namespace: r.Namespace, PID: r.PID, Log: r.Log, startTime: r.StartTime}
	}
	return l, nil
}

// Down stops every lab process, deletes the namespaces and FRR directories
// and removes state.json (logs stay in StateDir).
func (l *Lab) Down() error {
	err := Cleanup(l.cfg.StateDir, l.cfg.Prefix)
	// Await the reapers of the processes this program started.
	l.mu.Lock()
	procs := l.procs
	l.procs = map[string]*Process{}
	l.mu.Unlock()
	for _, p := range procs {
		if p.done == nil {
			continue
		}
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			err = errors.Join(err, fmt.Errorf("lab down: %s (pid %d) did not exit", p.Name, p.PID))
		}
	}
	return err
}

// Cleanup removes a lab from its records in stateDir (if any) and by its
// prefix (if not empty): processes (process groups, SIGTERM then SIGKILL),
// every process left in a lab namespace, the namespaces, the FRR
// directories, state.json, etcd data and keys. It works after a crash and
// with no Lab value; removing nothing is not an error.
func Cleanup(stateDir, prefix string) error {
	var errs []error
	st, err := readState(stateDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		st = &state{}
	case err != nil:
		errs = append(errs, err)
		st = &state{}
	}
	if prefix == "" {
		prefix = st.Config.Prefix
	}
	// Recorded processes first, in reverse start order, concurrently enough
	// to stay fast: each gets its grace period.
	var wg sync.WaitGroup
	var emu sync.Mutex
	for _, p := range st.Processes {
		wg.Go(func() {
			if err := killGroup(p.PID, p.StartTime, 3*time.Second); err != nil {
				emu.Lock()
				errs = append(errs, fmt.Errorf("stop %s: %w", p.Name, err))
				emu.Unlock()
			}
		})
	}
	wg.Wait()
	nss := map[string]bool{}
	for _, n := range st.Namespaces {
		nss[n] = true
	}
	if prefix != "" {
		for _, n := range listNamespaces() {
			if isLabNamespace(prefix, n) {
				nss[n] = true
			}
		}
	}
	existing := map[string]bool{}
	for _, n := range listNamespaces() {
		existing[n] = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for n := range nss {
		if !existing[n] {
			continue
		}
		// Anything still running inside (a crashed run's children, a
		// human's shell) would keep the namespace's sockets alive.
		if err := killNamespacePIDs(ctx, n); err != nil {
			errs = append(errs, err)
		}
		if _, err := run(ctx, "", "ip", "netns", "del", n); err != nil {
			errs = append(errs, err)
		}
	}
	dirs := st.Dirs
	if prefix != "" {
		// FRR path spaces are named after the namespace they serve.
		for _, base := range []string{frrEtc, frrRun} {
			ents, _ := os.ReadDir(base)
			for _, e := range ents {
				if e.IsDir() && isLabNamespace(prefix, e.Name()) {
					dirs = append(dirs, filepath.Join(base, e.Name()))
				}
			}
		}
	}
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	if stateDir != "" {
		// Everything but the logs: data, keys, tokens and kubeconfigs
		// (the Pods' service account tokens and serving keys live under
		// pods/, Helm's cache and configuration under helm/, Prometheus's
		// token and TSDB under prometheus/).
		remove := []string{"etcd", pkiDir, "apiserver-certs", LabKubeconfigFile, HostKubeconfigFile, proxyPortFile, podsDir, "helm", prometheusDir}
		kubeconfigs, _ := filepath.Glob(filepath.Join(stateDir, "kubeconfig*"))
		for _, f := range kubeconfigs {
			remove = append(remove, filepath.Base(f))
		}
		for _, f := range remove {
			if err := os.RemoveAll(filepath.Join(stateDir, f)); err != nil {
				errs = append(errs, err)
			}
		}
		if err := removeState(stateDir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// labEvery is the interval of the lab's waits: each check costs a process
// (vtysh, kubectl) or a request, so they check every 100 ms, not at the
// growing 1 ms to 50 ms of internal/poll.
var labEvery = poll.Every(100 * time.Millisecond)

package bgp

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Fake is an in-memory Speaker for tests of the speaker core: it validates
// and stores the desired state like a real implementation (peers validated
// with ValidatePeers, paths validated and merged with MergePaths) and
// reports every peer as Established. Err, if set, is returned by the next
// SetPeers or SetPaths call instead of applying it.
type Fake struct {
	mu     sync.Mutex
	peers  []PeerConfig
	paths  []Path
	closed bool
	calls  int
	resets map[string]int
	// Err is returned (once) by the next SetPeers/SetPaths.
	Err error
}

var _ Speaker = (*Fake)(nil)

// SetPeers implements Speaker.
func (f *Fake) SetPeers(_ context.Context, peers []PeerConfig) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.pre(); err != nil {
		return err
	}
	if err := ValidatePeers(peers); err != nil {
		return err
	}
	f.peers = slices.Clone(peers)
	slices.SortFunc(f.peers, func(a, b PeerConfig) int { return strings.Compare(a.Name, b.Name) })
	return nil
}

// SetPaths implements Speaker as the gobgp speaker does: refused paths
// (an *InvalidPathsError) never block the others, and a refused prefix
// keeps its last good path.
func (f *Fake) SetPaths(_ context.Context, paths []Path) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.pre(); err != nil {
		return err
	}
	valid, refused := ValidatePaths(paths)
	if refused != nil {
		valid = KeepLastGood(valid, refused, f.paths)
	}
	f.paths, _ = MergePaths(valid)
	if refused != nil {
		return refused
	}
	return nil
}

func (f *Fake) pre() error {
	f.calls++
	if f.closed {
		return ErrClosed
	}
	if err := f.Err; err != nil {
		f.Err = nil
		return err
	}
	return nil
}

// ResetPeer implements Speaker: it counts the resets of an applied peer
// (see Resets).
func (f *Fake) ResetPeer(_ context.Context, name, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	if !slices.ContainsFunc(f.peers, func(p PeerConfig) bool { return p.Name == name }) {
		return fmt.Errorf("reset peer %q: not applied", name)
	}
	if f.resets == nil {
		f.resets = map[string]int{}
	}
	f.resets[name]++
	return nil
}

// Resets returns how often ResetPeer reset the peer called name.
func (f *Fake) Resets(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.resets[name]
}

// PeerStates implements Speaker: every peer Established, advertised = the
// number of paths it receives.
func (f *Fake) PeerStates() []PeerState {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]PeerState, 0, len(f.peers))
	for _, p := range f.peers {
		var n uint64
		for _, path := range f.paths {
			if path.SendsTo(p.Name) {
				n++
			}
		}
		out = append(out, PeerState{Name: p.Name, Peer: p.MetricLabel(), State: StateEstablished, EstablishedCount: 1, Advertised: n})
	}
	return out
}

// Close implements Speaker.
func (f *Fake) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

// Peers returns the applied peers, sorted by name.
func (f *Fake) Peers() []PeerConfig {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.peers)
}

// Paths returns the applied (merged) paths, sorted by prefix.
func (f *Fake) Paths() []Path {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.paths)
}

// Calls counts SetPeers and SetPaths calls.
func (f *Fake) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

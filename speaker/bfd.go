package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/herald-lb/herald/internal/announce"
	"github.com/herald-lb/herald/internal/bfd/bfdnet"
	"github.com/herald-lb/herald/internal/k8s/speaker"
)

// bfdSessions keeps a bfdnet.Manager's sessions equal to the node's
// announce.BFDSessions (speaker.BFDSessions) and forwards state changes,
// named by BGPPeer, to the glue.
type bfdSessions struct {
	m       *bfdnet.Manager
	changes chan speaker.BFDChange

	// mu serialises SetSessions and guards applied. It is held while the
	// Manager is called (Update waits for the session's goroutine), so
	// OnChange, which runs on that goroutine, must not take it: it reads
	// the peer names under namesMu, never held across a Manager call.
	mu      sync.Mutex
	applied map[netip.Addr]announce.BFDSession // by peer address

	namesMu sync.Mutex
	names   map[netip.Addr]string // BGPPeer name by peer address
}

var _ speaker.BFDSessions = (*bfdSessions)(nil)

// newBFDSessions opens a Manager in the speaker's (the node's) network
// namespace. Changes that the glue does not take at once are kept in a
// buffer; a full buffer drops the change and logs it (never blocks a
// session's goroutine).
func newBFDSessions(log *slog.Logger, reg prometheus.Registerer) (*bfdSessions, error) {
	b := &bfdSessions{changes: make(chan speaker.BFDChange, 256),
		applied: map[netip.Addr]announce.BFDSession{}, names: map[netip.Addr]string{}}
	m, err := bfdnet.New(log, reg, bfdnet.Options{OnChange: func(c bfdnet.Change) {
		b.namesMu.Lock()
		name := b.names[c.Key.Peer]
		b.namesMu.Unlock()
		select {
		case b.changes <- speaker.BFDChange{Peer: name, Address: c.Key.Peer, Transition: c.Transition, Time: c.Time}:
		default:
			log.Error("BFD state change dropped (glue busy)", "peer", c.Key.Peer, "from", c.From, "to", c.To)
		}
	}})
	if err != nil {
		return nil, err
	}
	b.m = m
	return b, nil
}

func bfdKey(s announce.BFDSession) bfdnet.Key {
	return bfdnet.Key{Peer: s.Address, Local: s.Local, Multihop: s.Multihop}
}

// SetSessions implements speaker.BFDSessions.
func (b *bfdSessions) SetSessions(sessions []announce.BFDSession) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	want := map[netip.Addr]announce.BFDSession{}
	for _, s := range sessions {
		want[s.Address] = s
	}
	var errs []error
	for addr, old := range b.applied {
		if n, ok := want[addr]; !ok || bfdKey(n) != bfdKey(old) || n.Peer != old.Peer {
			b.m.Remove(addr) // AdminDown to the peer, reported through OnChange
			delete(b.applied, addr)
		}
	}
	for addr, n := range want {
		old, ok := b.applied[addr]
		switch {
		case !ok:
			b.setName(addr, n.Peer) // before Add: the first change names the peer
			if _, err := b.m.Add(bfdKey(n), n.Params); err != nil {
				errs = append(errs, fmt.Errorf("BGPPeer %s: BFD profile %s: %w", n.Peer, n.Profile, err))
				continue
			}
			b.applied[addr] = n
		case old.Params != n.Params:
			s, found := b.m.Session(addr)
			if !found {
				continue
			}
			if err := s.Update(n.Params); err != nil {
				errs = append(errs, fmt.Errorf("BGPPeer %s: BFD profile %s: %w", n.Peer, n.Profile, err))
				continue
			}
			b.applied[addr] = n
		default:
			b.applied[addr] = n
		}
	}
	return errors.Join(errs...)
}

func (b *bfdSessions) setName(addr netip.Addr, name string) {
	b.namesMu.Lock()
	defer b.namesMu.Unlock()
	b.names[addr] = name
}

// Close removes every session (AdminDown to each peer).
func (b *bfdSessions) Close() error { return b.m.Close() }

package configload

import (
	"sync"

	"github.com/herald-lb/herald/internal/config"
)

// Outcome says what one Tracker.Update did.
type Outcome int

const (
	// Unchanged: the new snapshot is valid and equal to the one in force.
	Unchanged Outcome = iota
	// Changed: the new snapshot is valid, differs, and is now in force.
	Changed
	// Rejected: the configuration is invalid (or waits for a referenced
	// object); the previous valid snapshot, if any, stays in force.
	Rejected
)

func (o Outcome) String() string {
	switch o {
	case Unchanged:
		return "unchanged"
	case Changed:
		return "changed"
	}
	return "rejected"
}

// Tracker keeps the configuration in force: the last snapshot config.Build
// accepted. A rejected configuration never replaces it, so no Service loses
// or changes its IP because of a bad object. Safe for concurrent use.
type Tracker struct {
	opts config.Options
	// keepInForce: see NewTracker.
	keepInForce bool

	mu      sync.Mutex
	current *config.Snapshot
}

// NewTracker returns a Tracker that builds with opts (Herald's namespace, and
// for a speaker its node name). keepInForce matters only with
// opts.DropTransient: true (speakers) keeps an object that is in force when a
// transient error would leave it out (see Update); false (the controller,
// whose allocation depends on no object DropTransient leaves out) puts the
// rest of the configuration in force without it.
func NewTracker(opts config.Options, keepInForce bool) *Tracker {
	return &Tracker{opts: opts, keepInForce: keepInForce}
}

// Update builds r and returns the snapshot in force afterwards (nil when no
// configuration was ever valid), what happened, and the build error when
// rejected (a *config.ValidationError / *config.TransientError or several
// joined; test with config.IsTransient). Equal snapshots report Unchanged, so
// callers reprocess Services only on a semantic change (metallb#1606).
//
// With config.Options.DropTransient, a build that left objects out because
// of transient references (Snapshot.Dropped: a BGPPeer whose password Secret
// is missing) is put in force; with keepInForce (speakers) only if none of
// them is in force now: a transient error keeps a new object (or, at start-up, that
// object only) from taking effect but never removes one that is running,
// so a deleted Secret does not tear down an established session with the
// password it was set up with. Such an update returns Changed or Unchanged
// with the left-out objects' errors as its error, to be reported; one that
// would remove an object in force is Rejected (the snapshot in force
// stays).
func (t *Tracker) Update(r config.Resources) (*config.Snapshot, Outcome, error) {
	snap, err := config.Build(r, t.opts)
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		return t.current, Rejected, err
	}
	if dropErr := snap.DroppedError(); dropErr != nil {
		if t.keepInForce && dropsInForce(snap, t.current) {
			return t.current, Rejected, dropErr
		}
		if t.current != nil && t.current.Equal(snap) {
			t.current = snap // same content; keeps Dropped current
			return snap, Unchanged, dropErr
		}
		t.current = snap
		return snap, Changed, dropErr
	}
	if t.current != nil && t.current.Equal(snap) {
		return t.current, Unchanged, nil
	}
	t.current = snap
	return snap, Changed, nil
}

// dropsInForce reports whether snap left out an object that current has.
func dropsInForce(snap, current *config.Snapshot) bool {
	if current == nil {
		return false
	}
	for _, e := range snap.Dropped() {
		switch e.Kind {
		case config.KindBGPPeer:
			if _, ok := current.Peer(e.Name); ok {
				return true
			}
		case config.KindBGPAdvertisement:
			for _, ad := range current.BGPAdvertisements() {
				if ad.Name == e.Name {
					return true
				}
			}
		}
	}
	return false
}

// Current returns the snapshot in force, or nil before the first valid one.
func (t *Tracker) Current() *config.Snapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.current
}

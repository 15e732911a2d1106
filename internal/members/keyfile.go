package members

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watchFile calls set with the content of path each time it differs from
// the last content reported (initially initial), is non-empty and readable,
// until ctx ends.
//
// path is a file of a mounted Secret volume. The kubelet updates such a
// volume in place, atomically: it writes the new files into a fresh
// timestamped directory and renames the symlink "..data" next to them onto
// it ("secretkey" itself is a symlink through "..data"). A watch on the file
// would follow the old inode, so the directory is watched (every event in it
// triggers a re-read) and the file is re-read every poll as well, which also
// covers file systems without inotify and any event that was missed.
// Errors are logged; the watch goes on.
func watchFile(ctx context.Context, path string, initial []byte, poll time.Duration, log *slog.Logger, set func([]byte)) {
	last := initial
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w, err := fsnotify.NewWatcher(); err != nil {
		log.Warn("memberlist secret file: no file system notifications; polling", "path", path, "every", poll, "error", err)
	} else {
		defer func() { _ = w.Close() }()
		if err := w.Add(filepath.Dir(path)); err != nil {
			log.Warn("memberlist secret file: cannot watch its directory; polling", "path", path, "every", poll, "error", err)
		}
		events, errs = w.Events, w.Errors
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-events:
		case err := <-errs:
			log.Debug("memberlist secret file watch", "error", err)
		case <-tick.C:
		}
		b, err := os.ReadFile(path)
		switch {
		case err != nil:
			if !failing {
				log.Warn("memberlist secret file unreadable; keeping the current key", "path", path, "error", err)
			}
			failing = true
			continue
		case failing:
			log.Info("memberlist secret file readable again", "path", path)
			failing = false
		}
		if len(b) == 0 || bytes.Equal(b, last) {
			continue
		}
		last = b
		log.Info("memberlist secret file changed", "path", path, "key", SecretID(b))
		set(b)
	}
}

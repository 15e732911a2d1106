package members

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"strings"

	"github.com/herald-lb/herald/internal/logging"
)

// newStdLogger adapts memberlist's *log.Logger output ("[LEVEL] memberlist:
// message") to slog. [ERR] lines (e.g. packets that fail to decrypt because a
// peer uses another key) are logged at Warn; everything else at Debug, since
// memberlist's INFO/WARN lines are routine protocol chatter (suspicions,
// refutations, TCP fallbacks) that the metrics summarise.
func newStdLogger(l *slog.Logger) *log.Logger {
	return log.New(slogWriter{l}, "", 0)
}

type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	msg := string(bytes.TrimRight(p, "\n"))
	level := slog.LevelDebug
	if rest, ok := strings.CutPrefix(msg, "[ERR] "); ok {
		level, msg = slog.LevelWarn, rest
	} else if i := strings.Index(msg, "] "); strings.HasPrefix(msg, "[") && i > 0 {
		msg = msg[i+2:]
	}
	msg = strings.TrimPrefix(msg, "memberlist: ")
	w.l.Log(context.Background(), level, msg, logging.KeyLibrary, "hashicorp/memberlist")
	return len(p), nil
}

// Package logging builds Herald's one structured logger (log/slog) from the
// --log-level flag and routes the logs of client-go (klog) and
// controller-runtime (logr) through it, so every line a binary prints has the
// same format and keys. The level can change while the process runs
// ([NewLeveled], [LevelHandler] at [LevelPath], [HandleSignals]): turning
// debug logs on must not need a restart, which would move the layer 2
// addresses being debugged.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Levels accepted by --log-level, the same words MetalLB accepts.
const (
	LevelAll   = "all"
	LevelDebug = "debug"
	LevelInfo  = "info"
	LevelWarn  = "warn"
	LevelError = "error"
	LevelNone  = "none"
)

// ParseLevel maps a --log-level word (all, debug, info, warn, error, none;
// case-insensitive) to a slog level. "all" logs everything, including the
// verbose debug output of client libraries; "none" logs nothing. It returns an
// error naming the accepted words for anything else.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case LevelAll:
		return slog.Level(math.MinInt32), nil
	case LevelDebug:
		return slog.LevelDebug, nil
	case LevelInfo, "":
		return slog.LevelInfo, nil
	case LevelWarn, "warning":
		return slog.LevelWarn, nil
	case LevelError:
		return slog.LevelError, nil
	case LevelNone:
		return slog.Level(math.MaxInt32), nil
	}
	return 0, fmt.Errorf("log level %q: must be one of all, debug, info, warn, error, none", s)
}

// New returns a JSON logger writing to w at the given --log-level word, with
// [KeyComponent] set to component ("controller", "speaker") and the binary's
// other identity attributes (the speaker's [KeyNode]) added to every line.
// It also installs the logger as the sink of klog and controller-runtime,
// which have global loggers of their own, so their lines carry the same
// identity; call it once, early in main. See [KeyComponent] for the rule on
// identity keys.
func New(w io.Writer, level, component string, identity ...slog.Attr) (*slog.Logger, error) {
	l, _, err := NewLeveled(w, level, component, identity...)
	return l, err
}

// NewLeveled is [New] that also returns the logger's level, which the
// caller may change at run time (every line of the logger, klog and
// controller-runtime included, follows it): serve [LevelHandler] and call
// [HandleSignals] with it.
func NewLeveled(w io.Writer, level, component string, identity ...slog.Attr) (*slog.Logger, *slog.LevelVar, error) {
	lvl, err := ParseLevel(level)
	if err != nil {
		return nil, nil, err
	}
	v := new(slog.LevelVar)
	v.Set(lvl)
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: v})
	attrs := append([]slog.Attr{slog.String(KeyComponent, component)}, identity...)
	logger := slog.New(h.WithAttrs(attrs))
	klog.SetSlogLogger(logger)
	ctrl.SetLogger(logr.FromSlogHandler(logger.Handler()))
	return logger, v, nil
}

package gobgp

import (
	"context"
	"log/slog"
	"sync/atomic"

	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
)

// slogAdapter implements gobgp's log.Logger on top of *slog.Logger. gobgp's
// Fatal and Panic levels are logged at error level and never exit or panic:
// an embedded library must not kill the speaker (gobgp only uses Fatal for
// the gRPC listener, which Herald never enables).
type slogAdapter struct {
	log   *slog.Logger
	level atomic.Uint32 // gobgplog.LogLevel
	// onWarn, if set, sees every warning before it is logged (gobgp
	// reports some events, such as an exceeded prefix limit or a
	// NOTIFICATION sent or received, only in its log).
	onWarn func(msg string, f gobgplog.Fields)
	// onInfo, if set, sees every info message before it is logged
	// ("Peer Down" carries the reason a session left Established).
	onInfo func(msg string, f gobgplog.Fields)
	// onDebug, if set, sees every debug message gobgp builds ("failed to
	// connect" carries a session's connection error). gobgp builds its
	// guarded debug messages only while GetLevel says debug: wantDebug, if
	// set, asks for them although slog's debug level is off.
	onDebug   func(msg string, f gobgplog.Fields)
	wantDebug func() bool
}

func newSlogAdapter(l *slog.Logger) *slogAdapter {
	a := &slogAdapter{log: l}
	lvl := gobgplog.InfoLevel
	if l.Enabled(context.Background(), slog.LevelDebug) {
		lvl = gobgplog.DebugLevel
	}
	a.level.Store(uint32(lvl))
	return a
}

func (a *slogAdapter) emit(level slog.Level, msg string, fields gobgplog.Fields) {
	ctx := context.Background()
	if !a.log.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, len(fields))
	for k, v := range fields {
		attrs = append(attrs, slog.Any(k, v))
	}
	a.log.LogAttrs(ctx, level, msg, attrs...)
}

func (a *slogAdapter) Panic(msg string, f gobgplog.Fields) { a.emit(slog.LevelError, msg, f) }
func (a *slogAdapter) Fatal(msg string, f gobgplog.Fields) { a.emit(slog.LevelError, msg, f) }
func (a *slogAdapter) Error(msg string, f gobgplog.Fields) { a.emit(slog.LevelError, msg, f) }
func (a *slogAdapter) Warn(msg string, f gobgplog.Fields) {
	if a.onWarn != nil {
		a.onWarn(msg, f)
	}
	a.emit(slog.LevelWarn, msg, f)
}
func (a *slogAdapter) Info(msg string, f gobgplog.Fields) {
	if a.onInfo != nil {
		a.onInfo(msg, f)
	}
	a.emit(slog.LevelInfo, msg, f)
}
func (a *slogAdapter) Debug(msg string, f gobgplog.Fields) {
	if a.onDebug != nil {
		a.onDebug(msg, f)
	}
	a.emit(slog.LevelDebug, msg, f)
}

// SetLevel records gobgp's requested level; filtering is done by the slog handler.
func (a *slogAdapter) SetLevel(l gobgplog.LogLevel) { a.level.Store(uint32(l)) }

// GetLevel lets gobgp skip building debug fields when debug is off. It
// says debug also while wantDebug does (the speaker asks while a session
// is connecting, to see its connection errors): gobgp then builds
// its debug messages, which emit drops unless slog's debug level is on.
func (a *slogAdapter) GetLevel() gobgplog.LogLevel {
	l := gobgplog.LogLevel(a.level.Load())
	if l < gobgplog.DebugLevel && a.wantDebug != nil && a.wantDebug() {
		return gobgplog.DebugLevel
	}
	return l
}

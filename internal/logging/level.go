package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// LevelPath is where both binaries serve [LevelHandler] on their metrics
// server (behind the same authentication and authorization as /metrics when
// metrics are secure).
const LevelPath = "/debug/loglevel"

// ladder is the --log-level words from least to most verbose; SIGUSR1 and
// SIGUSR2 move along it.
var ladder = []string{LevelNone, LevelError, LevelWarn, LevelInfo, LevelDebug, LevelAll}

// LevelName returns the --log-level word for l: the word whose level is the
// highest one not above l ("all" below debug, "none" above error).
func LevelName(l slog.Level) string {
	switch {
	case l >= slog.Level(math.MaxInt32):
		return LevelNone
	case l >= slog.LevelError:
		return LevelError
	case l >= slog.LevelWarn:
		return LevelWarn
	case l >= slog.LevelInfo:
		return LevelInfo
	case l >= slog.LevelDebug:
		return LevelDebug
	}
	return LevelAll
}

// setLevel sets v to the level of word, logs the change at warn level and
// returns the new word. The line is written while the more verbose of the
// old and new level is in force (before lowering verbosity, after raising
// it), so it shows unless both levels are above warn (error to none).
func setLevel(v *slog.LevelVar, log *slog.Logger, word, by string) (string, error) {
	l, err := ParseLevel(word)
	if err != nil {
		return "", err
	}
	from, to := LevelName(v.Level()), LevelName(l)
	logChange := func() { log.Warn("log level changed", "from", from, "to", to, "by", by) }
	if l > v.Level() {
		logChange()
		v.Set(l)
	} else {
		v.Set(l)
		logChange()
	}
	return to, nil
}

// LevelHandler serves the logger's level at run time, so that debug logs
// can be turned on without restarting the process (a restart moves the
// layer 2 addresses being debugged):
//
//   - GET returns the current --log-level word and a newline.
//   - PUT sets it: the body (or the query parameter level) is a word
//     ParseLevel accepts (all, debug, info, warn, error, none). It answers
//     200 with the new word, 400 naming the accepted words for anything
//     else. Every change is logged at warn level with the old and new level.
//   - Any other method gets 405.
//
// The level is not persisted: a restarted process starts at --log-level.
func LevelHandler(v *slog.LevelVar, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		switch r.Method {
		case http.MethodGet:
			fmt.Fprintln(w, LevelName(v.Level()))
		case http.MethodPut:
			word := r.URL.Query().Get("level")
			if word == "" {
				body, err := io.ReadAll(io.LimitReader(r.Body, 64))
				if err != nil {
					http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
					return
				}
				word = strings.TrimSpace(string(body))
			}
			if word == "" {
				http.Error(w, "no level: PUT one of all, debug, info, warn, error, none as the body or ?level=", http.StatusBadRequest)
				return
			}
			to, err := setLevel(v, log, word, "PUT "+LevelPath+" from "+r.RemoteAddr)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			fmt.Fprintln(w, to)
		default:
			w.Header().Set("Allow", "GET, PUT")
			http.Error(w, "method not allowed: GET or PUT", http.StatusMethodNotAllowed)
		}
	})
}

// HandleSignals changes v on signals until ctx ends: SIGUSR1 makes the logs
// one step more verbose (none, error, warn, info, debug, all), SIGUSR2 one
// step less; each change is logged at warn level. It returns at once; the
// signals are handled on a goroutine of its own.
func HandleSignals(ctx context.Context, v *slog.LevelVar, log *slog.Logger) {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		defer signal.Stop(ch)
		for {
			select {
			case <-ctx.Done():
				return
			case sig := <-ch:
				step := 1
				if sig == syscall.SIGUSR2 {
					step = -1
				}
				_, _ = setLevel(v, log, Step(LevelName(v.Level()), step), sig.String())
			}
		}
	}()
}

// Step returns the --log-level word step places more verbose than word
// (negative: less verbose), clamped to none and all; an unknown word is
// read as info.
func Step(word string, step int) string {
	i := 3 // info
	for j, w := range ladder {
		if w == word {
			i = j
		}
	}
	return ladder[max(0, min(len(ladder)-1, i+step))]
}

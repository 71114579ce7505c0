package main

/*
#include <stdlib.h>
#include "cgo.h"
*/
import "C"

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"unsafe"

	goredis "github.com/redis/go-redis/v9"
)

// logSink is where kvready_set_log sends the library's log lines.
type logSink struct {
	fn   C.kvready_log_fn
	user unsafe.Pointer
}

// logTo is the embedder's sink; nil: stderr.
var logTo atomic.Pointer[logSink]

// The library's Go code logs through slog's default logger (the engine's
// Config.Logger is nil, and the log package forwards to it once it is set):
// make that the handler that honours kvready_set_log. go-redis writes its
// own lines (a lost connection, a pool that could not dial) straight to
// stderr: send them the same way, at WARN.
func init() {
	slog.SetDefault(slog.New(&lineHandler{}))
	goredis.SetLogger(redisLog{})
}

// redisLog is go-redis's logger, through slog's default one.
type redisLog struct{}

func (redisLog) Printf(ctx context.Context, format string, v ...any) {
	slog.Default().WarnContext(ctx, "redis: "+fmt.Sprintf(format, v...))
}

//export kvready_set_log
func kvready_set_log(fn C.kvready_log_fn, user unsafe.Pointer) (st C.int) {
	defer guard(0, &st)
	if fn == nil {
		logTo.Store(nil)
	} else {
		logTo.Store(&logSink{fn: fn, user: user})
	}
	return C.KVREADY_OK
}

// lineHandler formats a record as one line, "message key=value ..." (slog's
// text quoting), and hands it to the embedder's sink, or writes it to stderr
// as Go's default logger would (time, level, line) when there is none or the
// callbacks were detached.
type lineHandler struct {
	ops []func(slog.Handler) slog.Handler // WithAttrs and WithGroup, in order
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &lineHandler{ops: append(h.ops[:len(h.ops):len(h.ops)], func(x slog.Handler) slog.Handler { return x.WithAttrs(as) })}
}

func (h *lineHandler) WithGroup(name string) slog.Handler {
	return &lineHandler{ops: append(h.ops[:len(h.ops):len(h.ops)], func(x slog.Handler) slog.Handler { return x.WithGroup(name) })}
}

func (h *lineHandler) Handle(ctx context.Context, r slog.Record) error {
	var buf bytes.Buffer
	var text slog.Handler = slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey || a.Key == slog.MessageKey) {
				return slog.Attr{}
			}
			return a
		},
	})
	for _, op := range h.ops {
		text = op(text)
	}
	if err := text.Handle(ctx, r); err != nil {
		return err
	}
	line := r.Message
	if attrs := strings.TrimSpace(buf.String()); attrs != "" {
		line += " " + attrs
	}
	sink := logTo.Load()
	if sink == nil || detached.Load() {
		_, err := fmt.Fprintf(os.Stderr, "%s %s %s\n", r.Time.Format("2006/01/02 15:04:05"), r.Level, line)
		return err
	}
	msg := C.CString(line)
	defer C.free(unsafe.Pointer(msg))
	C.kv_log(sink.fn, sink.user, C.int32_t(r.Level), msg, C.size_t(len(line)))
	return nil
}

// Package filewatch keeps the parsed contents of a configuration file (a
// token file, a policy) in force and reloads them when the file changes,
// for servers that must pick up a new version without a restart and must
// never lose the one in force to a bad edit.
package filewatch

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// File holds the value parsed from a file, and reloads it when the file's
// identity, size or modification time changes. A new version that does
// not parse, or a file gone, is logged and the value in force is kept.
type File[T any] struct {
	path   string
	what   string // the kind of file, for logs: "token file", "policy file"
	load   func(path string) (*T, error)
	logger *slog.Logger
	cur    atomic.Pointer[T]

	mu   sync.Mutex // serialises reloads
	last os.FileInfo
}

// New loads the file at path with load; a file that does not load is an
// error. what names the kind of file in logs.
func New[T any](path, what string, load func(path string) (*T, error), logger *slog.Logger) (*File[T], error) {
	f := &File[T]{path: path, what: what, load: load, logger: logger}
	fi, _ := os.Stat(path)
	v, err := load(path)
	if err != nil {
		return nil, err
	}
	f.cur.Store(v)
	f.last = fi
	return f, nil
}

// Current returns the value in force.
func (f *File[T]) Current() *T { return f.cur.Load() }

// Run reloads the file whenever it changes, checking every interval until
// ctx is done.
func (f *File[T]) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f.ReloadIfChanged()
		}
	}
}

// ReloadIfChanged reloads the file if it changed since it was last read,
// and reports whether a new value took effect.
func (f *File[T]) ReloadIfChanged() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	fi, err := os.Stat(f.path)
	if err != nil {
		if f.last != nil {
			f.logger.Error(f.what+" unreadable; keeping the one in force", "file", f.path, "error", err)
		}
		f.last = nil
		return false
	}
	if f.last != nil && os.SameFile(fi, f.last) && fi.Size() == f.last.Size() && fi.ModTime().Equal(f.last.ModTime()) {
		return false
	}
	f.last = fi
	v, err := f.load(f.path)
	if err != nil {
		f.logger.Error("invalid "+f.what+"; keeping the one in force", "file", f.path, "error", err)
		return false
	}
	f.cur.Store(v)
	f.logger.Info(f.what+" reloaded", "file", f.path)
	return true
}

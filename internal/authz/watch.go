package authz

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultReloadInterval is how often a Watcher looks at its file.
const DefaultReloadInterval = 2 * time.Second

// Watcher holds the policy of a file and reloads it when the file
// changes. A new version that does not parse is logged and ignored: the
// policy in force stays until a valid one replaces it.
type Watcher struct {
	path   string
	logger *slog.Logger
	cur    atomic.Pointer[Policy]

	mu   sync.Mutex // serialises reloads
	last os.FileInfo
}

// NewWatcher loads the policy at path; an invalid file is an error.
func NewWatcher(path string, logger *slog.Logger) (*Watcher, error) {
	w := &Watcher{path: path, logger: logger}
	fi, _ := os.Stat(path)
	p, err := Load(path)
	if err != nil {
		return nil, err
	}
	w.cur.Store(p)
	w.last = fi
	return w, nil
}

// Policy returns the policy in force.
func (w *Watcher) Policy() *Policy { return w.cur.Load() }

// Run reloads the file whenever its size, modification time or identity
// changes, checking every interval until ctx is done.
func (w *Watcher) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.ReloadIfChanged()
		}
	}
}

// ReloadIfChanged reloads the file if it changed since it was last read,
// and reports whether a new policy took effect.
func (w *Watcher) ReloadIfChanged() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	fi, err := os.Stat(w.path)
	if err != nil {
		if w.last != nil {
			w.logger.Error("policy file unreadable; keeping the policy in force", "policy", w.path, "error", err)
		}
		w.last = nil
		return false
	}
	if w.last != nil && os.SameFile(fi, w.last) && fi.Size() == w.last.Size() && fi.ModTime().Equal(w.last.ModTime()) {
		return false
	}
	w.last = fi
	p, err := Load(w.path)
	if err != nil {
		w.logger.Error("invalid policy file; keeping the policy in force", "policy", w.path, "error", err)
		return false
	}
	w.cur.Store(p)
	w.logger.Info("policy reloaded", "policy", w.path, "grants", len(p.grants))
	return true
}

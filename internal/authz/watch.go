package authz

import (
	"log/slog"
	"time"

	"github.com/zarrgate/zarrgate/internal/filewatch"
)

// DefaultReloadInterval is how often a Watcher looks at its file.
const DefaultReloadInterval = 2 * time.Second

// Watcher holds the policy of a file and reloads it when the file
// changes. A new version that does not parse is logged and ignored: the
// policy in force stays until a valid one replaces it.
type Watcher struct{ *filewatch.File[Policy] }

// NewWatcher loads the policy at path; an invalid file is an error.
func NewWatcher(path string, logger *slog.Logger) (*Watcher, error) {
	f, err := filewatch.New(path, "policy file", Load, logger)
	if err != nil {
		return nil, err
	}
	return &Watcher{f}, nil
}

// Policy returns the policy in force.
func (w *Watcher) Policy() *Policy { return w.Current() }

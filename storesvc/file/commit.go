package file

import (
	"errors"
	"fmt"
	"os"

	"github.com/zarrgate/zarrgate/errs"
)

// Group commit of the renames into one directory. Every write renames its
// temporary file into place under the directory's flock (so that a
// conditional write's check and its rename are one step for every writer,
// in any process). Taken once per write, the lock is handed from writer to
// writer, and on a VM each hand-off waits for the next writer's vCPU to
// wake: a whole-array write spent most of its flush workers' time queued on
// it (docs/benchmarks.md, issue 20 target 4). So writers in this process
// queue their renames, and whichever finds no batch running takes the lock
// once and makes every queued rename in turn, each with its own checks, as
// each would have under a lock of its own; the others wait for theirs.
// Renames queued during a batch make the next ones, on a goroutine of
// their own (one per directory at a time), so that a writer that leads a
// batch waits for that batch only.

// commitBatchMax bounds the renames made under one hold of the lock, so
// that writers in other processes get their turn.
const commitBatchMax = 64

// commitReq is one writer's step under the lock: d is the directory its
// temporary file is in, fn its check and rename.
type commitReq struct {
	key  string
	d    *os.Root
	fn   func() error
	err  error
	done chan struct{}
}

// dirCommitter queues the renames into one directory while a batch runs.
type dirCommitter struct {
	queue []*commitReq
}

// testHookCommitBatch, when set by a test, runs with the lock held before
// each batch's renames, with the batch's size.
var testHookCommitBatch func(dir string, n int)

// withHeldDirLock runs fn holding an exclusive flock on dir, opened as d
// (where the caller's temporary file is), possibly on another writer's
// goroutine in a batch with theirs (above). If dir is no longer d (an
// erase of the whole prefix removed it, and the temporary file with it),
// the write cannot land: Aborted, which the caller may retry.
func (s *Store) withHeldDirLock(key, dir string, d *os.Root, fn func() error) error {
	r := &commitReq{key: key, d: d, fn: fn, done: make(chan struct{})}
	s.mu.Lock()
	c := s.committers[dir]
	lead := c == nil
	if lead {
		c = &dirCommitter{}
		s.committers[dir] = c
	}
	c.queue = append(c.queue, r)
	s.mu.Unlock()
	if lead {
		s.runCommits(dir, c)
	}
	<-r.done
	return r.err
}

// runCommits makes a batch of the queued renames, and hands those queued
// since to a goroutine of its own: the writer that leads waits for its own
// batch only, however many keep coming.
func (s *Store) runCommits(dir string, c *dirCommitter) {
	s.mu.Lock()
	n := min(len(c.queue), commitBatchMax)
	batch := c.queue[:n:n]
	c.queue = c.queue[n:]
	s.mu.Unlock()
	s.commitBatch(dir, batch)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(c.queue) == 0 {
		delete(s.committers, dir)
		return
	}
	go s.runCommits(dir, c)
}

// commitBatch locks dir as it is now (withDirLock), and runs each
// request's fn if the request's directory is that one.
func (s *Store) commitBatch(dir string, batch []*commitReq) {
	defer func() {
		for _, r := range batch {
			close(r.done)
		}
	}()
	ran := false
	err := s.withDirLock(batch[0].key, dir, func() error {
		ran = true
		held, err := s.root.Stat(dir)
		if err != nil {
			return mapErr("lock", batch[0].key, err)
		}
		if testHookCommitBatch != nil {
			testHookCommitBatch(dir, len(batch))
		}
		for _, r := range batch {
			mine, err := r.d.Stat(".")
			if err != nil || !os.SameFile(mine, held) {
				r.err = removedDuringWrite(r.key)
				continue
			}
			r.err = runCommit(r)
		}
		return nil
	})
	if err == nil {
		return
	}
	for _, r := range batch {
		if !ran && errors.Is(err, errs.NotFound) {
			r.err = removedDuringWrite(r.key) // the directory is gone
		} else {
			r.err = err
		}
	}
}

func removedDuringWrite(key string) error {
	return errs.New(errs.Aborted, "set %q: the key's directory was removed during the write", key)
}

// runCommit runs r.fn, a panic in it being r's error rather than the
// batch's end.
func runCommit(r *commitReq) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = errs.New(errs.Internal, "set %q: %v", r.key, fmt.Sprint(p))
		}
	}()
	return r.fn()
}

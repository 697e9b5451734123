// cp's record of what earlier copies wrote, so that a copy resumes
// without reading what is unchanged.

package main

import (
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/zarrgate/zarrgate/errs"
)

// copyRecord remembers, for each destination key a copy wrote or found
// equal, the generation of the source value and the generation of the
// destination value that was then a copy of it.
//
// It is kept on the copying machine, one file per SRC and DST under the
// user cache directory (or at --record), not in the destination:
//   - Any extra key in a destination store is seen by its readers. Zarr
//     groups are listed to find their members, and zarr-python 3 warns
//     "Object at .x is not recognized as a component of a Zarr hierarchy"
//     for every name it cannot open; v2 readers and `zarrgate ls` would list
//     it, and a later copy of the backup would carry it along.
//   - A sidecar file next to the destination exists only for a local
//     directory or zip file; S3 prefixes and zarrgate servers have no
//     "next to".
//   - The record is only a cache. A key whose generations do not both match
//     is compared by SHA-256, so a missing, stale or foreign record (another
//     machine, a container without its cache, a destination restored from
//     elsewhere) costs reading both sides, never a wrong skip. Keeping it
//     current (--record on a persistent volume) saves that reading.
//
// Entries for keys under the copied prefix are replaced by what this run
// found; those outside it are kept.
type copyRecord struct {
	path, src, dst string
	scope          string // keys under this prefix are rewritten by this run

	mu  sync.Mutex
	old map[string]recGens // as loaded: what earlier runs copied
	now map[string]recGens // what this run copied or found equal
}

type recGens struct{ src, dst string }

// recordHeader is the first line of a record file.
type recordHeader struct {
	Version int    `json:"zarrgate_cp_record"`
	Src     string `json:"src"`
	Dst     string `json:"dst"`
}

// canonicalLocation names a store the same way however the command line
// spelled it, so that one SRC and DST pair finds its record.
func canonicalLocation(loc string) string {
	if strings.Contains(loc, "://") {
		return strings.TrimSuffix(loc, "/")
	}
	if abs, err := filepath.Abs(loc); err == nil {
		return "file://" + abs
	}
	return loc
}

// openRecord loads the record for src and dst, or starts an empty one. It
// returns nil when there is nowhere to keep one (then every key of equal
// size is compared by content) or when a side is in memory (nothing of it
// outlives the command).
func openRecord(path, src, dst, scope string, warn io.Writer) *copyRecord {
	src, dst = canonicalLocation(src), canonicalLocation(dst)
	if strings.HasPrefix(src, "memory:") || strings.HasPrefix(dst, "memory:") {
		return nil
	}
	if path == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			fmt.Fprintf(warn, "zarrgate cp: warning: no cache directory (%v): keys of equal size are compared by SHA-256 (--record FILE keeps a record)\n", err)
			return nil
		}
		sum := sha256.Sum256([]byte(src + "\n" + dst))
		path = filepath.Join(dir, "zarrgate", "cp", hex.EncodeToString(sum[:16])+".jsonl.gz")
	}
	r := &copyRecord{path: path, src: src, dst: dst, scope: scope, old: map[string]recGens{}, now: map[string]recGens{}}
	if err := r.load(); err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(warn, "zarrgate cp: warning: ignoring the copy record %s: %v\n", path, err)
		clear(r.old)
	}
	return r
}

func (r *copyRecord) load() error {
	f, err := os.Open(r.path)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	if !sc.Scan() {
		return errors.Join(sc.Err(), errors.New("empty"))
	}
	var h recordHeader
	if err := json.Unmarshal(sc.Bytes(), &h); err != nil {
		return err
	}
	if h.Version != 1 || h.Src != r.src || h.Dst != r.dst {
		return fmt.Errorf("it records a copy from %s to %s (version %d)", h.Src, h.Dst, h.Version)
	}
	for sc.Scan() {
		var e [3]string
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return err
		}
		r.old[e[0]] = recGens{e[1], e[2]}
	}
	return sc.Err()
}

// matches reports whether the record says the destination value with
// generation dstGen is a copy of the source value with generation srcGen.
func (r *copyRecord) matches(key, srcGen, dstGen string) bool {
	if r == nil || srcGen == "" || dstGen == "" {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	g, ok := r.old[key]
	return ok && g == recGens{srcGen, dstGen}
}

func (r *copyRecord) put(key, srcGen, dstGen string) {
	if r == nil || srcGen == "" || dstGen == "" {
		return
	}
	r.mu.Lock()
	r.now[key] = recGens{srcGen, dstGen}
	r.mu.Unlock()
}

// saveEvery saves the record every d until the returned function is
// called.
func (r *copyRecord) saveEvery(d time.Duration) (stop func()) {
	if r == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				r.save() // a failure shows in the final save
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// save writes the record atomically (a temporary file renamed over it), so
// that a crash leaves the old record or the new one.
func (r *copyRecord) save() error {
	r.mu.Lock()
	entries := make(map[string]recGens, len(r.old)+len(r.now))
	for k, g := range r.old {
		if !strings.HasPrefix(k, r.scope) {
			entries[k] = g
		}
	}
	for k, g := range r.now {
		entries[k] = g
	}
	r.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(r.path), 0o700); err != nil {
		return errs.Wrap(errs.Internal, err, "save the copy record")
	}
	f, err := os.CreateTemp(filepath.Dir(r.path), filepath.Base(r.path)+".tmp-*")
	if err != nil {
		return errs.Wrap(errs.Internal, err, "save the copy record")
	}
	defer os.Remove(f.Name()) // after the rename: nothing left to remove
	bw := bufio.NewWriter(f)
	zw := gzip.NewWriter(bw)
	enc := json.NewEncoder(zw)
	enc.Encode(recordHeader{Version: 1, Src: r.src, Dst: r.dst})
	for _, k := range slices.Sorted(maps.Keys(entries)) {
		g := entries[k]
		enc.Encode([3]string{k, g.src, g.dst})
	}
	err = errors.Join(zw.Close(), bw.Flush(), f.Sync(), f.Close())
	if err == nil {
		err = os.Rename(f.Name(), r.path)
	}
	if err != nil {
		return errs.Wrap(errs.Internal, err, "save the copy record %s", r.path)
	}
	return nil
}

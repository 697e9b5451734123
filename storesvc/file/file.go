// Package file is the Zarr file system store (store-filesystem.rst): key
// "a/b/c" is the file a/b/c below the root directory.
//
// Guarantees:
//   - Every path is resolved through an os.Root, so no key, symlink or race
//     makes the store read or write outside its root.
//   - Writes are atomic: the value goes to a temporary file in the target's
//     directory and is renamed over the target. Readers see the old value or
//     the new one, never a torn one; readers holding the old file open keep
//     reading the old value.
//   - Durability (Durability): by default (DurabilityFsync) the temporary
//     file is fsynced before the rename and the directory after it, before
//     the call returns, so a write that returned survives a crash of the
//     machine, and a crash leaves the old value or the new one. The
//     directory fsyncs are grouped: concurrent writers in one directory
//     share one fsync that starts after all their renames, taken outside
//     the directory lock. DurabilityNone skips both fsyncs, as zarr-python
//     and most Zarr libraries do: the rename is still atomic for readers
//     and a killed process loses nothing that returned, but after a crash
//     of the machine (power, kernel) recent writes may be lost and a
//     recently written value may be empty or torn.
//   - Conditional writes: the condition check and the rename run under an
//     exclusive flock on the target's directory, which every writer takes, so
//     they are one atomic step also between processes sharing the directory.
//   - Generations are inode, modification time (set to the write's own
//     nanosecond clock) and size, so every write yields a new one.
//   - Erase removes directories left empty, up to the root.
//
// Temporary files are named ".zarrgate-tmp-*" (storesvc.ReservedPrefix) and
// live next to their target. No key may name one (a segment starting so is
// refused with InvalidArgument, by the portable layer and here), and
// listings skip them, so no call can read, patch or erase a write in
// progress. A writer holds an exclusive flock on its temporary file until
// the file is renamed into place or removed; CleanTemps removes the ones
// nobody holds, those of writers that were killed.
package file

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/storesvc"
)

const tmpPrefix = storesvc.ReservedPrefix

// StaleTempAge is how long a temporary file must have gone unmodified
// before the serving commands' CleanTemps takes it for a dead writer's:
// none. The flock tells a live writer's file from a dead one's, and a
// writer that finds its file gone (or locked) between its creation and its
// lock starts again (createTemp), so an unlocked file is dead at any age.
// A writer of an older zarrgate sharing the directory, which takes no
// lock, may see its write fail once (it is retried).
const StaleTempAge = 0

// Store is a directory-backed store. It is safe for concurrent use, also by
// several processes sharing the directory.
type Store struct {
	root       *os.Root
	dir        string
	durability atomic.Int32 // a Durability
	// beneath opens files for reading in one system call where it can
	// (open_linux.go).
	beneath beneath

	mu      sync.Mutex
	syncers map[string]*dirSyncer // by directory, while someone waits on it
	// committers: by directory, while a batch of renames runs (commit.go)
	committers map[string]*dirCommitter

	fileSyncs, dirSyncs atomic.Uint64
}

// Durability is what a write that returned survives.
type Durability int32

const (
	// DurabilityFsync (the default): a write that returned survives a
	// crash of the machine. The value's file is fsynced before its rename
	// and the directory after it; concurrent writers in one directory
	// share the directory's fsync.
	DurabilityFsync Durability = iota
	// DurabilityNone: no fsync. The rename is still atomic (readers and a
	// killed process never see a torn value), but after a crash of the
	// machine recent writes may be lost, and a recently written value may
	// be empty or torn. zarr-python's local store behaves so.
	DurabilityNone
)

// ParseDurability parses "fsync" or "none".
func ParseDurability(s string) (Durability, error) {
	switch s {
	case "fsync", "":
		return DurabilityFsync, nil
	case "none":
		return DurabilityNone, nil
	}
	return 0, errs.New(errs.InvalidArgument, "durability %q: want fsync or none", s)
}

func (d Durability) String() string {
	if d == DurabilityNone {
		return "none"
	}
	return "fsync"
}

// SetDurability sets what later writes guarantee (DurabilityFsync unless
// set).
func (s *Store) SetDurability(d Durability) { s.durability.Store(int32(d)) }

// Durability is what writes guarantee.
func (s *Store) Durability() Durability { return Durability(s.durability.Load()) }

// Syncs counts the fsyncs the store has made: of values' files, and of
// directories (one per group of concurrent renames).
func (s *Store) Syncs() (files, dirs uint64) { return s.fileSyncs.Load(), s.dirSyncs.Load() }

var (
	_ storesvc.Store         = (*Store)(nil)
	_ storesvc.PartialWriter = (*Store)(nil)
	_ storesvc.DirLister     = (*Store)(nil)
	_ storesvc.PrefixEraser  = (*Store)(nil)
)

// New opens the store rooted at dir, creating the directory if needed.
func New(dir string) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, errs.Wrap(errs.FailedPrecondition, err, "file store: create root %s", abs)
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		return nil, errs.Wrap(errs.FailedPrecondition, err, "file store: open root %s", abs)
	}
	return &Store{root: root, dir: abs, syncers: make(map[string]*dirSyncer), committers: make(map[string]*dirCommitter)}, nil
}

// Dir is the store's root directory.
func (s *Store) Dir() string { return s.dir }

// LocalReads says reading the store runs on this process's processors:
// they copy from the page cache, or wait on the disk (storesvc.LocalReads).
func (s *Store) LocalReads() bool { return true }

// Capabilities implements storesvc.Store: everything.
func (s *Store) Capabilities() storesvc.Capabilities {
	return storesvc.Capabilities{Readable: true, Writable: true, Listable: true, PartialWrites: true, ConditionalWrites: true, Erasable: true}
}

// Close implements storesvc.Store.
func (s *Store) Close() error {
	s.closeBeneath()
	return s.root.Close()
}

// keyPath maps a validated key to its path relative to the root, and the
// path of its directory ("." for top-level keys).
func keyPath(key string) (rel, dir string) {
	rel = filepath.FromSlash(key)
	return rel, filepath.Dir(rel)
}

// mapErr gives an os error a code, naming the key.
func mapErr(op, key string, err error) error {
	switch {
	case err == nil:
		return nil
	case errs.CodeOf(err) != errs.CodeUnknown:
		return err // coded already (a value reader's error, a check, a cancellation)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return errs.New(errs.InvalidArgument, "%s %q: a path segment is too long for the file system", op, key)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return errs.New(errs.NotFound, "%s: key %q not found", op, key)
	case errors.Is(err, fs.ErrPermission):
		return errs.Wrap(errs.PermissionDenied, err, "%s %q", op, key)
	case isEscape(err):
		return errs.New(errs.PermissionDenied, "%s %q: path resolves outside the store root (symlink)", op, key)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	return errs.Wrap(errs.Internal, err, "%s %q", op, key)
}

// isEscape reports an os.Root refusal to follow a path out of the root.
func isEscape(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && strings.Contains(pe.Err.Error(), "escapes")
}

// generation identifies one write of a file: every write renames a new
// inode into place, with its mtime set to the writer's nanosecond clock.
// It is "%x.%x.%x" of the inode, the mtime and the size, built without
// fmt: every Get makes one (a tenth of a small read's store time with
// fmt).
func generation(fi fs.FileInfo) string {
	b := make([]byte, 0, 48)
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		b = strconv.AppendUint(b, uint64(st.Ino), 16)
		b = append(b, '.')
	}
	b = strconv.AppendInt(b, fi.ModTime().UnixNano(), 16)
	b = append(b, '.')
	b = strconv.AppendInt(b, fi.Size(), 16)
	return string(b)
}

// Get implements storesvc.Store.
func (s *Store) Get(_ context.Context, key string, r storesvc.ByteRange) (*storesvc.Object, error) {
	if err := checkReserved(key); err != nil {
		return nil, err
	}
	rel, _ := keyPath(key)
	f, err := s.openRead(rel)
	if err != nil {
		return nil, mapErr("get", key, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, mapErr("get", key, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, errs.New(errs.NotFound, "get: key %q not found (it is a prefix of other keys)", key)
	}
	off, n, err := r.Resolve(fi.Size())
	if err != nil {
		f.Close()
		return nil, errs.New(errs.OutOfRange, "get %q: %v", key, err)
	}
	return &storesvc.Object{
		ReadCloser: fileObject{io.NewSectionReader(f, off, n), f, off},
		Generation: generation(fi), Size: fi.Size(), Offset: off, Length: n,
	}, nil
}

// fileObject is a value read from its open file: off is where the
// section starts in the file.
type fileObject struct {
	*io.SectionReader
	f   *os.File
	off int64
}

func (o fileObject) Close() error { return o.f.Close() }

// ReadFullVec implements storesvc.VecReader: one preadv per 1024 buffers
// (Linux), reads at the section's position elsewhere.
func (o fileObject) ReadFullVec(bufs [][]byte) error {
	pos, _ := o.Seek(0, io.SeekCurrent)
	var total int64
	for _, b := range bufs {
		total += int64(len(b))
	}
	if total > o.Size()-pos {
		return io.ErrUnexpectedEOF
	}
	n, err := readVecAt(o.f, bufs, o.off+pos)
	o.Seek(pos+n, io.SeekStart)
	if err == nil && n < total {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// Set implements storesvc.Store.
func (s *Store) Set(ctx context.Context, key string, value io.Reader, cond storesvc.Condition) (string, error) {
	if err := checkReserved(key); err != nil {
		return "", err
	}
	rel, dir := keyPath(key)
	return s.replace(ctx, key, rel, dir, func(w io.Writer) error {
		_, err := storesvc.CopyContext(ctx, w, value)
		return err
	}, func(current fs.FileInfo) error { return checkCondition(key, current, cond) })
}

// checkReserved refuses keys (and prefixes) with a segment that could name
// a temporary file. The portable layer refuses them already; the store
// checks again because it must never hand out or touch a write in
// progress, whoever calls it.
func checkReserved(key string) error {
	if strings.HasPrefix(key, tmpPrefix) || strings.Contains(key, "/"+tmpPrefix) {
		return errs.New(errs.InvalidArgument, "key %q: segments starting with %q are reserved by the file store", key, tmpPrefix)
	}
	return nil
}

// checkCondition checks cond against the current file (nil if absent).
func checkCondition(key string, current fs.FileInfo, cond storesvc.Condition) error {
	switch {
	case cond.IfAbsent && current != nil:
		return errs.New(errs.FailedPrecondition, "key %q already exists (generation %s)", key, generation(current))
	case cond.IfGenerationMatch != "" && current == nil:
		return errs.New(errs.FailedPrecondition, "key %q does not exist, expected generation %s", key, cond.IfGenerationMatch)
	case cond.IfGenerationMatch != "" && generation(current) != cond.IfGenerationMatch:
		return errs.New(errs.FailedPrecondition, "key %q has generation %s, expected %s", key, generation(current), cond.IfGenerationMatch)
	}
	return nil
}

// replace writes a new file for key with fill (outside any lock), then,
// under the directory lock, runs check on the current file (nil if absent)
// and renames the new file into place. It returns the new generation.
//
// Every step after the directory is opened works in it by name (the
// directory's own os.Root), so no step walks the key's path again but the
// check that the locked directory is still at that path.
func (s *Store) replace(ctx context.Context, key, rel, dir string, fill func(io.Writer) error, check func(current fs.FileInfo) error) (string, error) {
	d, tmp, tmpName, err := s.createTemp(key, dir)
	if err != nil {
		return "", err
	}
	name := filepath.Base(rel)
	committed := false
	// The file stays open, and so flocked, until it is renamed or removed:
	// CleanTemps in another process must not take it for a dead write's.
	defer func() {
		if !committed {
			d.Remove(tmpName)
		}
		tmp.Close()
		d.Close()
	}()
	if err := fill(tmp); err != nil {
		return "", mapErr("set", key, err)
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	gen, err := s.seal(d, tmp, tmpName)
	if err != nil {
		return "", mapErr("set", key, err)
	}
	err = s.withHeldDirLock(key, dir, d, func() error {
		current, err := current(d, key, name)
		if err != nil {
			return err
		}
		if err := check(current); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := d.Rename(tmpName, name); err != nil {
			return mapErr("set", key, err)
		}
		committed = true
		return nil
	})
	if err != nil {
		return "", err
	}
	if err := s.syncDir(dir); err != nil {
		return "", mapErr("set", key, err)
	}
	return gen, nil
}

// seal flushes the temporary file and stamps it with a fresh nanosecond
// mtime, returning the generation it will have once renamed. The caller
// closes it after the rename.
func (s *Store) seal(d *os.Root, tmp *os.File, tmpName string) (string, error) {
	now := time.Now()
	if err := d.Chtimes(tmpName, now, now); err != nil {
		return "", err
	}
	if s.Durability() == DurabilityFsync {
		if err := tmp.Sync(); err != nil {
			return "", err
		}
		s.fileSyncs.Add(1)
	}
	fi, err := tmp.Stat()
	if err != nil {
		return "", err
	}
	return generation(fi), nil
}

// current stats the file of key, rel below at: nil if absent; an error if
// the key is a directory, or sits below a file.
func current(at *os.Root, key, rel string) (fs.FileInfo, error) {
	fi, err := at.Lstat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, mapErr("stat", key, err)
	case fi.IsDir():
		return nil, errs.New(errs.FailedPrecondition, "key %q is a prefix of other keys in this file store; erase them first", key)
	}
	return fi, nil
}

// createTemp creates a temporary file in dir, creating dir if needed, and
// returns dir opened as a root (the caller closes it) and the file's name
// in it. A concurrent erase may remove an empty dir between the two steps;
// then it tries again.
func (s *Store) createTemp(key, dir string) (*os.Root, *os.File, string, error) {
	var lastErr error
	for range 10 {
		d, err := s.root.OpenRoot(dir)
		if errors.Is(err, fs.ErrNotExist) && dir != "." {
			err = s.root.MkdirAll(dir, 0o755)
			if err == nil {
				d, err = s.root.OpenRoot(dir)
			}
		}
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				lastErr = err
				continue // removed again meanwhile
			}
			// os.Root says "not a directory" of a file at dir without
			// ENOTDIR: ask the file system.
			fi, serr := s.root.Stat(dir)
			if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, fs.ErrExist) ||
				errors.Is(serr, syscall.ENOTDIR) || (serr == nil && !fi.IsDir()) {
				return nil, nil, "", errs.New(errs.FailedPrecondition, "set %q: a parent of the key is itself a key (a file) in this file store", key)
			}
			return nil, nil, "", mapErr("set", key, err)
		}
		var rnd [8]byte
		rand.Read(rnd[:])
		tmpName := tmpPrefix + hex.EncodeToString(rnd[:])
		f, err := d.OpenFile(tmpName, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			// Held until the file is closed: tells CleanTemps it is live.
			// CleanTemps may have come between the create and the lock
			// (the file unlocked, so taken for a dead writer's): then it
			// holds the lock, or has unlinked the file, and this writer
			// starts again under another name.
			if ferr := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); ferr != nil {
				f.Close()
				if errors.Is(ferr, unix.EWOULDBLOCK) {
					d.Close()
					lastErr = ferr
					continue
				}
				d.Remove(tmpName)
				d.Close()
				return nil, nil, "", mapErr("set", key, ferr)
			}
			var st unix.Stat_t
			if ferr := unix.Fstat(int(f.Fd()), &st); ferr != nil || st.Nlink == 0 {
				f.Close()
				d.Close()
				lastErr = fmt.Errorf("temporary file removed before it was locked")
				continue
			}
			return d, f, tmpName, nil
		}
		d.Close()
		lastErr = err
		if !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	return nil, nil, "", mapErr("set", key, lastErr)
}

// withDirLock runs fn holding an exclusive flock on dir. A lock on a
// directory that a concurrent erase removed (and a writer perhaps
// recreated) protects nothing, so it checks that the locked directory is
// still the one at that path, and tries again if not.
func (s *Store) withDirLock(key, dir string, fn func() error) error {
	for range 100 {
		d, err := s.root.Open(dir)
		if err != nil {
			return mapErr("lock", key, err)
		}
		fd := int(d.Fd())
		if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
			d.Close()
			return mapErr("lock", key, err)
		}
		held, err1 := d.Stat()
		now, err2 := s.root.Stat(dir)
		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			err := fn()
			unix.Flock(fd, unix.LOCK_UN)
			d.Close()
			return err
		}
		unix.Flock(fd, unix.LOCK_UN)
		d.Close()
		if err2 != nil && !errors.Is(err2, fs.ErrNotExist) {
			return mapErr("lock", key, err2)
		}
		if errors.Is(err2, fs.ErrNotExist) {
			return errs.New(errs.NotFound, "key %q not found", key)
		}
	}
	return errs.New(errs.Aborted, "key %q: directory kept changing under the lock", key)
}

// SetPartialValues implements storesvc.PartialWriter: per key, a copy of
// the current value is patched and renamed over it under the directory lock,
// so concurrent partial writers never lose each other's updates.
func (s *Store) SetPartialValues(ctx context.Context, writes []storesvc.PartialWrite) error {
	for key, ws := range storesvc.GroupWrites(writes) {
		if err := s.patch(ctx, key, ws); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) patch(ctx context.Context, key string, ws []storesvc.PartialWrite) error {
	if err := checkReserved(key); err != nil {
		return err
	}
	rel, dir := keyPath(key)
	if _, err := s.root.Stat(dir); err != nil {
		return mapErr("set_partial_values", key, err)
	}
	err := s.withDirLock(key, dir, func() error {
		old, err := s.root.Open(rel)
		if err != nil {
			return mapErr("set_partial_values", key, err)
		}
		defer old.Close()
		fi, err := old.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			return errs.New(errs.NotFound, "set_partial_values: key %q not found", key)
		}
		size := fi.Size()
		for _, w := range ws {
			if w.Offset > size {
				return errs.New(errs.OutOfRange, "set_partial_values %q: offset %d is past the end of the %d-byte value", key, w.Offset, size)
			}
			size = max(size, w.Offset+int64(len(w.Data)))
		}
		d, tmp, tmpName, err := s.createTemp(key, dir)
		if err != nil {
			return err
		}
		committed := false
		defer func() {
			if !committed {
				d.Remove(tmpName)
			}
			tmp.Close()
			d.Close()
		}()
		if _, err := storesvc.CopyContext(ctx, tmp, old); err != nil {
			return mapErr("set_partial_values", key, err)
		}
		for _, w := range ws {
			if _, err := tmp.WriteAt(w.Data, w.Offset); err != nil {
				return mapErr("set_partial_values", key, err)
			}
		}
		if _, err := s.seal(d, tmp, tmpName); err != nil {
			return mapErr("set_partial_values", key, err)
		}
		if err := d.Rename(tmpName, filepath.Base(rel)); err != nil {
			return mapErr("set_partial_values", key, err)
		}
		committed = true
		return nil
	})
	if err != nil {
		return err
	}
	return mapErr("set_partial_values", key, s.syncDir(dir))
}

// Erase implements storesvc.Store.
func (s *Store) Erase(_ context.Context, key string, cond storesvc.Condition) error {
	if err := checkReserved(key); err != nil {
		return err
	}
	rel, dir := keyPath(key)
	if _, err := s.root.Stat(dir); err != nil {
		if cond.IsZero() && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)) {
			return nil
		}
		if cond.IfGenerationMatch != "" {
			return errs.New(errs.FailedPrecondition, "key %q does not exist, expected generation %s", key, cond.IfGenerationMatch)
		}
		return mapErr("erase", key, err)
	}
	removed := false
	err := s.withDirLock(key, dir, func() error {
		current, err := current(s.root, key, rel)
		if err != nil {
			return err
		}
		if err := checkCondition(key, current, cond); err != nil {
			return err
		}
		if current == nil {
			return nil
		}
		if err := s.root.Remove(rel); err != nil {
			return mapErr("erase", key, err)
		}
		removed = true
		return nil
	})
	if errors.Is(err, storesvc.ErrNotFound) {
		if !cond.IsZero() {
			return errs.New(errs.FailedPrecondition, "key %q does not exist, expected generation %s", key, cond.IfGenerationMatch)
		}
		err = nil
	}
	if err != nil {
		return err
	}
	if removed {
		// The removal is durable before the call returns, as a write
		// is: a whole-chunk write of fill value erases the chunk.
		if err := s.syncDir(dir); err != nil {
			return mapErr("erase", key, err)
		}
	}
	s.prune(dir)
	return nil
}

// prune removes dir and its parents while they are empty.
func (s *Store) prune(dir string) {
	for d := dir; d != "." && d != string(filepath.Separator); d = filepath.Dir(d) {
		if s.root.Remove(d) != nil {
			return
		}
	}
}

// ErasePrefix implements storesvc.PrefixEraser.
func (s *Store) ErasePrefix(_ context.Context, prefix string) error {
	if err := checkReserved(prefix); err != nil {
		return err
	}
	if prefix == "" {
		entries, err := fs.ReadDir(s.root.FS(), ".")
		if err != nil {
			return mapErr("erase_prefix", prefix, err)
		}
		for _, e := range entries {
			if err := s.root.RemoveAll(e.Name()); err != nil {
				return mapErr("erase_prefix", prefix, err)
			}
		}
		return nil
	}
	dir := filepath.FromSlash(strings.TrimSuffix(prefix, "/"))
	fi, err := s.root.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || (err == nil && !fi.IsDir()) {
		return nil
	}
	if err := s.root.RemoveAll(dir); err != nil {
		return mapErr("erase_prefix", prefix, err)
	}
	s.prune(filepath.Dir(dir))
	return nil
}

// prefixDir maps a validated prefix to its directory relative to the root.
func prefixDir(prefix string) string {
	if prefix == "" {
		return "."
	}
	return strings.TrimSuffix(prefix, "/")
}

// isValue reports whether a directory entry holds a value: a regular file
// (or a symlink to one), not one of our temporary files.
func isValue(d fs.DirEntry) bool {
	return !d.IsDir() && (d.Type().IsRegular() || d.Type()&fs.ModeSymlink != 0) && !strings.HasPrefix(d.Name(), tmpPrefix)
}

// ListPrefix implements storesvc.Store.
func (s *Store) ListPrefix(ctx context.Context, prefix string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		dir := prefixDir(prefix)
		fsys := s.root.FS()
		if fi, err := fs.Stat(fsys, dir); err != nil || !fi.IsDir() {
			return
		}
		err := fs.WalkDir(fsys, dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil // removed while we walked
				}
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if !isValue(d) {
				return nil
			}
			if !yield(p, nil) {
				return fs.SkipAll
			}
			return nil
		})
		if err != nil {
			yield("", mapErr("list_prefix", prefix, err))
		}
	}
}

// ListDir implements storesvc.DirLister. Empty directories are not listed
// as prefixes.
func (s *Store) ListDir(ctx context.Context, prefix string) iter.Seq2[storesvc.DirEntry, error] {
	return func(yield func(storesvc.DirEntry, error) bool) {
		fsys := s.root.FS()
		entries, err := fs.ReadDir(fsys, prefixDir(prefix))
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
				yield(storesvc.DirEntry{}, mapErr("list_dir", prefix, err))
			}
			return
		}
		for _, e := range entries {
			if err := ctx.Err(); err != nil {
				yield(storesvc.DirEntry{}, err)
				return
			}
			var entry storesvc.DirEntry
			switch {
			case e.IsDir():
				if !s.hasValues(path.Join(prefixDir(prefix), e.Name())) {
					continue
				}
				entry = storesvc.DirEntry{Path: prefix + e.Name() + "/", IsPrefix: true}
			case isValue(e):
				entry = storesvc.DirEntry{Path: prefix + e.Name()}
			default:
				continue
			}
			if !yield(entry, nil) {
				return
			}
		}
	}
}

// hasValues reports whether the directory holds at least one value, at any
// depth.
func (s *Store) hasValues(dir string) bool {
	found := false
	fs.WalkDir(s.root.FS(), dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && isValue(d) {
			found = true
			return fs.SkipAll
		}
		return nil
	})
	return found
}

// TempStats counts what CleanTemps found.
type TempStats struct {
	Removed int // temporary files of dead writers, removed
	Live    int // held by a live writer (this or another process)
	Young   int // modified less than minAge ago, left for a later pass
}

// CleanTemps removes the temporary files that writers killed before they
// could rename or remove them left behind: files named like a temporary
// file that no process holds a flock on and that went unmodified for at
// least minAge. Such files are unreachable through the store already; this
// gives their space back. Several processes may share the directory, and
// each skips the others' writes in progress: they hold their files'
// flocks. It walks the whole tree, so serving commands run it in the
// background at start-up.
func (s *Store) CleanTemps(ctx context.Context, minAge time.Duration) (TempStats, error) {
	var st TempStats
	now := time.Now()
	err := fs.WalkDir(s.root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walked
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() || !d.Type().IsRegular() || !strings.HasPrefix(d.Name(), tmpPrefix) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil // renamed or removed meanwhile
		}
		if now.Sub(fi.ModTime()) < minAge {
			st.Young++
			return nil
		}
		rel := filepath.FromSlash(p)
		f, err := s.root.Open(rel)
		if err != nil {
			return nil
		}
		defer f.Close()
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			st.Live++
			return nil
		}
		// Nobody holds it: its writer died, or renamed it into place an
		// instant ago (then the name is gone and Remove finds nothing).
		if s.root.Remove(rel) == nil {
			st.Removed++
			s.prune(filepath.Dir(rel))
		}
		return nil
	})
	if err != nil {
		return st, mapErr("clean_temps", "", err)
	}
	return st, nil
}

// testHookDirSync, when set by a test, runs before each directory fsync.
var testHookDirSync func(dir string)

// dirSyncer groups the fsyncs of one directory. A writer that renamed a
// file into the directory joins the next round, one that has not started
// yet (so it starts after the rename), and waits for it; one round runs at
// a time, and a round covers every writer that joined it.
type dirSyncer struct {
	running bool
	next    *syncRound // the round writers join; nil until one does
	users   int        // writers joined and not yet woken
}

type syncRound struct {
	done chan struct{}
	err  error
}

// syncDir makes the renames and removals already done in dir durable
// (with DurabilityFsync; nothing with DurabilityNone): it returns once an
// fsync of dir that started after the call did has finished.
func (s *Store) syncDir(dir string) error {
	if s.Durability() != DurabilityFsync {
		return nil
	}
	s.mu.Lock()
	ds := s.syncers[dir]
	if ds == nil {
		ds = &dirSyncer{}
		s.syncers[dir] = ds
	}
	if ds.next == nil {
		ds.next = &syncRound{done: make(chan struct{})}
	}
	r := ds.next
	ds.users++
	if !ds.running {
		ds.running = true
		go s.runSyncs(dir, ds)
	}
	s.mu.Unlock()
	<-r.done
	s.mu.Lock()
	ds.users--
	if ds.users == 0 && !ds.running {
		delete(s.syncers, dir)
	}
	s.mu.Unlock()
	return r.err
}

// runSyncs runs rounds while writers join them.
func (s *Store) runSyncs(dir string, ds *dirSyncer) {
	s.mu.Lock()
	for ds.next != nil {
		r := ds.next
		ds.next = nil
		s.mu.Unlock()
		r.err = s.fsyncDir(dir)
		close(r.done)
		s.mu.Lock()
	}
	ds.running = false
	if ds.users == 0 {
		delete(s.syncers, dir)
	}
	s.mu.Unlock()
}

// fsyncDir fsyncs dir. A directory removed meanwhile holds nothing of the
// writers waiting (an erase emptied it): nothing to make durable.
func (s *Store) fsyncDir(dir string) error {
	if testHookDirSync != nil {
		testHookDirSync(dir)
	}
	d, err := s.root.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer d.Close()
	s.dirSyncs.Add(1)
	return d.Sync()
}

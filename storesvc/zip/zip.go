// Package zip is a store in one ZIP archive, compatible with zarr-python's
// ZipStore and with NCZarr's zip mode (file:///x.zip#mode=nczarr,zip).
//
// Layouts. In the default layout, key "a/b" is the member "a/b", as
// zarr-python's ZipStore writes it. In the NCZarr layout (Options.NCZarr)
// every key lives under one dataset directory, as netcdf-c's libzip map
// writes it: the first member is the directory "<dataset>/", key "a/b" is
// the member "<dataset>/a/b", and each parent has a directory member
// ("<dataset>/a/"). The dataset name is, for a new archive, the file name
// minus one extension ("x.zip" → "x"), and for an existing one the first
// path segment of its first member. Directory members are never keys.
//
// Reading. The central directory is read once, at Open, into an index; list
// and list_dir answer from it. A STORED member's ranges are read straight
// from the file (pread), without inflating anything; a compressed member
// (DEFLATED, BZIP2 — method 12 — or ZSTD — method 93, as Python 3.14's
// zipfile writes them) is decompressed as a stream, skipping up to the
// range (its bytes cannot be addressed otherwise): a range ending at byte
// e costs decompressing e bytes, never more than the declared size.
// Whole-value reads check the CRC-32 (ErrDataLoss on a mismatch), and a
// decompressed member is cut at its declared size.
//
// Writing. New members are STORED, appended where the central directory
// was, streamed from the value's reader (never buffered whole) with the CRC
// computed on the way; the local header's CRC and sizes are patched in
// afterwards (ZIP64 sizes for values of 4 GiB and more). A failed or
// cancelled write truncates the file back, so nothing of it remains.
// Writers are serialised (an archive is written sequentially); readers run
// concurrently with writers and with each other.
//
// Overwriting a key appends a new member; the later entry wins, as in
// Python's zipfile (which warns "Duplicate name"). When the central
// directory is written, superseded entries are left out, so the archive
// lists each name once (libzip refuses duplicate names); their bytes stay
// behind as unreferenced space until the archive is rewritten. So
// generations are the member's offset and CRC: every write gets a new one.
//
// Close (or Flush) writes the central directory. Like an archive being
// written by zipfile or libzip, the file is not a valid archive between the
// first write and Close/Flush: a crash in between loses the writes since
// the last Flush and, when appending, the archive's previous directory.
//
// Erasing is not possible: Erasable is false, and the portable layer
// answers ErrUnsupported ("zip archives cannot erase; rewrite the archive").
// Conditional writes are atomic: writers hold the store's write lock, and
// the process holds an exclusive flock on the archive while it is open for
// writing (a shared one while read-only), so a second process cannot write
// the same archive.
package zip

import (
	"compress/bzip2"
	"context"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/storesvc"
)

// Options configure Open.
type Options struct {
	// ReadOnly opens an existing archive for reading only.
	ReadOnly bool
	// NCZarr selects NCZarr's layout: keys under a dataset directory.
	NCZarr bool
	// Dataset names the dataset directory of a new NCZarr archive (default:
	// the file name minus one extension).
	Dataset string
}

// Store is a store in one zip archive. It is safe for concurrent use.
type Store struct {
	path     string
	f        *os.File
	readOnly bool
	root     string // "" or "<dataset>/"

	mu      sync.RWMutex
	members []*member          // central directory order, superseded entries included
	index   map[string]*member // by member name: the last entry
	closed  bool

	wmu   sync.Mutex // serialises writers; guards end and dirty
	end   int64      // where the next member goes
	dirty bool
}

var (
	_ storesvc.Store     = (*Store)(nil)
	_ storesvc.DirLister = (*Store)(nil)
)

// Open opens the archive at path, creating it unless opts.ReadOnly.
func Open(path string, opts Options) (*Store, error) {
	flag, lock := os.O_RDWR|os.O_CREATE, unix.LOCK_EX
	if opts.ReadOnly {
		flag, lock = os.O_RDONLY, unix.LOCK_SH
	}
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errs.New(errs.NotFound, "zip store: archive %s does not exist", path)
		}
		if errors.Is(err, fs.ErrPermission) {
			return nil, errs.Wrap(errs.PermissionDenied, err, "zip store")
		}
		return nil, errs.Wrap(errs.FailedPrecondition, err, "zip store")
	}
	if err := unix.Flock(int(f.Fd()), lock|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, errs.New(errs.FailedPrecondition, "zip store: archive %s is open for writing by another process (%v)", path, err)
	}
	s := &Store{path: path, f: f, readOnly: opts.ReadOnly, index: make(map[string]*member)}
	if err := s.load(opts); err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

func (s *Store) load(opts Options) error {
	fi, err := s.f.Stat()
	if err != nil {
		return errs.Wrap(errs.Internal, err, "zip store %s", s.path)
	}
	if fi.Size() > 0 {
		members, cdOffset, err := readDirectory(s.f, fi.Size())
		if err != nil {
			return errs.Wrap(errs.DataLoss, err, "zip store %s", s.path)
		}
		s.members, s.end = members, cdOffset
		for _, m := range members {
			s.index[m.name] = m
		}
	}
	if !opts.NCZarr {
		return nil
	}
	if len(s.members) > 0 {
		first := s.members[0].name
		seg, _, _ := strings.Cut(first, "/")
		if seg == "" {
			return errs.New(errs.DataLoss, "zip store %s: NCZarr archive whose first member %q names no dataset directory", s.path, first)
		}
		s.root = seg + "/"
		return nil
	}
	if s.readOnly {
		return errs.New(errs.DataLoss, "zip store %s: empty archive has no NCZarr dataset", s.path)
	}
	dataset := opts.Dataset
	if dataset == "" {
		base := filepath.Base(s.path)
		dataset = strings.TrimSuffix(base, filepath.Ext(base))
	}
	if err := storesvc.ValidateKey(dataset); err != nil || strings.Contains(dataset, "/") {
		return errs.New(errs.InvalidArgument, "zip store %s: bad NCZarr dataset name %q", s.path, dataset)
	}
	s.root = dataset + "/"
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.addDir(s.root)
}

// Path is the archive's file name.
func (s *Store) Path() string { return s.path }

// Dataset is the NCZarr dataset directory ("" in the default layout).
func (s *Store) Dataset() string { return strings.TrimSuffix(s.root, "/") }

// LocalReads says reading the store runs on this process's processors:
// they copy from a local file, and inflate deflated members
// (storesvc.LocalReads).
func (s *Store) LocalReads() bool { return true }

// Capabilities implements storesvc.Store. Erasing is impossible in an
// archive; partial writes are the portable layer's conditional
// read-modify-write (each appends a new member).
func (s *Store) Capabilities() storesvc.Capabilities {
	w := !s.readOnly
	return storesvc.Capabilities{Readable: true, Listable: true, Writable: w, ConditionalWrites: w, PartialWrites: w}
}

func (s *Store) lookup(key string) (*member, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, errs.New(errs.FailedPrecondition, "zip store %s is closed", s.path)
	}
	m := s.index[s.root+key]
	if m == nil || m.isDir() {
		return nil, nil
	}
	return m, nil
}

func generation(m *member) string { return fmt.Sprintf("%x-%08x", m.offset, m.crc) }

// Get implements storesvc.Store.
func (s *Store) Get(ctx context.Context, key string, r storesvc.ByteRange) (*storesvc.Object, error) {
	m, err := s.lookup(key)
	if err != nil {
		return nil, err
	}
	if m == nil {
		return nil, errs.New(errs.NotFound, "get: key %q not found", key)
	}
	size := int64(m.usize)
	off, n, err := r.Resolve(size)
	if err != nil {
		return nil, errs.New(errs.OutOfRange, "get %q: %v", key, err)
	}
	dataOff, err := s.dataOffset(m)
	if err != nil {
		return nil, errs.Wrap(errs.DataLoss, err, "get %q from %s", key, s.path)
	}
	obj := &storesvc.Object{Generation: generation(m), Size: size, Offset: off, Length: n}
	whole := off == 0 && n == size
	switch m.method {
	case methodStore:
		if m.csize != m.usize {
			return nil, errs.New(errs.DataLoss, "get %q from %s: stored member of %d bytes claims %d", key, s.path, m.csize, m.usize)
		}
		var rd io.Reader = io.NewSectionReader(s.f, dataOff+off, n)
		if whole {
			rd = &crcReader{r: rd, want: m.crc, n: n, key: key, h: crc32.NewIEEE()}
		}
		obj.ReadCloser = io.NopCloser(rd)
	case methodDeflate, methodBzip2, methodZstd:
		// A compressed member's bytes cannot be addressed: a range is
		// decompressed from the start, the bytes before it discarded. The
		// work is bounded by the member's declared size (never more than
		// off+n bytes are decompressed, whatever the data claims), the
		// skip stops when ctx ends, and the decoders' memory is bounded
		// (see decompressor).
		dec, err := decompressor(m.method, io.NewSectionReader(s.f, dataOff, int64(m.csize)))
		if err != nil {
			return nil, errs.Wrap(errs.DataLoss, err, "get %q from %s: %s member", key, s.path, methodName(m.method))
		}
		if skipped, err := storesvc.CopyContext(ctx, io.Discard, io.LimitReader(dec, off)); err != nil || skipped < off {
			dec.Close()
			if ctxErr := ctx.Err(); ctxErr != nil {
				return nil, ctxErr
			}
			if err == nil {
				return nil, errs.New(errs.DataLoss, "get %q from %s: %s member ends %d bytes early", key, s.path, methodName(m.method), size-skipped)
			}
			return nil, errs.Wrap(errs.DataLoss, err, "get %q from %s: decompressing the %s member", key, s.path, methodName(m.method))
		}
		var rd io.Reader = &exactReader{r: io.LimitReader(dec, n), n: n, key: key, method: methodName(m.method)}
		if whole {
			rd = &crcReader{r: rd, want: m.crc, n: n, key: key, h: crc32.NewIEEE()}
		}
		obj.ReadCloser = struct {
			io.Reader
			io.Closer
		}{rd, dec}
	default:
		return nil, errs.New(errs.Unimplemented, "get %q from %s: compression method %d is not supported (only stored, deflated, bzip2 and zstd)", key, s.path, m.method)
	}
	return obj, nil
}

func (s *Store) dataOffset(m *member) (int64, error) {
	s.mu.RLock()
	off := m.dataOffset
	s.mu.RUnlock()
	if off != 0 {
		return off, nil
	}
	off, err := localDataOffset(s.f, m)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	m.dataOffset = off
	s.mu.Unlock()
	return off, nil
}

// crcReader checks the CRC-32 of a whole value at its end.
type crcReader struct {
	r    io.Reader
	h    hash.Hash32
	want uint32
	n    int64
	key  string
}

// Read withholds the read that completes the value when the CRC does not
// match, returning only the error: callers such as io.ReadFull drop an
// error that comes with the last bytes they asked for.
func (c *crcReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	c.n -= int64(n)
	if c.n == 0 && n > 0 && c.h.Sum32() != c.want {
		return 0, errs.New(errs.DataLoss, "get %q: CRC-32 %08x, the archive says %08x", c.key, c.h.Sum32(), c.want)
	}
	return n, err
}

// exactReader turns an early end of a decompressed stream, or its
// failure, into DataLoss.
type exactReader struct {
	r      io.Reader
	n      int64
	key    string
	method string
}

func (e *exactReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	e.n -= int64(n)
	if err == io.EOF && e.n > 0 {
		return n, errs.New(errs.DataLoss, "get %q: %s member ends %d bytes early", e.key, e.method, e.n)
	}
	if err != nil && err != io.EOF {
		return n, errs.Wrap(errs.DataLoss, err, "get %q: decompressing the %s member", e.key, e.method)
	}
	return n, err
}

// maxZstdWindow is the largest zstd window a member may ask for: 128 MiB,
// the default limit of the reference decoder (libzstd's
// ZSTD_WINDOWLOG_LIMIT_DEFAULT, 27), which every zstd writer's default
// levels stay under. A frame asking for more is refused instead of
// allocating it.
const maxZstdWindow = 1 << 27

// decompressor reads the decompressed data of a member compressed with
// method (deflate, bzip2 or zstd) from r, its compressed bytes. Memory is
// bounded: deflate's 32 KiB window, bzip2's 900 kB block, zstd's window
// (maxZstdWindow) and one decoding goroutine per read.
func decompressor(method uint16, r io.Reader) (io.ReadCloser, error) {
	switch method {
	case methodDeflate:
		return flate.NewReader(r), nil
	case methodBzip2:
		return io.NopCloser(bzip2.NewReader(r)), nil
	case methodZstd:
		d, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxWindow(maxZstdWindow))
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	}
	return nil, fmt.Errorf("compression method %d", method)
}

// methodName names a compression method in messages.
func methodName(method uint16) string {
	switch method {
	case methodDeflate:
		return "deflated"
	case methodBzip2:
		return "bzip2"
	case methodZstd:
		return "zstd"
	}
	return fmt.Sprintf("method-%d", method)
}

// Set implements storesvc.Store.
func (s *Store) Set(ctx context.Context, key string, value io.Reader, cond storesvc.Condition) (string, error) {
	if s.readOnly {
		return "", errs.New(errs.FailedPrecondition, "set %q: zip archive %s is open read-only", key, s.path)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	current, err := s.lookup(key)
	if err != nil {
		return "", err
	}
	switch {
	case cond.IfAbsent && current != nil:
		return "", errs.New(errs.FailedPrecondition, "set: key %q already exists (generation %s)", key, generation(current))
	case cond.IfGenerationMatch != "" && current == nil:
		return "", errs.New(errs.FailedPrecondition, "set: key %q does not exist, expected generation %s", key, cond.IfGenerationMatch)
	case cond.IfGenerationMatch != "" && generation(current) != cond.IfGenerationMatch:
		return "", errs.New(errs.FailedPrecondition, "set: key %q has generation %s, expected %s", key, generation(current), cond.IfGenerationMatch)
	}
	m, err := s.appendMember(ctx, s.root+key, value)
	if err != nil {
		return "", err
	}
	if s.root != "" {
		for i := range len(key) {
			if key[i] == '/' {
				if err := s.addDir(s.root + key[:i+1]); err != nil {
					return "", err
				}
			}
		}
	}
	return generation(m), nil
}

// addDir adds a directory member unless there is one. The caller holds
// wmu.
func (s *Store) addDir(name string) error {
	s.mu.RLock()
	_, ok := s.index[name]
	s.mu.RUnlock()
	if ok {
		return nil
	}
	_, err := s.appendMember(context.Background(), name, strings.NewReader(""))
	return err
}

// appendMember streams value into a new member named name at the end of
// the archive and indexes it. On failure the file is cut back. The caller
// holds wmu.
func (s *Store) appendMember(ctx context.Context, name string, value io.Reader) (*member, error) {
	start := s.end
	m := newMember(name, start, strings.HasSuffix(name, "/"))
	header := m.localHeader()
	fail := func(err error) (*member, error) {
		if terr := s.f.Truncate(start); terr != nil {
			err = fmt.Errorf("%w (and truncating back: %v)", err, terr)
		}
		var coded *errs.Error
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &coded) {
			return nil, err
		}
		return nil, errs.Wrap(errs.Internal, err, "set %q in %s", name, s.path)
	}
	// From here on the old central directory (if appending) is overwritten:
	// Close must write a new one even if this write fails.
	s.dirty = true
	if _, err := s.f.WriteAt(header, start); err != nil {
		return fail(err)
	}
	dataOff := start + int64(len(header))
	h := crc32.NewIEEE()
	n, err := storesvc.CopyContext(ctx, io.MultiWriter(io.NewOffsetWriter(s.f, dataOff), h), value)
	if err != nil {
		if ctx.Err() == nil {
			err = errs.Wrap(errs.Aborted, err, "reading the value")
		}
		return fail(err)
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	m.crc, m.csize, m.usize, m.dataOffset = h.Sum32(), uint64(n), uint64(n), dataOff
	if _, err := s.f.WriteAt(m.localHeader(), start); err != nil {
		return fail(err)
	}
	s.end = dataOff + n
	s.dirty = true
	s.mu.Lock()
	s.members = append(s.members, m)
	s.index[name] = m
	s.mu.Unlock()
	return m, nil
}

// Erase implements storesvc.Store: always ErrUnsupported.
func (s *Store) Erase(context.Context, string, storesvc.Condition) error {
	return errs.New(errs.Unimplemented, "zip archives cannot erase; rewrite the archive")
}

// keys returns the keys under prefix.
func (s *Store) keys(prefix string) ([]string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, errs.New(errs.FailedPrecondition, "zip store %s is closed", s.path)
	}
	full := s.root + prefix
	var out []string
	for name, m := range s.index {
		if m.isDir() || !strings.HasPrefix(name, full) {
			continue
		}
		key := name[len(s.root):]
		if storesvc.ValidateKey(key) == nil {
			out = append(out, key)
		}
	}
	return out, nil
}

// ListPrefix implements storesvc.Store from the central directory.
// Members whose names are not valid keys are skipped.
func (s *Store) ListPrefix(ctx context.Context, prefix string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		keys, err := s.keys(prefix)
		if err != nil {
			yield("", err)
			return
		}
		for _, k := range keys {
			if err := ctx.Err(); err != nil {
				yield("", err)
				return
			}
			if !yield(k, nil) {
				return
			}
		}
	}
}

// ListDir implements storesvc.DirLister from the central directory.
func (s *Store) ListDir(ctx context.Context, prefix string) iter.Seq2[storesvc.DirEntry, error] {
	return func(yield func(storesvc.DirEntry, error) bool) {
		keys, err := s.keys(prefix)
		if err != nil {
			yield(storesvc.DirEntry{}, err)
			return
		}
		seen := make(map[string]bool)
		for _, k := range keys {
			e := storesvc.DirEntryOf(prefix, k)
			if seen[e.Path] {
				continue
			}
			seen[e.Path] = true
			if !yield(e, nil) {
				return
			}
		}
	}
}

// Flush writes the central directory, making the file a valid archive of
// everything written so far. Later writes overwrite it again.
func (s *Store) Flush() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.flush()
}

func (s *Store) flush() error {
	if !s.dirty {
		return nil
	}
	s.mu.RLock()
	var cd []byte
	count := 0
	for _, m := range s.members {
		if s.index[m.name] != m {
			continue // superseded by a later entry of the same name
		}
		cd = m.appendCentral(cd)
		count++
	}
	s.mu.RUnlock()
	size := int64(len(cd))
	cd = appendEnd(cd, count, s.end, size)
	if _, err := s.f.WriteAt(cd, s.end); err != nil {
		return errs.Wrap(errs.Internal, err, "zip store %s: writing the central directory", s.path)
	}
	if err := s.f.Truncate(s.end + int64(len(cd))); err != nil {
		return errs.Wrap(errs.Internal, err, "zip store %s", s.path)
	}
	if err := s.f.Sync(); err != nil {
		return errs.Wrap(errs.Internal, err, "zip store %s", s.path)
	}
	s.dirty = false
	return nil
}

// Close implements storesvc.Store: it writes the central directory if
// anything was written, and closes the file.
func (s *Store) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	err := s.flush()
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	if cerr := s.f.Close(); err == nil && cerr != nil {
		err = errs.Wrap(errs.Internal, cerr, "zip store %s", s.path)
	}
	return err
}

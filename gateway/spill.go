package gateway

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/membudget"
)

// A WriteSlab larger than its memory buffer keeps the partial chunks it
// cannot hold in a spill log on local disk, instead of merging them into
// the store early (which left chunks partly new after a crash): every
// chunk or shard is then written once, with its final content.
//
// The log is one file in a directory of its own per call,
// <SpillDir>/zarrgate-spill-<pid>-<random>/log, removed when the call ends
// however it ends. It is scratch: written with plain os calls, never
// fsynced, never read by anything but the call that wrote it, and never
// reachable through the API (it lives outside the store). The call holds
// an exclusive flock on the log for its whole life, so that CleanSpill
// can tell a live call's directory from a killed process's: the kernel
// drops the lock when the process dies, SIGKILL included.
//
// The log is a sequence of records, each a 24-byte header (the offset of
// the previous record of the same unit or -1, the kind, the payload
// length; native int64s: the file never leaves the process) and a payload:
//
//   - recImage, a unit that was held in memory, spilled: its bitmap of
//     received elements, then the received elements packed in index order
//     (fixed size: elem bytes each; variable length: k+1 offsets, then the
//     k values).
//   - recPiece, the part of one block inside a unit that was already
//     spilled: per dimension the box's start, step and count in the unit,
//     then its elements in C order (variable length: n+1 offsets, then the
//     values).
//
// A unit keeps in memory only the offsets of its image and of its last
// piece; the pieces chain backwards through the headers. Each byte
// received is written to the log at most once and read back once, when
// its chunk or shard is complete.
const (
	spillPrefix = "zarrgate-spill-"
	spillLog    = "log"
	recImage    = 1
	recPiece    = 2
	recHeader   = 24
	// spillBufBytes is the log's write buffer, reserved from the budget.
	spillBufBytes = 1 << 20
	// spillRecordBytes bounds a fixed-size piece record's data: larger
	// pieces are cut, so reading one back takes a small scratch buffer.
	spillRecordBytes = 256 << 10
	// spillVarElems bounds the elements of a variable-length piece record.
	spillVarElems = 16 << 10
	// staleSpillAge: a spill directory without a lock file (its process
	// died between creating the directory and the file) older than this is
	// removed even if a process with its pid runs.
	staleSpillAge = 24 * time.Hour
)

// spill is one call's spill log. Only the call's main goroutine appends;
// flush workers read records already written (sync makes them so).
type spill struct {
	dir   string
	f     *os.File
	bw    *bufio.Writer
	size  int64 // bytes appended, buffered ones included
	limit int64
	res   membudget.Reservation // the write buffer
}

// openSpill creates the call's spill directory and log under base (""
// for os.TempDir()), limited to limit bytes.
func openSpill(base string, limit int64, res membudget.Reservation) (*spill, error) {
	if base == "" {
		base = os.TempDir()
	}
	dir, err := os.MkdirTemp(base, spillPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, spillErr("create the spill directory", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, spillLog), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		os.RemoveAll(dir)
		return nil, spillErr("create the spill log", err)
	}
	return &spill{dir: dir, f: f, bw: bufio.NewWriterSize(offsetWriter{f, new(int64)}, spillBufBytes), limit: limit, res: res}, nil
}

// offsetWriter appends to f with WriteAt, leaving the file offset alone.
type offsetWriter struct {
	f   *os.File
	off *int64
}

func (w offsetWriter) Write(p []byte) (int, error) {
	n, err := w.f.WriteAt(p, *w.off)
	*w.off += int64(n)
	return n, err
}

// close removes the log and its directory.
func (s *spill) close() {
	if s == nil {
		return
	}
	s.f.Close()
	os.RemoveAll(s.dir)
	s.res.Release()
}

// spillErr is a failure of the local spill area: ResourceExhausted when
// the disk is full, Unavailable otherwise (a server-side fault, not the
// client's).
func spillErr(what string, err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return errs.New(errs.ResourceExhausted, "write: %s: the spill area (--spill-dir) is full: %v", what, err)
	}
	return errs.New(errs.Unavailable, "write: %s in the spill area (--spill-dir): %v", what, err)
}

// begin starts a record of kind with a payload of n bytes, chained after
// prev, and returns its offset; write then appends exactly n bytes.
func (s *spill) begin(prev int64, kind int64, n int64) (int64, error) {
	if s.size+recHeader+n > s.limit {
		return 0, errs.New(errs.ResourceExhausted, "write: the partial chunks spilled to disk would exceed the per-call limit of %s (--max-slab-bytes); write in smaller parts, or tile the blocks along the chunks", membudget.Size(s.limit))
	}
	off := s.size
	var h [recHeader]byte
	binary.NativeEndian.PutUint64(h[0:], uint64(prev))
	binary.NativeEndian.PutUint64(h[8:], uint64(kind))
	binary.NativeEndian.PutUint64(h[16:], uint64(n))
	return off, s.write(h[:])
}

func (s *spill) write(p []byte) error {
	n, err := s.bw.Write(p)
	s.size += int64(n)
	if err != nil {
		return spillErr("write the spill log", err)
	}
	return nil
}

func (s *spill) writeInt64s(v []int64) error {
	if len(v) == 0 {
		return nil
	}
	return s.write(unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*8))
}

// sync makes every record appended so far readable.
func (s *spill) sync() error {
	if err := s.bw.Flush(); err != nil {
		return spillErr("write the spill log", err)
	}
	return nil
}

// header reads the header of the record at off.
func (s *spill) header(off int64) (prev, kind, n int64, err error) {
	var h [recHeader]byte
	if _, err := s.f.ReadAt(h[:], off); err != nil {
		return 0, 0, 0, spillErr("read the spill log", err)
	}
	return int64(binary.NativeEndian.Uint64(h[0:])), int64(binary.NativeEndian.Uint64(h[8:])), int64(binary.NativeEndian.Uint64(h[16:])), nil
}

func (s *spill) readAt(p []byte, off int64) error {
	if _, err := s.f.ReadAt(p, off); err != nil {
		return spillErr("read the spill log", err)
	}
	return nil
}

// asBytes views v's memory as bytes (the log is native-endian).
func asBytes(v []uint64) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*8)
}

func asInt64s(b []byte) []int64 {
	if len(b) < 8 {
		return nil
	}
	return unsafe.Slice((*int64)(unsafe.Pointer(&b[0])), len(b)/8)
}

// CleanSpill removes, under dir ("" for os.TempDir()), the spill
// directories WriteSlab calls of dead processes left behind (a process
// killed mid-write cannot remove its own): those whose log no process holds
// locked, and those without a log whose pid is not running or that are
// older than a day. Directories of live calls, in this process or another,
// are kept. It returns the first error met, having tried every directory.
func CleanSpill(dir string) error {
	if dir == "" {
		dir = os.TempDir()
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	var first error
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), spillPrefix) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if !staleSpill(p, e) {
			continue
		}
		if err := os.RemoveAll(p); err != nil && first == nil {
			first = fmt.Errorf("remove stale spill directory: %w", err)
		}
	}
	return first
}

// staleSpill reports whether the spill directory p belongs to no live call.
func staleSpill(p string, e fs.DirEntry) bool {
	f, err := os.Open(filepath.Join(p, spillLog))
	if err == nil {
		defer f.Close()
		// The lock is held for the whole life of the call that made it,
		// and only then: taking it means nobody holds it.
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			return false
		}
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		return true
	}
	// No log (yet): the directory of a call starting, or of a process
	// that died before it made the log.
	rest := strings.TrimPrefix(e.Name(), spillPrefix)
	pidStr, _, _ := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(pidStr)
	if info, ierr := e.Info(); ierr == nil && time.Since(info.ModTime()) > staleSpillAge {
		return true
	}
	if err != nil || pid <= 0 {
		return false // not ours to judge by pid; the age rule covers it
	}
	return !processAlive(pid)
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

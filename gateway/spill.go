package gateway

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/zarr"
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

// spillUntil spills units held in memory, those of the least complete
// objects first (the others will complete soonest), until the data held
// is at most target; it reports whether it spilled any.
func (w *slabWriter) spillUntil(target int64) (bool, error) {
	if w.held.Load() <= target {
		return false, nil
	}
	var objs []*pendingObject
	for _, o := range w.objects {
		if o.inMemory > 0 {
			objs = append(objs, o)
		}
	}
	sort.Slice(objs, func(i, j int) bool {
		fi, fj := float64(objs[i].got)/float64(objs[i].need), float64(objs[j].got)/float64(objs[j].need)
		if fi != fj {
			return fi < fj
		}
		return objs[i].idx < objs[j].idx
	})
	spilled := false
	for _, o := range objs {
		if w.held.Load() <= target {
			break
		}
		idxs := make([]int, 0, len(o.units))
		for i, u := range o.units {
			if u.inMemory() {
				idxs = append(idxs, i)
			}
		}
		slices.Sort(idxs)
		for _, i := range idxs {
			if err := w.spillUnit(o, o.units[i]); err != nil {
				return spilled, err
			}
			spilled = true
			if w.held.Load() <= target {
				break
			}
		}
	}
	return spilled, nil
}

// openSpill creates the call's spill log on first use, with its write
// buffer and the scratch buffer pieces are gathered in, in the memory
// reserveSpill reserved.
func (w *slabWriter) openSpill() error {
	if w.spill != nil {
		return nil
	}
	if err := w.reserveSpill(false); err != nil {
		return err
	}
	limit := w.g.cfg.MaxSlabBytes
	s, err := openSpill(w.g.cfg.SpillDir, limit, w.spillRes)
	if err != nil {
		return err
	}
	w.spillRes = membudget.Reservation{} // the log's now
	w.spill = s
	w.scratch = make([]uint64, spillScratchWords(w.l))
	return nil
}

func spillScratchWords(l *layout) int { return max(spillRecordBytes, l.elem+7) / 8 }

// reserveSpill reserves the spill log's buffers. Spilling is what frees
// memory, so a call must not find itself holding units and waiting for
// these: a write that may spill (more data than its buffer holds) reserves
// them when it starts, holding nothing (atStart). Later, only a write of
// variable-length values (whose size was not known) can need them: it
// takes them if they are free now, and else waits for them, bounded by the
// budget's MaxWait.
func (w *slabWriter) reserveSpill(atStart bool) error {
	if w.spill != nil || w.spillRes.Bytes() > 0 {
		return nil
	}
	n := spillBufBytes + int64(spillScratchWords(w.l))*8
	if atStart {
		// The least the selection holds in memory: its elements, at least
		// a slice header each when of variable length.
		per := int64(w.l.elem)
		if per == 0 {
			per = 24
		}
		if elems, ok := zarr.ProductChecked(w.proj.Shape); ok {
			if bytes, ok := zarr.MulChecked(elems, per); ok && bytes <= w.g.cfg.WriteBufferBytes {
				return nil
			}
		}
	} else if r, ok := w.g.cfg.Budget.TryAcquire(n); ok {
		w.spillRes = r
		return nil
	}
	r, err := w.g.cfg.Budget.Acquire(w.ctx, n, fmt.Sprintf("write %q: the spill buffers", w.path))
	if err != nil {
		return err
	}
	w.spillRes = r
	return nil
}

// spillUnit writes a unit held in memory to the spill log as an image
// (its bitmap and the elements received, packed) and drops its buffers.
func (w *slabWriter) spillUnit(o *pendingObject, u *pendingUnit) error {
	if err := w.openSpill(); err != nil {
		return err
	}
	s := w.spill
	e := int64(w.l.elem)
	var k, vbytes int64
	for _, word := range u.seen {
		k += int64(bits.OnesCount64(word))
	}
	size := int64(len(u.seen)) * 8
	if e > 0 {
		size += k * e
	} else {
		eachSet(u.seen, func(i, j int64) {
			for ; i < j; i++ {
				vbytes += int64(len(u.vals[i]))
			}
		})
		size += (k+1)*8 + vbytes
	}
	off, err := s.begin(-1, recImage, size)
	if err != nil {
		return err
	}
	if err := s.write(asBytes(u.seen)); err != nil {
		return err
	}
	if e > 0 {
		err = eachSetErr(u.seen, func(i, j int64) error { return s.write(u.data[i*e : j*e]) })
	} else {
		offs := asInt64s(asBytes(w.scratch))
		offs[0] = 0
		n, pos := 1, int64(0)
		err = eachSetErr(u.seen, func(i, j int64) error {
			for ; i < j; i++ {
				pos += int64(len(u.vals[i]))
				offs[n] = pos
				if n++; n == len(offs) {
					if err := s.writeInt64s(offs); err != nil {
						return err
					}
					n = 0
				}
			}
			return nil
		})
		if err == nil {
			err = s.writeInt64s(offs[:n])
		}
		if err == nil {
			err = eachSetErr(u.seen, func(i, j int64) error {
				for ; i < j; i++ {
					if err := s.write(u.vals[i]); err != nil {
						return err
					}
				}
				return nil
			})
		}
	}
	if err != nil {
		return err
	}
	u.image = off
	o.spilled = true
	o.inMemory--
	w.unhold(u.bytes)
	// A pooled buffer is left to the garbage collector: spilling is rare.
	u.bytes, u.seen, u.data, u.vals, u.pooled, u.adopted = 0, nil, nil, nil, false, nil
	return nil
}

// logPiece appends the part of block b inside a spilled unit (the box
// count at src in the block, dst in the unit) to the spill log, cut into
// records a small scratch buffer can read back.
func (w *slabWriter) logPiece(o *pendingObject, u *pendingUnit, dst, src view, count []int64, b Block) error {
	if err := w.openSpill(); err != nil {
		return err
	}
	s := w.spill
	e := int64(w.l.elem)
	nd := len(count)
	maxElems := int64(spillVarElems)
	if e > 0 {
		maxElems = int64(len(w.scratch)*8) / e
	}
	hdr := make([]int64, 3*nd)
	d2 := view{shape: dst.shape, start: make([]int64, nd), step: dst.step}
	s2 := view{shape: src.shape, start: make([]int64, nd), step: src.step}
	return splitBox(count, maxElems, func(at, cnt []int64) error {
		for d := range nd {
			d2.start[d] = dst.start[d] + at[d]*dst.step[d]
			s2.start[d] = src.start[d] + at[d]*src.step[d]
			hdr[3*d], hdr[3*d+1], hdr[3*d+2] = d2.start[d], d2.step[d], cnt[d]
		}
		n := product(cnt)
		var off int64
		var err error
		if e > 0 {
			data := asBytes(w.scratch)[:n*e]
			copyBox(data, dense(cnt, make([]int64, nd)), b.Data, s2, cnt, int(e))
			if off, err = s.begin(u.pieces, recPiece, int64(24*nd)+n*e); err != nil {
				return err
			}
			if err := s.writeInt64s(hdr); err != nil {
				return err
			}
			if err := s.write(data); err != nil {
				return err
			}
		} else {
			offs := asInt64s(asBytes(w.scratch))[:n+1]
			k := 0
			offs[0] = 0
			eachIndex(s2, cnt, func(i int64) {
				offs[k+1] = offs[k] + b.Offsets[i+1] - b.Offsets[i]
				k++
			})
			if off, err = s.begin(u.pieces, recPiece, int64(24*nd)+(n+1)*8+offs[n]); err != nil {
				return err
			}
			if err := s.writeInt64s(hdr); err != nil {
				return err
			}
			if err := s.writeInt64s(offs); err != nil {
				return err
			}
			eachIndex(s2, cnt, func(i int64) {
				if err == nil {
					err = s.write(b.Data[b.Offsets[i]:b.Offsets[i+1]])
				}
			})
			if err != nil {
				return err
			}
		}
		u.pieces = off
		o.spilled = true
		return nil
	})
}

// splitBox cuts a box of the given count into boxes of at most maxElems
// elements (at least one), cut along the outer dimensions first, and calls
// fn with each one's offset and count (reused between calls).
func splitBox(count []int64, maxElems int64, fn func(at, cnt []int64) error) error {
	nd := len(count)
	at, cnt := make([]int64, nd), clone(count)
	if product(count) <= maxElems {
		return fn(at, cnt)
	}
	// d: the outermost dimension whose inner slices fit; it is cut into
	// k slices at a time, the dimensions before it one at a time.
	d, inner := nd-1, int64(1)
	for d >= 0 && inner*count[d] <= maxElems {
		inner *= count[d]
		d--
	}
	k := max(1, maxElems/inner)
	for i := range d {
		cnt[i] = 1
	}
	for {
		for j := int64(0); j < count[d]; j += k {
			at[d], cnt[d] = j, min(k, count[d]-j)
			if err := fn(at, cnt); err != nil {
				return err
			}
		}
		i := d - 1
		for ; i >= 0; i-- {
			at[i]++
			if at[i] < count[i] {
				break
			}
			at[i] = 0
		}
		if i < 0 {
			return nil
		}
	}
}

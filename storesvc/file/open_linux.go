package file

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// beneath opens files for reading with one openat2(RESOLVE_BENEATH) from
// the root's directory: the kernel refuses, as os.Root does, any path
// that would leave the root ("..", absolute symlinks, symlinks pointing
// out), in one system call where os.Root opens and closes every
// directory on the way (a chunk key "a/c/12/34" is eight calls). Issue
// 20: os.Root's opens were 5–11 % of the gateway's CPU on reads, and
// most of a small read's store time after its pread.
type beneath struct {
	once sync.Once
	dir  *os.File // the root's directory; nil if it could not be opened
	// off: openat2 is unavailable (an old kernel, a seccomp filter):
	// os.Root opens.
	off atomic.Bool
}

// openRead opens rel (a validated key's path) for reading.
func (s *Store) openRead(rel string) (*os.File, error) {
	b := &s.beneath
	b.once.Do(func() {
		if d, err := s.root.Open("."); err == nil {
			b.dir = d
		}
	})
	if b.dir == nil || b.off.Load() {
		return s.root.Open(rel)
	}
	how := unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS}
	for {
		fd, err := unix.Openat2(int(b.dir.Fd()), rel, &how)
		switch {
		case err == nil:
			return os.NewFile(uintptr(fd), rel), nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EXDEV):
			// The path resolves outside the root: os.Root's error.
			return nil, &fs.PathError{Op: "openat", Path: rel, Err: errors.New("path escapes from parent")}
		case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EPERM), errors.Is(err, unix.EINVAL):
			// No openat2 here (ENOSYS; EPERM from a seccomp filter;
			// EINVAL from a kernel without these flags), or a refusal
			// of this file: os.Root decides, and if it opens the file,
			// openat2 is off for good.
			f, err := s.root.Open(rel)
			if err == nil {
				b.off.Store(true)
			}
			return f, err
		case errors.Is(err, unix.EAGAIN):
			// The kernel could not rule out a race with a rename: os.Root
			// this once.
			return s.root.Open(rel)
		}
		return nil, &fs.PathError{Op: "openat2", Path: rel, Err: err}
	}
}

// closeBeneath closes the root directory's handle.
func (s *Store) closeBeneath() {
	if s.beneath.dir != nil {
		s.beneath.dir.Close()
	}
}

// maxIovecs is how many buffers one preadv takes (IOV_MAX).
const maxIovecs = 1024

// iovecs are preadv's buffer lists, reused: a chunk read into its rows
// has one per row.
var iovecs = sync.Pool{New: func() any { return new([maxIovecs]unix.Iovec) }}

// readVecAt reads bufs in order from f at off with preadv, 1024 buffers
// at a time, going on after short reads; it stops at the file's end.
func readVecAt(f *os.File, bufs [][]byte, off int64) (int64, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	iov := iovecs.Get().(*[maxIovecs]unix.Iovec)
	defer func() {
		clear(iov[:]) // no pointers into buffers left in the pool
		iovecs.Put(iov)
	}()
	var n int64
	for len(bufs) > 0 {
		k := 0
		for _, b := range bufs[:min(len(bufs), maxIovecs)] {
			if len(b) > 0 {
				iov[k].Base = &b[0]
				iov[k].SetLen(len(b))
				k++
			}
		}
		if k == 0 {
			break
		}
		var got uintptr
		var errno syscall.Errno
		err := rc.Control(func(fd uintptr) {
			for {
				pos := off + n
				got, _, errno = unix.Syscall6(unix.SYS_PREADV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(k), uintptr(pos), uintptr(uint64(pos)>>32>>32), 0)
				if errno != unix.EINTR {
					return
				}
			}
		})
		if err == nil && errno != 0 {
			err = errno
		}
		if err != nil {
			return n, err
		}
		if got == 0 {
			return n, io.EOF
		}
		n += int64(got)
		left := int(got)
		for left > 0 && len(bufs) > 0 {
			if left < len(bufs[0]) {
				// A short read: the rest of this buffer next time (the
				// caller's list is not changed: a copy of the header).
				rest := append([][]byte{bufs[0][left:]}, bufs[1:]...)
				bufs, left = rest, 0
			} else {
				left -= len(bufs[0])
				bufs = bufs[1:]
			}
		}
		for len(bufs) > 0 && len(bufs[0]) == 0 {
			bufs = bufs[1:]
		}
	}
	return n, nil
}

//go:build linux

package shm

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// memfd makes an anonymous memory file of size bytes, its pages
// allocated; sealed, against shrinking and growing, so that a process that
// maps it and writes into it (a codec worker) can never fault on a page
// cut off under it.
func memfd(size int64, sealed bool) (*os.File, error) {
	flags := unix.MFD_CLOEXEC
	if sealed {
		flags |= unix.MFD_ALLOW_SEALING
	}
	fd, err := unix.MemfdCreate("zarrgate-slab", flags)
	if err != nil {
		return nil, fmt.Errorf("create shared memory: %w", err)
	}
	f := os.NewFile(uintptr(fd), "zarrgate-slab")
	if err := unix.Fallocate(fd, 0, 0, size); err != nil {
		f.Close()
		return nil, fmt.Errorf("reserve %d bytes of shared memory: %w", size, err)
	}
	if sealed {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
			f.Close()
			return nil, fmt.Errorf("seal shared memory: %w", err)
		}
	}
	return f, nil
}

// mapFile maps size bytes of f, its pages mapped at once.
func mapFile(f *os.File, size int64, write bool) ([]byte, error) {
	prot := syscall.PROT_READ
	if write {
		prot |= syscall.PROT_WRITE
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), prot, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", f.Name(), err)
	}
	return data, nil
}

func unmap(b []byte) error { return syscall.Munmap(b) }

// openSegment opens without blocking on a FIFO or taking a terminal: the
// path comes from the other side of the call. (/proc/<pid>/fd/<n> is a
// symbolic link, so it is followed; what it leads to is checked by the
// caller.)
func openSegment(path string, write bool) (*os.File, error) {
	mode := os.O_RDONLY
	if write {
		// Opened read-write only if it names a memory file: a descriptor
		// of some process that leads to a device or a FIFO is not even
		// opened (opening some devices acts). What it is, is checked
		// again once open (anonymous).
		if !procFD.MatchString(path) {
			return nil, errors.New("not a process's file descriptor (/proc/<pid>/fd/<n>)")
		}
		if to, err := os.Readlink(path); err != nil || !strings.HasPrefix(to, "/memfd:") {
			return nil, fmt.Errorf("not a memory file (%q)", to)
		}
		mode = os.O_RDWR
	}
	return os.OpenFile(path, mode|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
}

// Supported reports whether this platform has shared memory segments.
const Supported = true

var procFD = regexp.MustCompile(`^/proc/[0-9]+/fd/[0-9]+$`)

// anonymous checks that f, opened at path, is an anonymous memory file: a
// process's descriptor (/proc/<pid>/fd/<n>), linked in no directory, on
// shared memory (which alone answers F_GET_SEALS), sealed against
// shrinking.
func anonymous(path string, f *os.File, st fs.FileInfo) error {
	if !procFD.MatchString(path) {
		return errors.New("not a process's file descriptor (/proc/<pid>/fd/<n>)")
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || sys.Nlink != 0 {
		return errors.New("not an anonymous memory file (it has a name)")
	}
	seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
	if err != nil {
		return fmt.Errorf("not a memory file: %w", err)
	}
	// Mapped and written through: a file that its owner could shrink
	// would fault this process (SIGBUS) on the pages cut off.
	if seals&unix.F_SEAL_SHRINK == 0 {
		return errors.New("not sealed against shrinking (F_SEAL_SHRINK)")
	}
	return nil
}

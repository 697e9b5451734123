//go:build linux

package shm

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"syscall"

	"golang.org/x/sys/unix"
)

// memfd makes an anonymous memory file of size bytes, its pages allocated.
func memfd(size int64) (*os.File, error) {
	fd, err := unix.MemfdCreate("zarrgate-slab", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("create shared memory: %w", err)
	}
	f := os.NewFile(uintptr(fd), "zarrgate-slab")
	if err := unix.Fallocate(fd, 0, 0, size); err != nil {
		f.Close()
		return nil, fmt.Errorf("reserve %d bytes of shared memory: %w", size, err)
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
		mode = os.O_RDWR
	}
	return os.OpenFile(path, mode|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
}

// Supported reports whether this platform has shared memory segments.
const Supported = true

var procFD = regexp.MustCompile(`^/proc/[0-9]+/fd/[0-9]+$`)

// anonymous checks that f, opened at path, is an anonymous memory file: a
// process's descriptor (/proc/<pid>/fd/<n>), linked in no directory, on
// shared memory (which alone answers F_GET_SEALS).
func anonymous(path string, f *os.File, st fs.FileInfo) error {
	if !procFD.MatchString(path) {
		return errors.New("not a process's file descriptor (/proc/<pid>/fd/<n>)")
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || sys.Nlink != 0 {
		return errors.New("not an anonymous memory file (it has a name)")
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0); err != nil {
		return fmt.Errorf("not a memory file: %w", err)
	}
	return nil
}

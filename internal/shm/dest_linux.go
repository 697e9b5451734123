//go:build linux

package shm

import (
	"crypto/rand"
	"crypto/subtle"
	"fmt"
	"os"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// NewDest makes a destination of size bytes of data: a memory file sealed
// against shrinking and growing (and against changing its seals), mapped
// with its pages allocated, a fresh token in its first page.
func NewDest(size int64) (*Dest, error) {
	if size < 0 || size > MaxDestBytes {
		return nil, fmt.Errorf("shared destination of %d bytes: out of range", size)
	}
	fd, err := unix.MemfdCreate("zarrgate-dest", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("create shared destination: %w", err)
	}
	f := os.NewFile(uintptr(fd), "zarrgate-dest")
	total := DestOffset + size
	if err := unix.Ftruncate(fd, total); err != nil {
		f.Close()
		return nil, fmt.Errorf("size shared destination: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		f.Close()
		return nil, fmt.Errorf("seal shared destination: %w", err)
	}
	mem, err := syscall.Mmap(fd, 0, int(total), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("map shared destination: %w", err)
	}
	d := &Dest{Pid: os.Getpid(), Fd: fd, Token: make([]byte, TokenBytes), mem: mem}
	rand.Read(d.Token)
	copy(mem, d.Token)
	d.close = func() error {
		err := unmap(mem)
		if e := f.Close(); err == nil {
			err = e
		}
		return err
	}
	return d, nil
}

// OpenDest opens, checks and maps the destination of a client: descriptor
// fd of process pid, with size bytes of data and token in its first page.
// Any failed check is an ErrDestRefused saying which; nothing is written.
// c, if not nil, keeps the mapping for later reads of the same memory
// file (DestMap.Close), and takes one from it when it has one: every check
// is made again, only the mapping is reused.
func (c *DestCache) OpenDest(pid, fd int, size int64, token []byte) (*DestMap, error) {
	if err := checkDestToken(token); err != nil {
		return nil, err
	}
	if pid <= 0 || fd < 0 {
		return nil, refuse("process %d descriptor %d", pid, fd)
	}
	if size < 0 || size > MaxDestBytes {
		return nil, refuse("%d bytes: out of range", size)
	}
	path := fmt.Sprintf("/proc/%d/fd/%d", pid, fd)
	// What the link leads to must be a memory file: not a file on disk, a
	// FIFO or a device. (Checked again below on the file opened: seals.)
	if target, err := os.Readlink(path); err != nil {
		return nil, refuse("%s: %v (another host, user or process namespace?)", path, err)
	} else if !strings.HasPrefix(target, "/memfd:") {
		return nil, refuse("%s is not a memory file", path)
	}
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, refuse("open %s: %v", path, err)
	}
	defer f.Close()
	seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, refuse("%s has no seals: %v", path, err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return nil, refuse("%s is not sealed against shrinking (F_SEAL_SHRINK)", path)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, refuse("stat %s: %v", path, err)
	}
	total := DestOffset + size
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size < total {
		return nil, refuse("%s has %d bytes, want at least %d", path, st.Size, total)
	}
	// The file is the process's user's: a gateway of more rights (root)
	// never writes, for a client, a file it was only lent.
	var ps unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/%d", pid), &ps); err != nil {
		return nil, refuse("stat process %d: %v", pid, err)
	}
	if st.Uid != ps.Uid {
		return nil, refuse("%s belongs to user %d, the process to user %d", path, st.Uid, ps.Uid)
	}
	id := destID{dev: uint64(st.Dev), ino: st.Ino}
	mem := c.take(id, total)
	fresh := mem == nil
	if fresh {
		mem, err = syscall.Mmap(int(f.Fd()), 0, int(total), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
		if err != nil {
			return nil, refuse("map %s: %v", path, err)
		}
	}
	// Every page must be the client's already (NewDest maps them
	// populated): a page the gateway's write brought into being would be
	// charged to the gateway's memory (a shared page belongs to the
	// cgroup that first touches it), so a sparse file would let a client
	// grow the gateway by the size of its read.
	if ok, err := resident(mem[:total]); err != nil || !ok {
		unmap(mem)
		if err != nil {
			return nil, refuse("%s: mincore: %v", path, err)
		}
		return nil, refuse("%s has pages the client has not allocated (a sparse or swapped-out memory file)", path)
	}
	if subtle.ConstantTimeCompare(mem[:TokenBytes], token) != 1 {
		unmap(mem)
		return nil, refuse("%s does not hold the token", path)
	}
	if fresh {
		// The page tables at once (as MAP_POPULATE would, but only now
		// that every page is known to be there); older kernels fault them
		// in as the slab is written.
		_ = unix.Madvise(mem, unix.MADV_POPULATE_WRITE)
	}
	return &DestMap{Data: mem[DestOffset:total:total], mem: mem, cache: c, id: id}, nil
}

// residentWindow is how much of a mapping one mincore call checks (its
// vector: a byte per page, 64 KiB for 256 MiB).
const residentWindow = 256 << 20

// resident reports whether every page of mem (a page-aligned mapping) is
// in memory.
func resident(mem []byte) (bool, error) {
	page := os.Getpagesize()
	vec := make([]byte, residentWindow/page)
	for off := 0; off < len(mem); off += residentWindow {
		n := min(residentWindow, len(mem)-off)
		pages := (n + page - 1) / page
		if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[off])), uintptr(n), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
			return false, errno
		}
		for _, v := range vec[:pages] {
			if v&1 == 0 {
				return false, nil
			}
		}
	}
	return true, nil
}

// OpenDest is OpenDest without a cache.
func OpenDest(pid, fd int, size int64, token []byte) (*DestMap, error) {
	return (*DestCache)(nil).OpenDest(pid, fd, size, token)
}

// DestSupported reports whether this platform has shared destinations.
const DestSupported = true

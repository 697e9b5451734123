package bulk

import (
	"io"
	"net"
	"syscall"
	"unsafe"
)

// rawReader reads a TCP connection's socket with readv.
type rawReader struct {
	rc  syscall.RawConn
	iov []syscall.Iovec
}

// newRawReader returns a readv reader of r's socket, or nil if r is not a
// plain TCP connection (TLS reads decrypt through their own buffers).
func newRawReader(r io.Reader) *rawReader {
	c, ok := r.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	return &rawReader{rc: rc}
}

// readv reads into the slices of b in order, as one readv(2) once the
// socket has something to read: how much it read, 0 at the end of the
// connection. b has at most maxIovecs slices.
func (r *rawReader) readv(b [][]byte) (int, error) {
	iov := r.iov[:0]
	for _, p := range b {
		if len(p) == 0 {
			continue
		}
		v := syscall.Iovec{Base: &p[0]}
		v.SetLen(len(p))
		iov = append(iov, v)
	}
	r.iov = iov
	defer clear(r.iov) // no references to the destination left behind
	if len(iov) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := r.rc.Read(func(fd uintptr) bool {
		for {
			m, _, e := syscall.Syscall(syscall.SYS_READV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // wait until the socket is readable
			}
			n, errno = int(m), e
			return true
		}
	})
	if err != nil {
		return 0, err
	}
	if errno != 0 {
		return 0, errno
	}
	return n, nil
}

// Command rawtcp measures the floor of a socket read on this machine: the
// CPU a sender and a receiver spend to move 512 MiB over a loopback TCP
// connection in 256 KiB writes, the receiver reading each straight into
// its place in one 512 MiB destination (no user-space copy at all), or
// with -place through a 256 KiB buffer copied into place as the 256 rows
// of a 256×256 float32 chunk of a 16384×8192 array (the clients' one
// copy), or with -readv straight into those rows with one readv (one
// iovec per row) and what is left of them after short reads. It prints the receiver's wall time, MB/s and CPU per read, and
// the sender's CPU per read (docs/benchmarks.md, issue 20 target 1).
//
//	go run ./bench/rawtcp [-reads 3] [-place | -readv]
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"syscall"
	"time"
	"unsafe"
)

const (
	block  = 256 << 10
	blocks = 2048 // 512 MiB
)

func cpu() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_THREAD, &ru); err != nil {
		log.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func main() {
	reads := flag.Int("reads", 3, "reads")
	place := flag.Bool("place", false, "read into a buffer and copy each block into place")
	rows := flag.Bool("readv", false, "read each block with readv straight into its 256 rows in place")
	huge := flag.Bool("huge", false, "the destination in transparent huge pages (mmap + MADV_HUGEPAGE)")
	flag.Parse()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	sent := make(chan time.Duration)
	go func() {
		src := make([]byte, block)
		for i := range src {
			src[i] = byte(i)
		}
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			func() {
				// The sender's CPU: this goroutine's thread only.
				lockThread()
				defer unlockThread()
				c0 := cpu()
				for range blocks {
					if _, err := c.Write(src); err != nil {
						log.Fatal(err)
					}
				}
				c.Close()
				sent <- cpu() - c0
			}()
		}
	}()
	dst := make([]byte, blocks*block)
	if *huge {
		if dst, err = syscall.Mmap(-1, 0, blocks*block, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE); err != nil {
			log.Fatal(err)
		}
		if err := syscall.Madvise(dst, 14); err != nil { // MADV_HUGEPAGE
			log.Fatal(err)
		}
	}
	for i := range dst {
		dst[i] = 1 // touched: no page faults in the timed reads
	}
	buf := make([]byte, block)
	lockThread()
	for range *reads {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			log.Fatal(err)
		}
		t0, c0 := time.Now(), cpu()
		var rc syscall.RawConn
		if *rows {
			if rc, err = c.(*net.TCPConn).SyscallConn(); err != nil {
				log.Fatal(err)
			}
		}
		for i := range blocks {
			if *rows {
				ci, cj := i/32, i%32
				readvRows(rc, func(row int) []byte {
					off := ((ci*256+row)*8192 + cj*256) * 4
					return dst[off : off+1024]
				})
				continue
			}
			if !*place {
				if _, err := io.ReadFull(c, dst[i*block:(i+1)*block]); err != nil {
					log.Fatal(err)
				}
				continue
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				log.Fatal(err)
			}
			ci, cj := i/32, i%32
			for row := range 256 {
				off := ((ci*256+row)*8192 + cj*256) * 4
				copy(dst[off:off+1024], buf[row*1024:(row+1)*1024])
			}
		}
		el, used := time.Since(t0), cpu()-c0
		c.Close()
		fmt.Printf("receiver %v %.0f MB/s, cpu %v; sender cpu %v\n", el.Round(time.Millisecond),
			float64(blocks*block)/el.Seconds()/1e6, used.Round(time.Millisecond), (<-sent).Round(time.Millisecond))
	}
}

// readvRows reads a block into its 256 rows with readv, continuing after
// short reads.
func readvRows(rc syscall.RawConn, row func(int) []byte) {
	iov := make([]syscall.Iovec, 256)
	for r := range iov {
		b := row(r)
		iov[r] = syscall.Iovec{Base: &b[0]}
		iov[r].SetLen(len(b))
	}
	for len(iov) > 0 {
		var n uintptr
		var e syscall.Errno
		err := rc.Read(func(fd uintptr) bool {
			n, _, e = syscall.Syscall(syscall.SYS_READV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
			return e != syscall.EAGAIN
		})
		if err != nil || e != 0 || n == 0 {
			log.Fatal("readv: ", err, e, n)
		}
		for n > 0 {
			if k := uintptr(iov[0].Len); n >= k {
				n -= k
				iov = iov[1:]
				continue
			}
			iov[0].Base = (*byte)(unsafe.Add(unsafe.Pointer(iov[0].Base), n))
			iov[0].SetLen(int(uint64(iov[0].Len) - uint64(n)))
			n = 0
		}
	}
}

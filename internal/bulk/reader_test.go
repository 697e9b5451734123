//go:build linux

package bulk_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"syscall"
	"testing"

	"github.com/zarrgate/zarrgate/internal/bulk"
)

// TestReaderParts reads frames of random sizes in parts (Begin, Peek,
// Discard, ReadInto into many slices, Rest) from a real loopback socket
// whose receive buffer is a few KiB and whose sender writes in pieces of
// random size, so that readv returns short counts, and through a reader
// without a socket (Read, as over TLS); every byte lands where it
// belongs.
func TestReaderParts(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var frames [][]byte
	var stream []byte
	for i := range 60 {
		n := 1 + r.IntN(300<<10)
		if i%4 == 0 {
			n = 1 + r.IntN(600) // small ones, several in one read-ahead
		}
		f := make([]byte, n)
		for j := range f {
			f[j] = byte(r.Uint32())
		}
		frames = append(frames, f)
		stream = binary.LittleEndian.AppendUint64(stream, uint64(n))
		stream = append(stream, f...)
	}
	stream = append(stream, make([]byte, 8)...) // the end frame
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for seed := uint64(0); ; seed++ {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			w := rand.New(rand.NewPCG(seed, 7))
			for b := stream; len(b) > 0; {
				k := min(len(b), 1+w.IntN(40<<10))
				if w.IntN(3) == 0 {
					k = min(len(b), 1+w.IntN(100))
				}
				if _, err := c.Write(b[:k]); err != nil {
					break
				}
				b = b[k:]
			}
			c.Close()
		}
	}()
	for _, direct := range []bool{true, false} {
		d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
			})
			if err != nil {
				return err
			}
			return serr
		}}
		c, err := d.Dial("tcp", lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		var in io.Reader = c
		if !direct {
			in = struct{ io.Reader }{c}
		}
		rd := bulk.NewReader(in, 1<<20)
		most := 0 // slices of one ReadInto
		if rd.Direct() != direct {
			t.Fatalf("Direct() = %v over %T", rd.Direct(), in)
		}
		for i, want := range frames {
			n, err := rd.Begin()
			if err != nil || n != len(want) || rd.Left() != n {
				t.Fatalf("frame %d: Begin = %d, %v; want %d", i, n, err, len(want))
			}
			got := make([]byte, 0, n)
			nparts := 0
			if i%5 == 4 {
				f, err := rd.Rest(i%2 == 0)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, f...)
			} else {
				p, err := rd.Peek(1 + r.IntN(300))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(p, want[:len(p)]) {
					t.Fatalf("frame %d: Peek returns other bytes", i)
				}
				if err := rd.Discard(rd.Left() + 1); !errors.Is(err, bulk.ErrFrame) {
					t.Fatalf("frame %d: Discard past the frame: %v", i, err)
				}
				k := r.IntN(len(p) + 1)
				if err := rd.Discard(k); err != nil {
					t.Fatal(err)
				}
				got = append(got, p[:k]...)
				if err := rd.ReadInto([][]byte{make([]byte, rd.Left()+1)}); !errors.Is(err, bulk.ErrFrame) {
					t.Fatalf("frame %d: ReadInto past the frame: %v", i, err)
				}
				// The rest of the frame but a few bytes, in up to 3000
				// slices (readv takes 1024 at most), some empty, some
				// frames with 1500 empty ones at the end.
				rest := rd.Left() - r.IntN(min(rd.Left(), 10)+1)
				dst := make([]byte, rest)
				var parts [][]byte
				avg := max(1, rest/(1+r.IntN(3000)))
				for off := 0; off < rest; {
					m := min(rest-off, r.IntN(2*avg+1))
					parts = append(parts, dst[off:off+m])
					off += m
				}
				if i%7 == 3 { // more empty slices at the end than a readv takes
					parts = append(parts, make([][]byte, 1500)...)
				}
				nparts = len(parts)
				if err := rd.ReadInto(parts); err != nil {
					t.Fatalf("frame %d: ReadInto %d slices: %v", i, len(parts), err)
				}
				got = append(got, dst...)
				tail, err := rd.Rest(false)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, tail...)
			}
			most = max(most, nparts)
			if !bytes.Equal(got, want) {
				t.Fatalf("frame %d (direct %v): %d bytes read differ from the %d sent", i, direct, len(got), len(want))
			}
			if rd.Left() != 0 {
				t.Fatalf("frame %d: %d bytes left after all of it", i, rd.Left())
			}
		}
		if _, err := rd.Begin(); err != io.EOF {
			t.Fatalf("after the last frame: %v", err)
		}
		if most <= 1024 {
			t.Errorf("at most %d slices in one ReadInto: the test does not test more than a readv takes", most)
		}
		if direct && bulk.ShortReads(rd) == 0 {
			t.Errorf("no readv returned short: the test does not test that")
		}
		c.Close()
	}
}

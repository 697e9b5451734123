package arrayserver

import (
	"io"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/internal/shm"
)

// openDest starts a ReadSlabShared of rows [lo, hi) of the fixture naming
// dest (the client's memory) and returns the stream and the header.
func openDest(t *testing.T, c gatewayv1.ArrayServiceClient, lo, hi uint64, dest *gatewayv1.SharedDestination) (sharedStream, *gatewayv1.SlabHeader) {
	t.Helper()
	s, err := c.ReadSlabShared(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Send(&gatewayv1.ReadSlabSharedRequest{
		Message: &gatewayv1.ReadSlabSharedRequest_Read{Read: &gatewayv1.ReadSlabRequest{Path: "a",
			Selection: []*gatewayv1.Slice{{Start: lo, Stop: hi}, {Start: 0, Stop: 640}}}},
		Destination: dest})
	m, err := s.Recv()
	if err != nil || m.GetHeader() == nil {
		t.Fatalf("header: %v, %v", m, err)
	}
	return s, m.GetHeader()
}

func destProto(d *shm.Dest) *gatewayv1.SharedDestination {
	return &gatewayv1.SharedDestination{Pid: uint32(d.Pid), Fd: uint32(d.Fd), Size: uint64(len(d.Data())), Token: d.Token}
}

// newDest is client memory of size bytes (shm.NewDest), closed when the
// test ends; the test is skipped where there are no memory files.
func newDest(t *testing.T, size int64) *shm.Dest {
	t.Helper()
	if !shm.DestSupported {
		t.Skip("no shared memory files on this platform")
	}
	d, err := shm.NewDest(size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// refusedMemory makes, beside d (512 × 640 int32), client memory a
// gateway must refuse to use: small, a memory file one element too small;
// d named with a wrong token; an unsealed memory file holding d's token;
// small named with d's size. They are closed when the test ends.
func refusedMemory(t *testing.T, d *shm.Dest) (small *shm.Dest, wrong, unsealed, claimed *gatewayv1.SharedDestination) {
	t.Helper()
	small = newDest(t, 512*640*4-4)
	ufd, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	uf := os.NewFile(uintptr(ufd), "unsealed")
	t.Cleanup(func() { uf.Close() })
	uf.Truncate(shm.DestOffset + 512*640*4)
	uf.WriteAt(d.Token, 0)

	wrong = destProto(d)
	wrong.Token = append([]byte(nil), d.Token...)
	wrong.Token[0] ^= 1
	unsealed = destProto(d)
	unsealed.Fd = uint32(ufd)
	claimed = destProto(small)
	claimed.Size = 512 * 640 * 4
	return small, wrong, unsealed, claimed
}

// TestReadSlabSharedDestination: the gateway writes the slab into the
// client's destination, then ends with the count of elements and nothing
// else; whole chunks and partial ones.
func TestReadSlabSharedDestination(t *testing.T) {
	d := newDest(t, 512*640*4)
	c := sharedFixture(t, gateway.Config{SharedMemory: true})
	for _, rows := range [][2]uint64{{0, 512}, {0, 128}, {37, 301}} {
		clear(d.Data())
		s, h := openDest(t, c, rows[0], rows[1], destProto(d))
		if !h.GetDestination().GetAccepted() || h.GetSharedSegment() != nil {
			t.Fatalf("rows %v: destination %v, segment %v", rows, h.GetDestination(), h.GetSharedSegment())
		}
		n := (rows[1] - rows[0]) * 640
		msg, err := s.Recv()
		if err != nil || msg.GetEnd() == nil || msg.GetEnd().GetDestinationElements() != n {
			t.Fatalf("rows %v: end %v, block %v, %v; want the end with %d elements", rows, msg.GetEnd(), msg.GetBlock() != nil, err, n)
		}
		if _, err := s.Recv(); err != io.EOF {
			t.Fatalf("rows %v: after the end: %v", rows, err)
		}
		checkRows(t, d.Data()[:n*4], rows[0])
	}
}

// TestReadSlabSharedDestinationRefused: a destination the gateway must not
// write — another file's token, an unsealed memory file, one too small,
// a size claimed larger than the file, a gateway with shared memory off —
// is refused with the reason in the header, nothing written to it, and the
// read goes on as without it (the segment offered, blocks inline here).
func TestReadSlabSharedDestinationRefused(t *testing.T) {
	d := newDest(t, 512*640*4)
	on := sharedFixture(t, gateway.Config{SharedMemory: true})
	off := sharedFixture(t, gateway.Config{SharedMemory: false})
	small, wrong, unsealed, claimed := refusedMemory(t, d)
	for _, tc := range []struct {
		name string
		c    gatewayv1.ArrayServiceClient
		dest *gatewayv1.SharedDestination
		want string
	}{
		{"wrong token", on, wrong, "token"},
		{"unsealed", on, unsealed, "not sealed"},
		{"too small", on, destProto(small), "the slab needs"},
		{"larger than the file", on, claimed, "want at least"},
		{"shared memory off", off, destProto(d), "shared memory is off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clear(d.Data())
			s, h := openDest(t, tc.c, 0, 512, tc.dest)
			ans := h.GetDestination()
			if ans.GetAccepted() || !strings.Contains(ans.GetReason(), tc.want) {
				t.Fatalf("answer %v, want a refusal saying %q", ans, tc.want)
			}
			if h.GetSharedSegment() != nil {
				sendAttach(s, false)
			}
			checkRows(t, recvInline(t, s, 512), 0)
			for _, b := range d.Data()[:4096] {
				if b != 0 {
					t.Fatal("the refused destination was written")
				}
			}
		})
	}
}

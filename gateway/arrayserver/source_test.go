package arrayserver

import (
	"encoding/binary"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/gateway"
)

// createW makes the int32 array "w", 512 × 640 in chunks of 64 × 128, all
// fill value (0), beside the fixture's "a".
func createW(t *testing.T, c gatewayv1.ArrayServiceClient) {
	t.Helper()
	if _, err := c.DeleteNode(ctx, &gatewayv1.DeleteNodeRequest{Path: "w"}); err != nil && status.Code(err) != codes.NotFound {
		t.Fatal(err)
	}
	if _, err := c.CreateArray(ctx, &gatewayv1.CreateArrayRequest{Path: "w", Shape: []uint64{512, 640}, DataType: "int32", ChunkShape: []uint64{64, 128},
		CodecsJson: `[{"name":"bytes","configuration":{"endian":"little"}}]`}); err != nil {
		t.Fatal(err)
	}
}

// readW reads the whole of "w" through ReadSlab.
func readW(t *testing.T, c gatewayv1.ArrayServiceClient) []byte {
	t.Helper()
	rs, err := c.ReadSlab(ctx, &gatewayv1.ReadSlabRequest{Path: "w"})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 512*640*4)
	for {
		m, err := rs.Recv()
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		if b := m.GetBlock(); b != nil {
			place(t, got, b, b.GetData())
		}
	}
}

func writeShared(c gatewayv1.ArrayServiceClient, lo, hi uint64, src *gatewayv1.SharedDestination) (*gatewayv1.WriteSlabSharedResponse, error) {
	return c.WriteSlabShared(ctx, &gatewayv1.WriteSlabSharedRequest{Path: "w",
		Selection: []*gatewayv1.Slice{{Start: lo, Stop: hi}, {Start: 0, Stop: 640}}, Source: src})
}

// TestWriteSlabSharedSource: the gateway reads the slab from the client's
// memory and writes it, whole chunks and partial ones (rows 37 to 301 cut
// chunks at both ends); the rest of the array keeps the fill value.
func TestWriteSlabSharedSource(t *testing.T) {
	d := newDest(t, 512*640*4)
	c := sharedFixture(t, gateway.Config{SharedMemory: true})
	for _, rows := range [][2]uint64{{0, 512}, {0, 128}, {37, 301}} {
		createW(t, c)
		n := (rows[1] - rows[0]) * 640
		for i := range n {
			binary.LittleEndian.PutUint32(d.Data()[4*i:], uint32(rows[0]*640+i))
		}
		resp, err := writeShared(c, rows[0], rows[1], destProto(d))
		if err != nil {
			t.Fatal(err)
		}
		if !resp.GetSource().GetAccepted() || resp.GetChunksWritten() == 0 {
			t.Fatalf("rows %v: %v", rows, resp)
		}
		got := readW(t, c)
		checkRows(t, got[rows[0]*640*4:rows[1]*640*4], rows[0])
		for i, b := range got {
			if (uint64(i) < rows[0]*640*4 || uint64(i) >= rows[1]*640*4) && b != 0 {
				t.Fatalf("rows %v: byte %d outside the selection written", rows, i)
			}
		}
	}
}

// TestWriteSlabSharedSourceRefused: memory the gateway must not read —
// another file's token, an unsealed memory file, one too small, a size
// claimed larger than the file, a gateway with shared memory off, an array
// of strings — is refused with the reason, and nothing is written; an
// unknown array (NotFound) or a selection out of bounds (OutOfRange) is
// the write's error, a request without a source InvalidArgument.
func TestWriteSlabSharedSourceRefused(t *testing.T) {
	d := newDest(t, 512*640*4)
	on := sharedFixture(t, gateway.Config{SharedMemory: true})
	off := sharedFixture(t, gateway.Config{SharedMemory: false})
	for i := range len(d.Data()) / 4 {
		binary.LittleEndian.PutUint32(d.Data()[4*i:], uint32(i)+1)
	}
	small, wrong, unsealed, claimed := refusedMemory(t, d)
	for _, tc := range []struct {
		name     string
		c        gatewayv1.ArrayServiceClient
		dataType string
		src      *gatewayv1.SharedDestination
		want     string
	}{
		{"wrong token", on, "int32", wrong, "token"},
		{"unsealed", on, "int32", unsealed, "not sealed"},
		{"too small", on, "int32", destProto(small), "source of 1310716 bytes, the slab needs 1310720"},
		{"larger than the file", on, "int32", claimed, "want at least"},
		{"shared memory off", off, "int32", destProto(d), "shared memory is off"},
		{"another process's", on, "int32", &gatewayv1.SharedDestination{Pid: 1, Fd: 0, Size: 512 * 640 * 4, Token: d.Token}, "source: shared destination refused"},
		{"strings", on, "string", destProto(d), "no fixed size: its slab cannot be read from shared memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			createW(t, tc.c)
			if tc.dataType != "int32" {
				if _, err := tc.c.DeleteNode(ctx, &gatewayv1.DeleteNodeRequest{Path: "w"}); err != nil {
					t.Fatal(err)
				}
				if _, err := tc.c.CreateArray(ctx, &gatewayv1.CreateArrayRequest{Path: "w", Shape: []uint64{512, 640}, DataType: tc.dataType,
					ChunkShape: []uint64{64, 128}, CodecsJson: `[{"name":"vlen-utf8"}]`}); err != nil {
					t.Fatal(err)
				}
			}
			resp, err := writeShared(tc.c, 0, 512, tc.src)
			if err != nil {
				t.Fatal(err)
			}
			if ans := resp.GetSource(); ans.GetAccepted() || !strings.Contains(ans.GetReason(), tc.want) || resp.GetChunksWritten() != 0 {
				t.Fatalf("answer %v, want a refusal saying %q and nothing written", resp, tc.want)
			}
			if tc.dataType != "int32" {
				return
			}
			for i, b := range readW(t, tc.c) {
				if b != 0 {
					t.Fatalf("byte %d written by a refused write", i)
				}
			}
		})
	}
	createW(t, on)
	for _, tc := range []struct {
		name string
		req  *gatewayv1.WriteSlabSharedRequest
		want codes.Code
	}{
		{"unknown array", &gatewayv1.WriteSlabSharedRequest{Path: "nope", Source: destProto(d)}, codes.NotFound},
		{"out of bounds", &gatewayv1.WriteSlabSharedRequest{Path: "w", Selection: []*gatewayv1.Slice{{Start: 0, Stop: 513}, {Start: 0, Stop: 640}}, Source: destProto(d)}, codes.OutOfRange},
		{"no source", &gatewayv1.WriteSlabSharedRequest{Path: "w"}, codes.InvalidArgument},
	} {
		if _, err := on.WriteSlabShared(ctx, tc.req); status.Code(err) != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

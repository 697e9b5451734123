package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/codecsvc/remote"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/zarr"
)

// codecWorker serves a codec worker on loopback (charging a memory budget
// when budget is set, as zarrgate codec-worker does) and returns the
// remote engine on it.
func codecWorker(t *testing.T, budget bool) *remote.Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	s := codecsvc.NewServer(codecsvc.NewLocal())
	if budget {
		s = codecsvc.NewBudgetServer(codecsvc.NewLocal(), membudget.New(4<<30, 10*time.Second))
	}
	s.Register(srv)
	go srv.Serve(lis)
	cc, err := rpc.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := remote.New(cc)
	t.Cleanup(func() { r.Close(); cc.Close(); srv.Stop() })
	return r
}

// selecting counts what a remote engine is asked to decode with
// selections, and the bytes its answers hold.
type selecting struct {
	*remote.Client
	batches, parts, bytes atomic.Int64
}

func (s *selecting) DecodeSelected(ctx context.Context, spec *codec.BatchSpec, encoded [][]byte, sel []codec.Selection) ([]codec.Chunk, error) {
	out, err := s.Client.DecodeSelected(ctx, spec, encoded, sel)
	s.batches.Add(1)
	for i, c := range out {
		if !sel[i].Whole() {
			s.parts.Add(1)
		}
		s.bytes.Add(int64(len(c.Data)))
	}
	return out, err
}

// Reads through codec workers, which answer partial reads with the
// selected elements only, match the reference like the embedded engine's:
// random arrays (sharded or not, real codec chains) written in random
// tilings and read back through random strided selections, on a worker
// with and without a memory budget (two decode paths).
func TestSlabsMatchReferenceOffloaded(t *testing.T) {
	for _, budget := range []bool{false, true} {
		name := "worker"
		if budget {
			name = "budgeted-worker"
		}
		t.Run(name, func(t *testing.T) {
			e := &selecting{Client: codecWorker(t, budget)}
			testSlabsMatchReference(t, e, true)
			if e.parts.Load() == 0 {
				t.Fatal("no unit was decoded with its selection")
			}
			t.Logf("%d batches with selections, %d units read in part", e.batches.Load(), e.parts.Load())
		})
	}
}

// wrongSelections answers selections with whole chunks: a lying or broken
// engine.
type wrongSelections struct{ *codecsvc.Local }

func (w wrongSelections) DecodeSelected(ctx context.Context, spec *codec.BatchSpec, encoded [][]byte, _ []codec.Selection) ([]codec.Chunk, error) {
	return w.Decode(ctx, spec, encoded)
}

// An engine's answer that is not the size of its selection is DataLoss
// naming the chunk, not a misplaced block.
func TestWrongSelectionAnswer(t *testing.T) {
	g := New(memory.New(), wrongSelections{codecsvc.NewLocal()}, Config{})
	spec := ArraySpec{Shape: []int64{8, 8}, DataType: "int16", ChunkShape: []int64{4, 4},
		Codecs: json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd"}]`)}
	if _, err := g.CreateArray(ctx, "a", spec); err != nil {
		t.Fatal(err)
	}
	full := zarr.FullSelection([]int64{8, 8})
	if _, err := g.WriteSlab(ctx, "a", full, nextFrom([]Block{{Origin: []int64{0, 0}, Shape: []int64{8, 8}, Data: bytes.Repeat([]byte{1, 2}, 64)}})); err != nil {
		t.Fatal(err)
	}
	if err := g.ReadSlab(ctx, "a", full, func(SlabInfo) error { return nil }, func(b Block) error { b.Free(); return nil }); err != nil {
		t.Fatalf("whole chunks: %v", err)
	}
	err := g.ReadSlab(ctx, "a", []zarr.Range{{Start: 1, Stop: 7, Step: 2}, {Start: 0, Stop: 8, Step: 1}}, func(SlabInfo) error { return nil }, func(b Block) error { b.Free(); return nil })
	if !errors.Is(err, errs.DataLoss) || !strings.Contains(err.Error(), `chunk "a/c/`) {
		t.Fatalf("a whole chunk for a selection: %v", err)
	}
}

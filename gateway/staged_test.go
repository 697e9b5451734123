package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/codecsvc/remote"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/file"
	"github.com/zarrgate/zarrgate/zarr"
)

// sharedWorker serves a codec worker on a unix socket and returns a
// client whose four streams took shared-memory segments of size bytes.
func sharedWorker(t *testing.T, size int64) *remote.Client {
	t.Helper()
	r := localWorker(t, "unix")
	r.SetSharedMemory(size, nil)
	s := &ChunkSpec{Shape: []int64{4}, DataType: zarr.MustDataType("uint8"), FillValue: []byte{0},
		Codecs: []zarr.CodecSpec{{Name: "bytes"}}}
	for range 4 { // a stream per batch until there are four
		if _, err := r.Decode(ctx, s, [][]byte{{1, 2, 3, 4}}); err != nil {
			t.Fatal(err)
		}
	}
	for { // the offers are answered asynchronously (the test's timeout bounds this)
		if n, _ := r.SharedStreams(); n == 4 {
			return r
		}
		time.Sleep(time.Millisecond)
	}
}

// Chunks read from a file store go to a codec worker on this host read
// straight into its shared memory, and ReadSlab gives what the embedded
// gateway gives: random arrays of real chains (sharded ones, whose inner
// chunks read as before, and strings among them), written in part,
// read through random strided selections.
func TestStagedReadsMatchEmbedded(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 23))
	store, err := file.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w := sharedWorker(t, 8<<20)
	embedded := New(store, codecsvc.NewLocal(), Config{})
	offloaded := New(store, w, Config{})
	sharded, strs := matchEmbedded(t, r, 60, embedded, offloaded, "shared memory")
	if w.StagedChunks() == 0 || sharded == 0 || strs == 0 {
		t.Fatalf("%d chunks read straight into shared memory, %d sharded cases, %d of strings", w.StagedChunks(), sharded, strs)
	}
}

// failingReads is a store read in this process whose values under keys
// containing bad fail part-way through being read.
type failingReads struct {
	storesvc.Store
	bad string
}

func (s failingReads) LocalReads() bool { return true }

func (s failingReads) Get(ctx context.Context, key string, r storesvc.ByteRange) (*storesvc.Object, error) {
	obj, err := s.Store.Get(ctx, key, r)
	if err == nil && strings.Contains(key, s.bad) {
		obj.ReadCloser = failingReader{obj.ReadCloser}
	}
	return obj, err
}

type failingReader struct{ io.ReadCloser }

func (failingReader) Read(p []byte) (int, error) {
	return 0, errs.New(errs.DataLoss, "disk says no")
}

// sharedArray makes a file store holding array "a" (8 × 8192 float32 in
// 2-row zstd chunks, not yet written), a gateway in front of it with the
// codecs in process (the writer), and a codec worker client with shared
// memory (sharedWorker); it returns them and the array's spec.
func sharedArray(t *testing.T) (*file.Store, *remote.Client, *Gateway, ArraySpec) {
	t.Helper()
	store, err := file.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w := sharedWorker(t, 1<<20)
	writer := New(store, codecsvc.NewLocal(), Config{})
	spec := ArraySpec{Shape: []int64{8, 8192}, DataType: "float32", ChunkShape: []int64{2, 8192},
		Codecs: json.RawMessage(realChains[0]), FillValue: json.RawMessage("0")}
	if _, err := writer.CreateArray(ctx, "a", spec); err != nil {
		t.Fatal(err)
	}
	return store, w, writer, spec
}

// A chunk whose read fails part-way fails the read as it does without
// shared memory, and frees the room it was being read into: many such
// reads later, chunks still go through the segment.
func TestStagedReadFailureFreesRoom(t *testing.T) {
	store, w, writer, _ := sharedArray(t)
	r := rand.New(rand.NewPCG(1, 2))
	block := Block{Origin: []int64{0, 0}, Shape: []int64{8, 8192}, Data: make([]byte, 8*8192*4)}
	for i := range block.Data {
		block.Data[i] = byte(r.IntN(256)) // incompressible: 64 KiB encoded chunks
	}
	if _, err := writer.WriteSlab(ctx, "a", []zarr.Range{{Start: 0, Stop: 8, Step: 1}, {Start: 0, Stop: 8192, Step: 1}}, nextFrom([]Block{block})); err != nil {
		t.Fatal(err)
	}
	all := []zarr.Range{{Start: 0, Stop: 8, Step: 1}, {Start: 0, Stop: 8192, Step: 1}}
	failing := failingReads{Store: store, bad: "/c/2/"}
	embedded := New(failing, codecsvc.NewLocal(), Config{})
	offloaded := New(failing, w, Config{})
	_, wantErr := readSlabErr(embedded, "a", all)
	if wantErr == nil {
		t.Fatal("the failing chunk read without error")
	}
	for range 40 { // 40 × 64 KiB ≫ 1 MiB
		if _, err := readSlabErr(offloaded, "a", all); errs.CodeOf(err) != errs.CodeOf(wantErr) {
			t.Fatalf("offloaded read of a failing chunk: %v, want %v", err, wantErr)
		}
	}
	before := w.StagedChunks()
	ok := New(store, w, Config{})
	if _, err := readSlabErr(ok, "a", all); err != nil {
		t.Fatal(err)
	}
	if w.StagedChunks() == before {
		t.Fatal("no chunk read into shared memory after reads that failed: their room was not freed")
	}
}

// readSlabErr reads sel of path, returning its bytes or the error.
func readSlabErr(g *Gateway, path string, sel []zarr.Range) ([]byte, error) {
	var out []byte
	err := g.ReadSlab(ctx, path, sel, func(SlabInfo) error { return nil }, func(b Block) error {
		out = append(out, b.Data...)
		return nil
	})
	if err != nil && errors.Is(err, context.Canceled) {
		return nil, err
	}
	return out, err
}

// ReadSlab gives back the room of chunks decoded into a codec worker's
// shared memory once emit returns (a block's data is emit's until then):
// many reads of more than the segments hold still decode through shared
// memory. (ReadSlab dropped such blocks, as it does pooled buffers, which
// left their regions taken for good: once the segments were full, every
// chunk went as bytes.)
func TestReadSlabGivesSharedMemoryBack(t *testing.T) {
	store, w, writer, spec := sharedArray(t)
	all := []zarr.Range{{Start: 0, Stop: 8, Step: 1}, {Start: 0, Stop: 8192, Step: 1}}
	block := Block{Origin: []int64{0, 0}, Shape: []int64{8, 8192}, Data: make([]byte, 8*8192*4)}
	for i := range block.Data {
		block.Data[i] = byte(i / 5)
	}
	if _, err := writer.WriteSlab(ctx, "a", all, nextFrom([]Block{block})); err != nil {
		t.Fatal(err)
	}
	// b holds other bytes.
	if _, err := writer.CreateArray(ctx, "b", spec); err != nil {
		t.Fatal(err)
	}
	other := Block{Origin: block.Origin, Shape: block.Shape, Data: make([]byte, len(block.Data))}
	for i := range other.Data {
		other.Data[i] = byte(i / 3)
	}
	if _, err := writer.WriteSlab(ctx, "b", all, nextFrom([]Block{other})); err != nil {
		t.Fatal(err)
	}
	g := New(store, w, Config{})
	for round := range 40 { // 40 × 4 × 64 KiB decoded ≫ 4 × 1 MiB
		name, want := "a", block.Data
		if round%2 == 1 {
			name, want = "b", other.Data
		}
		_, before := w.SharedStreams()
		got, _ := readAll(t, g, name, all, 4)
		if string(got) != string(want) {
			t.Fatalf("round %d: read of %s differs", round, name)
		}
		if _, after := w.SharedStreams(); after-before != 4 {
			t.Fatalf("round %d: %d of 4 chunks through shared memory", round, after-before)
		}
	}
}

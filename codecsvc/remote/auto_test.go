package remote_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/codecsvc/remote"
	"github.com/zarrgate/zarrgate/zarr"
)

// The automatic engine offloads what costs more to decode here than to
// move (gzip), decodes in process what costs less (an uncompressed chain,
// blosc-lz4), and gives the same bytes either way, whole or selected.
func TestAutoChoosesByCost(t *testing.T) {
	ctx := context.Background()
	l := codecsvc.NewLocal()
	r := remote.New(serveWorker(t))
	defer r.Close()
	chains := []struct {
		name, codecs string
		offload      bool // whole chunks
	}{
		{"gzip", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"gzip","configuration":{"level":5}}]`, true},
		{"raw", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}]`, false},
		{"blosc-lz4", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"blosc","configuration":{"cname":"lz4","clevel":5,"shuffle":"shuffle","typesize":4,"blocksize":0}}]`, false},
	}
	sel := []codec.Selection{{Start: []int64{3, 1}, Step: []int64{4, 5}, Count: []int64{15, 12}}, {}}
	for _, c := range chains {
		a := remote.NewAuto(l, r, remote.DefaultCosts())
		s := spec(c.codecs, 64, 64)
		chunks := []codec.Chunk{{Data: floats(4096, 1)}, {Data: floats(4096, 2)}}
		enc, err := l.Encode(ctx, s, chunks)
		if err != nil {
			t.Fatal(err)
		}
		got, err := a.Decode(ctx, s, enc)
		if err != nil || !bytes.Equal(got[0].Data, chunks[0].Data) || !bytes.Equal(got[1].Data, chunks[1].Data) {
			t.Fatalf("%s: decode: %v", c.name, err)
		}
		if off, emb := a.Batches(); (off == 1) != c.offload || off+emb != 1 {
			t.Fatalf("%s: %d batches offloaded, %d embedded; want offloaded %v", c.name, off, emb, c.offload)
		}
		// Selected, the same elements whichever way the batch went.
		viaAuto, err := a.DecodeSelected(ctx, s, enc, sel)
		if err != nil {
			t.Fatal(err)
		}
		viaWorker, err := r.DecodeSelected(ctx, s, enc, sel)
		if err != nil {
			t.Fatal(err)
		}
		for i := range sel {
			if !bytes.Equal(viaAuto[i].Data, viaWorker[i].Data) {
				t.Fatalf("%s: selection %d differs between the engine's choice and the worker", c.name, i)
			}
		}
		if len(viaAuto[0].Data) != 15*12*4 || !bytes.Equal(viaAuto[1].Data, chunks[1].Data) {
			t.Fatalf("%s: selected %d bytes", c.name, len(viaAuto[0].Data))
		}
	}
}

// With worker-fetch, the automatic engine sends a batch as keys when
// having the workers fetch and decode it costs this process less (the
// selected bytes back over the hop) than reading it from the store tier
// and decoding it here, and turns it down otherwise: each side chosen when
// its cost is the lower, with costs given (not measured), so the choice is
// deterministic.
func TestAutoChoosesFetchByCost(t *testing.T) {
	raw := spec(`[{"name":"bytes","configuration":{"endian":"little"}}]`, 64, 64)
	gzip := spec(`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"gzip","configuration":{"level":5}}]`, 64, 64)
	str := spec(`[{"name":"vlen-utf8"}]`, 64, 64)
	str.DataType = zarr.MustDataType("string")
	const d = 64 * 64 * 4 // a chunk decoded
	cheap := remote.Costs{HopPerByte: 1, StorePerByte: 1, Default: 1, DecodePerByte: map[string]float64{"bytes": 0, "gzip": 10}}
	dearHop := cheap
	dearHop.HopPerByte = 100
	noStore := cheap
	noStore.StorePerByte = 0
	for _, c := range []struct {
		name             string
		costs            remote.Costs
		spec             *codec.BatchSpec
		n                int
		stored, selected int64
		fetch            bool
	}{
		// gzip costs more to decode here than its bytes cost to move.
		{"gzip whole", cheap, gzip, 4, -1, 4 * d, true},
		{"gzip whole, hop dear", dearHop, gzip, 4, -1, 4 * d, false},
		// Raw and whole: the same bytes either way, nothing to decode: a
		// tie, decoded here.
		{"raw whole", cheap, raw, 4, -1, 4 * d, false},
		// Raw, a sixteenth selected: the workers send back less than the
		// gateway would read.
		{"raw strided", cheap, raw, 4, -1, 4 * d / 16, true},
		// A store read that costs nothing: reading raw here wins even
		// for a selection.
		{"raw strided, store free", noStore, raw, 4, -1, 4 * d / 16, false},
		// Stored sizes known (a shard's index): well-compressed gzip
		// still costs its decode here.
		{"gzip in a shard", cheap, gzip, 4, 4 * d / 10, 4 * d, true},
		{"gzip in a shard, hop dear", dearHop, gzip, 4, 4 * d / 10, 4 * d, false},
		// Variable length: per byte, as stored; the decode of vlen-utf8
		// (Default, 1) tips it.
		{"strings", cheap, str, 4, -1, -1, true},
		{"strings, hop dear", dearHop, str, 4, -1, -1, false},
	} {
		a := remote.NewAuto(codecsvc.NewLocal(), nil, c.costs)
		if got := a.PreferFetch(c.spec, c.n, c.stored, c.selected); got != c.fetch {
			t.Errorf("%s: PreferFetch = %v, want %v", c.name, got, c.fetch)
		}
		if want := map[bool]uint64{true: 1, false: 0}[c.fetch]; a.Fetched() != want {
			t.Errorf("%s: Fetched() = %d, want %d", c.name, a.Fetched(), want)
		}
	}
}

// With every stream's worker attached to shared memory, offloading costs
// the caller only its copy of the encoded chunks into the segment, so a
// blosc-lz4 batch, decoded in process over the stream's costs, goes to the
// worker.
func TestAutoPricesSharedMemory(t *testing.T) {
	ctx := context.Background()
	l := codecsvc.NewLocal()
	r := remote.New(serveWorkerOn(t, "unix"))
	defer r.Close()
	blosc := spec(`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"blosc","configuration":{"cname":"lz4","clevel":5,"shuffle":"shuffle","typesize":4,"blocksize":0}}]`, 64, 64)
	chunks := []codec.Chunk{{Data: floats(4096, 1)}, {Data: floats(4096, 2)}}
	enc, err := l.Encode(ctx, blosc, chunks)
	if err != nil {
		t.Fatal(err)
	}
	a := remote.NewAuto(l, r, remote.DefaultCosts())
	if _, err := a.Decode(ctx, blosc, enc); err != nil {
		t.Fatal(err)
	}
	if off, _ := a.Batches(); off != 0 {
		t.Fatal("blosc-lz4 offloaded without shared memory")
	}
	sharedClient(t, r, 4<<20, nil, true)
	got, err := a.Decode(ctx, blosc, enc)
	if err != nil || !bytes.Equal(got[1].Data, chunks[1].Data) {
		t.Fatalf("decode: %v", err)
	}
	if off, _ := a.Batches(); off != 1 {
		t.Fatal("blosc-lz4 decoded in process with every stream in shared memory")
	}
	// A raw chain still costs nothing to decode here.
	raw := spec(`[{"name":"bytes","configuration":{"endian":"little"}}]`, 64, 64)
	renc, _ := l.Encode(ctx, raw, chunks)
	if _, err := a.Decode(ctx, raw, renc); err != nil {
		t.Fatal(err)
	}
	if off, _ := a.Batches(); off != 1 {
		t.Fatal("a raw batch offloaded")
	}
}

package remote_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/codecsvc/remote"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/zarr"
)

// sharedClient has r (made by remote.New) offer shared memory of size to
// the worker behind its connection, with its four streams open and their
// offers answered (attached says whether the worker takes them).
func sharedClient(t *testing.T, r *remote.Client, size int64, b *membudget.Budget, attached bool) {
	t.Helper()
	r.SetSharedMemory(size, b)
	s := spec(zstdChain, 8)
	enc, _ := codecsvc.NewLocal().Encode(context.Background(), s, []codec.Chunk{{Data: floats(8, 0)}})
	for range 4 { // a stream per batch, in turn, until the client has 4
		if _, err := r.Decode(context.Background(), s, enc); err != nil {
			t.Fatal(err)
		}
	}
	if !attached {
		return
	}
	// The offer is answered asynchronously: wait for it (not a timing
	// assertion, the test's own timeout bounds it).
	for {
		if n, _ := r.SharedStreams(); n == 4 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

type dtCase struct {
	dt     string
	codecs string
	shape  []int64
}

var sharedCases = []dtCase{
	{"float32", zstdChain, []int64{256, 256}},
	{"uint8", `[{"name":"bytes"},{"name":"gzip","configuration":{"level":1}}]`, []int64{100, 70}},
	{"int16", `[{"name":"bytes","configuration":{"endian":"big"}}]`, []int64{33, 17, 5}},
	{"float64", `[{"name":"transpose","configuration":{"order":[1,0]}},{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}]`, []int64{64, 48}},
	{"complex64", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"blosc","configuration":{"cname":"lz4","clevel":5,"shuffle":"shuffle","typesize":8,"blocksize":0}}]`, []int64{40, 40}},
}

// chunksOf makes n chunks of c's type with varied bytes.
func chunksOf(c dtCase, n int) (*codec.BatchSpec, []codec.Chunk) {
	dt := zarr.MustDataType(c.dt)
	s := &codec.BatchSpec{Shape: c.shape, DataType: dt, FillValue: make([]byte, dt.Size)}
	var cs []zarr.CodecSpec
	if err := jsonUnmarshal(c.codecs, &cs); err != nil {
		panic(err)
	}
	s.Codecs = cs
	size := dt.Size
	for _, d := range c.shape {
		size *= int(d)
	}
	out := make([]codec.Chunk, n)
	for i := range out {
		f := floats((size+3)/4, float64(i)*1.7)
		out[i] = codec.Chunk{Data: f[:size]}
	}
	return s, out
}

// Decoding through shared memory gives the bytes the socket path gives,
// for whole chunks and selections of several data types and codecs, and
// the chunks really came through the segment; a chunk held is never
// overwritten by later batches.
func TestSharedMemoryMatchesBytes(t *testing.T) {
	ctx := context.Background()
	for _, network := range []string{"tcp", "unix"} {
		cc := serveWorkerOn(t, network)
		plain := remote.New(cc)
		defer plain.Close()
		shared := remote.New(cc)
		defer shared.Close()
		sharedClient(t, shared, 8<<20, nil, true)
		var held []codec.Chunk
		var heldWant [][]byte
		for _, c := range sharedCases {
			t.Run(fmt.Sprintf("%s/%s", network, c.dt), func(t *testing.T) {
				s, chunks := chunksOf(c, 6)
				enc, err := codecsvc.NewLocal().Encode(ctx, s, chunks)
				if err != nil {
					t.Fatal(err)
				}
				_, before := shared.SharedStreams()
				want, err := plain.Decode(ctx, s, enc)
				if err != nil {
					t.Fatal(err)
				}
				got, err := shared.Decode(ctx, s, enc)
				if err != nil {
					t.Fatal(err)
				}
				for i := range want {
					if !bytes.Equal(got[i].Data, want[i].Data) || !bytes.Equal(got[i].Data, chunks[i].Data) {
						t.Fatalf("chunk %d differs", i)
					}
				}
				if _, after := shared.SharedStreams(); after < before+uint64(len(enc)) {
					t.Fatalf("%d chunks of %d came through shared memory", after-before, len(enc))
				}
				held, heldWant = append(held, got[0]), append(heldWant, bytes.Clone(want[0].Data))
				for _, ch := range got[1:] {
					ch.Release()
				}
				// Selections: a strided box of each chunk but the last,
				// which is whole.
				sel := make([]codec.Selection, len(enc))
				for i := range sel[:len(sel)-1] {
					for d, n := range c.shape {
						st := int64(i+d) % n
						sel[i].Start = append(sel[i].Start, st)
						sel[i].Step = append(sel[i].Step, int64(1+d))
						sel[i].Count = append(sel[i].Count, (n-st+int64(d))/int64(1+d))
					}
				}
				_, before = shared.SharedStreams()
				want, err = plain.DecodeSelected(ctx, s, enc, sel)
				if err != nil {
					t.Fatal(err)
				}
				got, err = shared.DecodeSelected(ctx, s, enc, sel)
				if err != nil {
					t.Fatal(err)
				}
				for i := range want {
					if !bytes.Equal(got[i].Data, want[i].Data) {
						t.Fatalf("selection %d differs", i)
					}
					got[i].Release()
				}
				if _, after := shared.SharedStreams(); after < before+uint64(len(enc)) {
					t.Fatalf("%d selections of %d came through shared memory", after-before, len(enc))
				}
			})
		}
		for i, h := range held {
			if !bytes.Equal(h.Data, heldWant[i]) {
				t.Fatalf("held chunk %d was overwritten", i)
			}
			h.Release()
		}
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

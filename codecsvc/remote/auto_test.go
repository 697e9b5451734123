package remote_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/codecsvc/remote"
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

package remote_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/codecsvc/remote"
	"github.com/zarrgate/zarrgate/internal/bufpool"
)

// Large decoded chunks arrive in pooled buffers lent to the caller: a
// released chunk's buffer is reused by later batches, and a chunk still
// held is never overwritten by them (nor any buffer put back twice).
func TestDecodedChunksLent(t *testing.T) {
	bufpool.CheckDoublePuts()
	ctx := context.Background()
	r := remote.New(serveWorker(t))
	defer r.Close()
	s := spec(zstdChain, 128, 128) // 64 KiB chunks
	var want [][]byte
	var chunks []codec.Chunk
	for i := range 4 {
		want = append(want, floats(128*128, float64(i)))
		chunks = append(chunks, codec.Chunk{Data: want[i]})
	}
	// A small chunk, under wire.Large, arrives as a copy of its own.
	small := spec(zstdChain, 16, 16)
	smallEnc, err := codecsvc.NewLocal().Encode(ctx, small, []codec.Chunk{{Data: floats(256, 9)}})
	if err != nil {
		t.Fatal(err)
	}
	enc, err := codecsvc.NewLocal().Encode(ctx, s, chunks)
	if err != nil {
		t.Fatal(err)
	}
	held, err := r.Decode(ctx, s, enc)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range held {
		if !c.Lent() || !bytes.Equal(c.Data, want[i]) {
			t.Fatalf("chunk %d: lent %v, equal %v", i, c.Lent(), bytes.Equal(c.Data, want[i]))
		}
	}
	for range 20 {
		out, err := r.Decode(ctx, s, enc)
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range out {
			if !bytes.Equal(c.Data, want[i]) {
				t.Fatalf("chunk %d decoded wrong", i)
			}
			c.Release()
		}
		sm, err := r.Decode(ctx, small, smallEnc)
		if err != nil || sm[0].Lent() || !bytes.Equal(sm[0].Data, floats(256, 9)) {
			t.Fatalf("small chunk: %v, lent %v", err, sm[0].Lent())
		}
	}
	for i, c := range held {
		if !bytes.Equal(c.Data, want[i]) {
			t.Fatalf("held chunk %d was overwritten by later batches", i)
		}
		c.Release()
	}
}

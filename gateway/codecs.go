package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"math"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/bufpool"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/zarr"
)

// ChunkSpec is what the codec engine needs for a batch of one array's
// chunks: the chain and the decoded chunk layout.
type ChunkSpec = codecsvc.BatchSpec

// Chunk is a decoded chunk (see codecsvc.Chunk).
type Chunk = codecsvc.Chunk

// Codecs is the codec engine the gateway runs chunks through, in batches:
// codecsvc.Local in-process, or codec workers through codecsvc/remote.
type Codecs = codecsvc.Engine

// NewItemError wraps err as the failure of batch item i.
func NewItemError(i int, err error) error { return &codecsvc.ItemError{Index: i, Err: err} }

// engineCodec binds a Codecs engine to one array's chunk spec.
type engineCodec struct {
	c    Codecs
	spec *ChunkSpec
}

func (e engineCodec) decode(ctx context.Context, encoded [][]byte) ([]chunk, error) {
	if len(encoded) == 0 {
		return nil, nil
	}
	// Codecs are pure: a batch lost with its worker is safe to run again.
	out, err := retry(ctx, func() ([]Chunk, error) { return e.c.Decode(ctx, e.spec, encoded) })
	if err != nil {
		return nil, err
	}
	chunks := make([]chunk, len(out))
	for i, c := range out {
		chunks[i] = chunk{data: c.Data, offsets: c.Offsets}
		if c.Pooled {
			data := c.Data
			chunks[i].release = func() { bufpool.Put(data) }
		}
	}
	return chunks, nil
}

func (e engineCodec) encode(ctx context.Context, chunks []chunk) ([][]byte, error) {
	in := make([]Chunk, len(chunks))
	for i, c := range chunks {
		in[i] = Chunk{Data: c.data, Offsets: c.offsets}
	}
	return retry(ctx, func() ([][]byte, error) { return e.c.Encode(ctx, e.spec, in) })
}

// layout returns the layout of an array node, built on first use.
func (g *Gateway) layout(n *node) (*layout, error) {
	n.layoutOnce.Do(func() { n.lay, n.layErr = g.newLayout(n) })
	return n.lay, n.layErr
}

// checkUnitSize refuses arrays whose decode units (chunks, or a shard's
// inner chunks) or shard indexes are larger than this gateway's per-chunk
// limit, before anything of that size is allocated: one such read would
// otherwise take the memory of every other call.
func (g *Gateway) checkUnitSize(path string, l *layout) error {
	elems, ok := zarr.ProductChecked(l.unit)
	if !ok {
		return errs.New(errs.InvalidArgument, "array %q: chunk shape %v has more than 2^63 elements", path, l.unit)
	}
	size := int64(l.elem)
	if size == 0 {
		size = varElemBytes
	}
	if b, ok := zarr.MulChecked(elems, size); !ok || b > g.cfg.MaxChunkBytes {
		what := "bytes"
		if l.elem == 0 {
			what = "bytes of offsets and values at least"
		}
		return errs.New(errs.ResourceExhausted, "array %q: a chunk of shape %v holds %s %s decoded, more than this server's per-chunk limit of %s (--max-chunk-bytes)", path, l.unit, sizeOrHuge(b, ok), what, membudget.Size(g.cfg.MaxChunkBytes))
	}
	if l.shard != nil {
		n, ok := zarr.ProductChecked(l.shard.per)
		if b, ok2 := zarr.MulChecked(n, 16); !ok || !ok2 || b > g.cfg.MaxChunkBytes || n > math.MaxInt32 {
			return errs.New(errs.ResourceExhausted, "array %q: a shard holds %v inner chunks, whose index is larger than this server's per-chunk limit of %s (--max-chunk-bytes)", path, l.shard.per, membudget.Size(g.cfg.MaxChunkBytes))
		}
	}
	return nil
}

// varElemBytes is what a variable-length element costs decoded at least:
// its offset, and room for a short value.
const varElemBytes = 16

func sizeOrHuge(n int64, ok bool) string {
	if !ok {
		return "more than 2^63"
	}
	return membudget.Size(n)
}

func (g *Gateway) newLayout(n *node) (*layout, error) {
	a := n.array
	if g.codecs == nil {
		return nil, errs.New(errs.Unimplemented, "this gateway has no codec engine")
	}
	l := &layout{a: a, prefix: n.prefix(), elem: a.DataType.Size, unit: a.ChunkShape}
	chain := a.Codecs
	switch {
	case a.LegacySharding != nil:
		per := a.LegacySharding.ChunksPerShard
		l.shard = &shardLayout{shape: make([]int64, len(per)), per: per, n: int(zarr.SaturatingProduct(per))}
		for i := range per {
			var ok bool
			if l.shard.shape[i], ok = zarr.MulChecked(a.ChunkShape[i], per[i]); !ok {
				return nil, errs.New(errs.InvalidArgument, "array %q: shard shape overflows", n.path)
			}
		}
		idx, err := codecsvc.NewLegacyShard(chain, codecsvc.ChunkSpec{Shape: convert[int](a.ChunkShape), DataType: a.DataType, FillValue: a.FillValue}, convert[int](per))
		if err != nil {
			return nil, fmt.Errorf("array %q: sharding storage transformer: %w", n.path, err)
		}
		l.shard.index = idx
	case len(chain) == 1 && chain[0].Name == "sharding_indexed":
		var cfg codecsvc.ShardingConfig
		if err := json.Unmarshal(chain[0].Configuration, &cfg); err != nil {
			return nil, errs.New(errs.InvalidArgument, "array %q: sharding_indexed configuration: %v", n.path, err)
		}
		if len(cfg.ChunkShape) != len(a.Shape) {
			return nil, errs.New(errs.InvalidArgument, "array %q: sharding chunk_shape has %d dimensions, the array %d", n.path, len(cfg.ChunkShape), len(a.Shape))
		}
		per := make([]int64, len(a.Shape))
		for i := range per {
			if cfg.ChunkShape[i] <= 0 || a.ChunkShape[i]%int64(cfg.ChunkShape[i]) != 0 {
				return nil, errs.New(errs.InvalidArgument, "array %q: shard shape %v is not a multiple of the inner chunk shape %v", n.path, a.ChunkShape, cfg.ChunkShape)
			}
			per[i] = a.ChunkShape[i] / int64(cfg.ChunkShape[i])
		}
		idx, err := codecsvc.NewShard(chain[0].Configuration, codecsvc.ChunkSpec{Shape: convert[int](a.ChunkShape), DataType: a.DataType, FillValue: a.FillValue})
		if err != nil {
			return nil, fmt.Errorf("array %q: %w", n.path, err)
		}
		l.unit, chain = convert[int64](cfg.ChunkShape), cfg.Codecs
		l.shard = &shardLayout{shape: a.ChunkShape, per: per, n: int(zarr.SaturatingProduct(per)), index: idx}
	}
	if err := g.checkUnitSize(n.path, l); err != nil {
		return nil, err
	}
	l.codec = engineCodec{g.codecs, &ChunkSpec{Codecs: chain, Shape: l.unit, DataType: a.DataType, FillValue: a.FillValue}}
	l.raw = l.shard == nil && codecsvc.Raw(chain, a.DataType)
	l.fill = newFill(a, l.unit)
	return l, nil
}

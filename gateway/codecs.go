package gateway

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/retrybudget"
	"github.com/zarrgate/zarrgate/zarr"
)

// ChunkSpec is what the codec engine needs for a batch of one array's
// chunks: the chain and the decoded chunk layout.
type ChunkSpec = codec.BatchSpec

// Chunk is a decoded chunk (see codec.Chunk).
type Chunk = codec.Chunk

// Codecs is the codec engine the gateway runs chunks through, in batches,
// and asks how an array's chunks and shards are laid out: codecsvc.Local
// in-process, or codec workers through codecsvc/remote. The gateway knows
// it only by this contract, and links no codec.
type Codecs = codec.Engine

// NewItemError wraps err as the failure of batch item i.
func NewItemError(i int, err error) error { return &codec.ItemError{Index: i, Err: err} }

// engineCodec binds a Codecs engine to one array's chunk spec.
type engineCodec struct {
	c       Codecs
	spec    *ChunkSpec
	retries *retrybudget.Budget // the codec tier's
	// local says the engine runs here: its batches take a slot of the
	// call's share of the processors (fair.go).
	local bool
	// owned says the engine's encoded results are the caller's own, to
	// recycle once stored (codecsvc.Local.EncodesOwned).
	owned bool
}

// slot takes a slot of the share of the call ctx carries, for a batch of
// codec work on this process's processors.
func (e engineCodec) slot(ctx context.Context) (func(), error) {
	if !e.local {
		return func() {}, nil
	}
	return callOf(ctx).acquire(ctx)
}

func (e engineCodec) inProcess() bool { return e.local }

func (e engineCodec) ownsEncodes() bool { return e.owned }

func (e engineCodec) decode(ctx context.Context, encoded [][]byte) ([]chunk, error) {
	if len(encoded) == 0 {
		return nil, nil
	}
	ctx, span := startSpan(ctx, "gateway.decode", len(encoded))
	// Codecs are pure: a batch lost with its worker is safe to run again.
	out, err := retry(ctx, e.retries, func() ([]Chunk, error) { return e.c.Decode(ctx, e.spec, encoded) })
	endSpan(span, err)
	if err != nil {
		return nil, err
	}
	return fromEngine(out), nil
}

// fromEngine converts an engine's decoded chunks, keeping the buffers
// they lend.
func fromEngine(out []Chunk) []chunk {
	chunks := make([]chunk, len(out))
	for i, c := range out {
		chunks[i] = chunk{data: c.Data, offsets: c.Offsets}
		if c.Lent() {
			chunks[i].release = c.Release
		}
	}
	return chunks
}

func (e engineCodec) encode(ctx context.Context, chunks []chunk) ([][]byte, error) {
	in := make([]Chunk, len(chunks))
	for i, c := range chunks {
		in[i] = Chunk{Data: c.data, Offsets: c.offsets}
	}
	done, err := e.slot(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	ctx, span := startSpan(ctx, "gateway.encode", len(in))
	out, err := retry(ctx, e.retries, func() ([][]byte, error) { return e.c.Encode(ctx, e.spec, in) })
	endSpan(span, err)
	return out, err
}

// ownsEncodes reports whether an engine says its encoded results are the
// caller's own (codecsvc.Local.EncodesOwned).
func ownsEncodes(c Codecs) bool {
	o, ok := c.(interface{ EncodesOwned() bool })
	return ok && o.EncodesOwned()
}

// layout returns the layout of an array node, built on first use.
func (g *Gateway) layout(n *node) (*layout, error) {
	n.layoutOnce.Do(func() { n.lay, n.layErr = g.newLayout(n) })
	return n.lay, n.layErr
}

// varElemBytes is what a variable-length element costs decoded at least:
// its offset, and room for a short value (for estimates of a read's
// memory; the decoders bound the rest).
const varElemBytes = 16

// limits are the codecs' per-chunk limits, from the gateway's.
func (c Config) limits() codec.Limits {
	return codec.Limits{MaxChunkBytes: c.MaxChunkBytes, MaxVariableBytes: c.MaxVariableBytes}
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
		idx, err := g.codecs.LegacyShardLayout(&ChunkSpec{Codecs: chain, Shape: a.ChunkShape, DataType: a.DataType, FillValue: a.FillValue}, per, g.cfg.limits())
		if err != nil {
			return nil, fmt.Errorf("array %q: sharding storage transformer: %w", n.path, err)
		}
		l.shard.index = idx
	case len(chain) == 1 && chain[0].Name == "sharding_indexed":
		var cfg codec.ShardingConfig
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
		idx, err := g.codecs.ShardLayout(&ChunkSpec{Codecs: chain, Shape: a.ChunkShape, DataType: a.DataType, FillValue: a.FillValue}, g.cfg.limits())
		if err != nil {
			return nil, fmt.Errorf("array %q: %w", n.path, err)
		}
		l.unit, chain = convert[int64](cfg.ChunkShape), cfg.Codecs
		l.shard = &shardLayout{shape: a.ChunkShape, per: per, n: int(zarr.SaturatingProduct(per)), index: idx}
	}
	// Arrays whose chunks this gateway could not hold are refused before
	// anything of their size is allocated (sharded ones by the shard
	// layouts above, which check inner chunks and the index).
	spec := &ChunkSpec{Codecs: chain, Shape: l.unit, DataType: a.DataType, FillValue: a.FillValue}
	// Marshalled once for the array, not for every batch (codec.BatchSpec).
	if js, err := json.Marshal(chain); err == nil {
		spec.CodecsJSON = string(js)
	}
	if l.shard == nil {
		raw, err := g.codecs.ChunkLayout(spec, g.cfg.limits())
		if err != nil {
			return nil, fmt.Errorf("array %q: %w", n.path, err)
		}
		l.raw = raw
	}
	l.codec = engineCodec{g.codecs, spec, g.cfg.CodecRetries, g.inProcess, ownsEncodes(g.codecs)}
	l.fill = newFill(a, l.unit)
	return l, nil
}

package gateway

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/bufpool"
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

// shardingConfig is the configuration of the sharding_indexed codec.
type shardingConfig struct {
	ChunkShape    []int64          `json:"chunk_shape"`
	Codecs        []zarr.CodecSpec `json:"codecs"`
	IndexCodecs   []zarr.CodecSpec `json:"index_codecs"`
	IndexLocation string           `json:"index_location"`
}

// v3Index is the sharding_indexed codec's index: an array of shape
// (per..., 2) of uint64 encoded with the index codecs.
type v3Index struct {
	n     int
	start bool
	enc   int64
	codec engineCodec
}

func (v v3Index) size() int64   { return v.enc }
func (v v3Index) atStart() bool { return v.start }

func (v v3Index) decode(b []byte) ([]indexEntry, error) {
	out, err := v.codec.decode(context.Background(), [][]byte{b})
	if err != nil {
		return nil, err
	}
	raw := out[0].data
	if len(raw) != 16*v.n {
		return nil, errs.New(errs.DataLoss, "shard index decodes to %d bytes, want %d", len(raw), 16*v.n)
	}
	entries := make([]indexEntry, v.n)
	for i := range entries {
		entries[i] = indexEntry{binary.LittleEndian.Uint64(raw[16*i:]), binary.LittleEndian.Uint64(raw[16*i+8:])}
	}
	return entries, nil
}

func (v v3Index) encode(entries []indexEntry) ([]byte, error) {
	raw, _ := legacyIndex{n: len(entries)}.encode(entries)
	out, err := v.codec.encode(context.Background(), []chunk{{data: raw}})
	if err != nil {
		return nil, err
	}
	if int64(len(out[0])) != v.enc {
		return nil, errs.New(errs.Internal, "shard index encodes to %d bytes, expected %d", len(out[0]), v.enc)
	}
	return out[0], nil
}

// indexEncodedSize is the encoded size of an index of n entries under the
// index codecs, which must have a fixed size: bytes and crc32c.
func indexEncodedSize(n int, chain []zarr.CodecSpec) (int64, error) {
	size := int64(16 * n)
	for _, c := range chain {
		switch c.Name {
		case "bytes":
		case "crc32c":
			size += 4
		default:
			return 0, errs.New(errs.Unimplemented, "sharding index codec %q: only bytes and crc32c give the fixed-size index a partial read needs", c.Name)
		}
	}
	return size, nil
}

// layout returns the layout of an array node, built on first use.
func (g *Gateway) layout(n *node) (*layout, error) {
	n.layoutOnce.Do(func() { n.lay, n.layErr = g.newLayout(n) })
	return n.lay, n.layErr
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
		l.shard = &shardLayout{shape: make([]int64, len(per)), per: per, n: int(product(per))}
		for i := range per {
			l.shard.shape[i] = a.ChunkShape[i] * per[i]
		}
		l.shard.index = legacyIndex{n: l.shard.n}
	case len(chain) == 1 && chain[0].Name == "sharding_indexed":
		var cfg shardingConfig
		if err := json.Unmarshal(chain[0].Configuration, &cfg); err != nil {
			return nil, errs.New(errs.InvalidArgument, "array %q: sharding_indexed configuration: %v", n.path, err)
		}
		if len(cfg.ChunkShape) != len(a.Shape) {
			return nil, errs.New(errs.InvalidArgument, "array %q: sharding chunk_shape has %d dimensions, the array %d", n.path, len(cfg.ChunkShape), len(a.Shape))
		}
		per := make([]int64, len(a.Shape))
		for i := range per {
			if cfg.ChunkShape[i] <= 0 || a.ChunkShape[i]%cfg.ChunkShape[i] != 0 {
				return nil, errs.New(errs.InvalidArgument, "array %q: shard shape %v is not a multiple of the inner chunk shape %v", n.path, a.ChunkShape, cfg.ChunkShape)
			}
			per[i] = a.ChunkShape[i] / cfg.ChunkShape[i]
		}
		nEntries := int(product(per))
		if cfg.IndexCodecs == nil {
			cfg.IndexCodecs = []zarr.CodecSpec{{Name: "bytes", Configuration: json.RawMessage(`{"endian":"little"}`)}, {Name: "crc32c"}}
		}
		enc, err := indexEncodedSize(nEntries, cfg.IndexCodecs)
		if err != nil {
			return nil, fmt.Errorf("array %q: %w", n.path, err)
		}
		idxShape := append(clone(per), 2)
		l.unit, chain = cfg.ChunkShape, cfg.Codecs
		l.shard = &shardLayout{shape: a.ChunkShape, per: per, n: nEntries, index: v3Index{
			n: nEntries, start: cfg.IndexLocation == "start", enc: enc,
			codec: engineCodec{g.codecs, &ChunkSpec{Codecs: cfg.IndexCodecs, Shape: idxShape, DataType: zarr.MustDataType("uint64"), FillValue: make([]byte, 8)}},
		}}
	}
	l.codec = engineCodec{g.codecs, &ChunkSpec{Codecs: chain, Shape: l.unit, DataType: a.DataType, FillValue: a.FillValue}}
	l.fill = fillUnit(a, l.unit)
	return l, nil
}

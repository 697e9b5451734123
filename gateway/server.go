package gateway

import (
	"context"
	"encoding/json"
	"io"

	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/zarr"
)

// This file is what the engine gives the layers that serve it (package
// arrayserver, for one) beside its calls: the raw store, and arrays
// described as clients see them.

// PassThrough is the gateway's store for raw access beside the engine (the
// StoreService a server offers next to ArrayService, so that stub clients
// and other Zarr libraries can use the raw store through the gateway):
// writes through it drop the gateway's cached metadata, like writes
// through the gateway itself.
func (g *Gateway) PassThrough() storesvc.Store { return &invalidating{Portable: g.store, g: g} }

// invalidating is the gateway's store as served through the StoreService
// pass-through: raw writes through it drop the gateway's cached metadata,
// like writes through the gateway itself.
type invalidating struct {
	*storesvc.Portable
	g *Gateway
}

func (s *invalidating) drop() {
	s.g.meta.drop("")
	s.g.index.drop("")
}

func (s *invalidating) Set(ctx context.Context, key string, v io.Reader, c storesvc.Condition) (string, error) {
	defer s.drop()
	return s.Portable.Set(ctx, key, v, c)
}

func (s *invalidating) SetPartialValues(ctx context.Context, w []storesvc.PartialWrite) error {
	defer s.drop()
	return s.Portable.SetPartialValues(ctx, w)
}

func (s *invalidating) Erase(ctx context.Context, key string, c storesvc.Condition) error {
	defer s.drop()
	return s.Portable.Erase(ctx, key, c)
}

func (s *invalidating) EraseValues(ctx context.Context, keys []string) error {
	defer s.drop()
	return s.Portable.EraseValues(ctx, keys)
}

func (s *invalidating) ErasePrefix(ctx context.Context, prefix string) error {
	defer s.drop()
	return s.Portable.ErasePrefix(ctx, prefix)
}

// ArrayInfo describes an array as clients see it: the grid they read and
// write in (a sharded array's inner chunks, with the shards' shape beside)
// and its metadata in JSON. Its slices may be the array's own: read-only.
type ArrayInfo struct {
	Shape    []int64
	DataType string
	// ChunkShape is the shape of the chunks (of a sharded array, the inner
	// chunks).
	ChunkShape []int64
	// ShardShape is the shape of the shards of a sharded array (codec
	// sharding_indexed, or the legacy sharding transformer); nil otherwise.
	ShardShape []int64
	// Codecs is the codec chain in JSON.
	Codecs         json.RawMessage
	DimensionNames []string
	// FillValue is the fill value in JSON (null if it has none, or none
	// JSON can say).
	FillValue json.RawMessage
}

// DescribeArray is a's ArrayInfo.
func DescribeArray(a *zarr.Array) (ArrayInfo, error) {
	codecs, err := json.Marshal(a.Codecs)
	if err != nil {
		return ArrayInfo{}, err
	}
	fill, err := zarr.EncodeFillValue(a.DataType, a.FillValue, a.FillNull)
	if err != nil {
		fill = json.RawMessage("null")
	}
	info := ArrayInfo{
		Shape: a.Shape, DataType: a.DataType.Name, ChunkShape: a.ChunkShape,
		Codecs: codecs, DimensionNames: a.DimensionNames, FillValue: fill,
	}
	if inner, ok := innerChunkShape(a); ok {
		info.ShardShape, info.ChunkShape = info.ChunkShape, inner
	}
	if ls := a.LegacySharding; ls != nil {
		shard := make([]int64, len(a.ChunkShape))
		for i := range shard {
			shard[i] = a.ChunkShape[i] * ls.ChunksPerShard[i]
		}
		info.ShardShape = shard
	}
	return info, nil
}

// innerChunkShape returns the inner chunk shape of an array whose chain is
// a sharding_indexed codec.
func innerChunkShape(a *zarr.Array) ([]int64, bool) {
	for _, c := range a.Codecs {
		if c.Name == "sharding_indexed" {
			var cfg struct {
				ChunkShape []int64 `json:"chunk_shape"`
			}
			if json.Unmarshal(c.Configuration, &cfg) == nil && len(cfg.ChunkShape) == len(a.Shape) {
				return cfg.ChunkShape, true
			}
		}
	}
	return nil, false
}

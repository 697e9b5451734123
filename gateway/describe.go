package gateway

import (
	"encoding/json"

	"github.com/zarrgate/zarrgate/zarr"
)

// This file is what the engine gives the layers that serve it (package
// arrayserver, for one) beside its calls: arrays described as clients
// see them (the raw store: rawstore.go).

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

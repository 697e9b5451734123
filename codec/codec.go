// Package codec is what an array engine asks of a codec engine: the
// contract between the gateway, which reads and writes parts of arrays,
// and the engines that run Zarr codecs for it (package codecsvc in
// process, codecsvc/remote on codec workers). An array engine written
// against this package links no codec.
//
// The contract is batches of chunks decoded and encoded (Engine's Decode
// and Encode), the checks and layouts an array engine needs before it
// touches a chunk (Layouts), and the shard index: its entries (ShardIndex)
// and the arithmetic of laying out and cutting up a shard (Assemble,
// Split), which both sides use.
//
// It imports nothing of zarrgate but the format (zarr) and the error codes
// (errs).
package codec

import (
	"context"
	"fmt"

	"github.com/zarrgate/zarrgate/zarr"
)

// Engine encodes and decodes batches of chunks of one array, and answers
// what an array engine must know of an array's codecs before it reads or
// writes part of a chunk (Layouts). codecsvc.Local runs the batches in
// this process; codecsvc/remote on codec workers. A failure on one item
// fails the batch with an error wrapping *ItemError, which says which item.
type Engine interface {
	Decode(ctx context.Context, spec *BatchSpec, encoded [][]byte) ([]Chunk, error)
	Encode(ctx context.Context, spec *BatchSpec, chunks []Chunk) ([][]byte, error)
	Layouts
}

// Layouts are an engine's answers about how an array's chunks are stored,
// asked once per array when the array engine lays it out. They do no I/O
// and no chunk work, so engines whose batches run elsewhere answer them in
// process (the shard index chain is tiny, and is run on every partial read
// of a shard). Each checks what it is given under l (zero fields: the
// engine's defaults) before anything of its size is allocated, so that an
// array whose chunks could not be held is refused at once.
type Layouts interface {
	// ChunkLayout checks that chunks of spec can be decoded and encoded
	// under l (ResourceExhausted naming the limit; InvalidArgument for a
	// shape whose size overflows), and reports whether they are stored
	// raw: fixed-size elements exactly as decoded (C order,
	// little-endian), so that a whole chunk's stored bytes are its decoded
	// chunk and need no codec.
	ChunkLayout(spec *BatchSpec, l Limits) (raw bool, err error)
	// ShardLayout is the layout of the shards spec describes: its Codecs
	// are a single sharding_indexed codec, its Shape a shard's. The inner
	// chunks and the index are checked under l; the shard as a whole may
	// be larger, as it is read and written an inner chunk at a time.
	ShardLayout(spec *BatchSpec, l Limits) (ShardLayout, error)
	// LegacyShardLayout is the layout of the shards of the sharding
	// storage transformer (v1 draft): chunksPerShard chunks of spec per
	// dimension, each encoded with spec.Codecs, and an index of raw
	// 16-byte little-endian entries at the end.
	LegacyShardLayout(spec *BatchSpec, chunksPerShard []int64, l Limits) (ShardLayout, error)
}

// BatchSpec describes the chunks of a batch: the codec chain and the
// decoded chunk layout.
type BatchSpec struct {
	Codecs    []zarr.CodecSpec
	Shape     []int64
	DataType  zarr.DataType
	FillValue []byte
	// CodecsJSON, if set, is Codecs as JSON (as it came on the wire, or
	// marshalled once for the spec's array): engines then key their built
	// chains by it, and send it to codec workers, instead of marshalling
	// Codecs for every batch. Whoever sets it keeps it in step with
	// Codecs.
	CodecsJSON string
}

// Chunk is a decoded chunk: fixed-size elements in C order, little-endian,
// in Data; for variable-length data types, the concatenated element bytes in
// Data and n+1 offsets into it.
type Chunk struct {
	Data    []byte
	Offsets []int64
	// buf is the buffer Data lies in, lent by the engine that decoded the
	// chunk, and giveBack hands it back; nil when the chunk owns its
	// memory. A function of the buffer rather than a closure over it, so
	// that lending costs no allocation per chunk.
	buf      []byte
	giveBack func([]byte)
}

// Lend returns a chunk of data and offsets lying in buf, whose Release
// calls giveBack(buf): for engines that decode into buffers they recycle,
// so that whoever holds the chunk last hands its buffer back.
func Lend(data []byte, offsets []int64, buf []byte, giveBack func([]byte)) Chunk {
	return Chunk{Data: data, Offsets: offsets, buf: buf, giveBack: giveBack}
}

// Lent reports whether the chunk's memory is lent by the engine that
// decoded it, to be handed back with Release.
func (c Chunk) Lent() bool { return c.giveBack != nil }

// Release hands the chunk's buffer back to the engine that lent it, for
// reuse: call it when nothing uses Data, or any slice of it, any more.
// Copies of a chunk share its buffer: release one of them, once. A chunk
// that owns its memory ignores it, and a lent chunk never released is
// simply garbage collected.
func (c Chunk) Release() {
	if c.giveBack != nil {
		c.giveBack(c.buf)
	}
}

// ItemError is a codec failure on one item of a batch.
type ItemError struct {
	Index int
	Err   error
}

func (e *ItemError) Error() string { return fmt.Sprintf("chunk %d of the batch: %v", e.Index, e.Err) }

// Unwrap returns the codec's error, which carries the error code (errs).
func (e *ItemError) Unwrap() error { return e.Err }

// Limits bound what one chunk may cost to decode or encode. An engine
// checks them when it builds a chain (and in Layouts), before anything is
// allocated, and every decoder's output stays within them. A zero (or
// negative) field is the engine's default.
type Limits struct {
	// MaxChunkBytes bounds a chunk's decoded size: for a fixed-size data
	// type its elements, for a variable-length one its offsets (8 bytes
	// per element). Above it a chain is ResourceExhausted.
	MaxChunkBytes int64
	// MaxVariableBytes bounds the element bytes of one chunk of a
	// variable-length data type (strings, bytes), whose size no metadata
	// gives: decoders stop there with ResourceExhausted, and encoding a
	// larger chunk is refused, so that every chunk written can be read.
	MaxVariableBytes int64
}

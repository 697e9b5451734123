package codec

import (
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/zarr"
)

// ShardingConfig is the sharding_indexed codec's configuration.
type ShardingConfig struct {
	ChunkShape    []int            `json:"chunk_shape"`
	Codecs        []zarr.CodecSpec `json:"codecs"`
	IndexCodecs   []zarr.CodecSpec `json:"index_codecs,omitempty"`
	IndexLocation string           `json:"index_location,omitempty"`
}

const emptyOffset = ^uint64(0)

// IndexEntry locates one inner chunk in a shard: NBytes bytes at Offset
// from the start of the shard. Both all ones mark an empty inner chunk,
// which reads as the fill value.
type IndexEntry struct{ Offset, NBytes uint64 }

// EmptyEntry is the index entry of an inner chunk that is not stored.
var EmptyEntry = IndexEntry{emptyOffset, emptyOffset}

// Empty reports whether the inner chunk is absent.
func (e IndexEntry) Empty() bool { return e == EmptyEntry }

// Range is the entry's byte range in the shard. It is meaningless for an
// empty entry; for the entries a ShardLayout's DecodeIndex returns, it
// never overflows.
func (e IndexEntry) Range() ByteRange {
	return ByteRange{Offset: int64(e.Offset), Length: int64(e.NBytes)}
}

// ByteRange is part of a stored shard: Length bytes from Offset, or, with
// Suffix, the last Length bytes (Offset unused). It mirrors the forms of a
// store's ranged reads without depending on the store package.
type ByteRange struct {
	Offset, Length int64
	Suffix         bool
}

// ShardIndex is a decoded shard index: one entry per inner chunk, in C
// order over the chunks-per-shard grid.
type ShardIndex []IndexEntry

// IsEmpty reports whether no inner chunk is stored.
func (x ShardIndex) IsEmpty() bool {
	for _, e := range x {
		if !e.Empty() {
			return false
		}
	}
	return true
}

// ShardLayout is how the index lies in the shards of one array and how it
// is encoded (Layouts returns it; codecsvc.Shard implements it). With it,
// an array engine reads a shard's index alone (IndexRange, DecodeIndex),
// then only the inner chunks it needs (IndexEntry.Range), and rewrites a
// shard from a mix of untouched encoded inner chunks and new ones (Split,
// Assemble), all without a codec engine at hand. Implementations are
// immutable and safe for concurrent use.
type ShardLayout interface {
	// NumInner is the number of inner chunks (and index entries).
	NumInner() int
	// IndexSize is the encoded size of the index.
	IndexSize() int64
	// IndexAtStart reports whether the index precedes the inner chunks
	// (index_location "start"); else it ends the shard.
	IndexAtStart() bool
	// DecodeIndex decodes an encoded index (IndexSize bytes) into
	// NumInner entries. A corrupt index (checksum mismatch, wrong size, an
	// entry whose range overflows) is DataLoss; entries past the end of
	// the shard are found when the range is read (InnerBytes for a whole
	// shard).
	DecodeIndex(b []byte) (ShardIndex, error)
	// EncodeIndex encodes an index of NumInner entries.
	EncodeIndex(x ShardIndex) ([]byte, error)
}

// IndexRange is where the index lies in a shard of s: its first IndexSize
// bytes or, for an index at the end, the suffix of that length.
func IndexRange(s ShardLayout) ByteRange {
	if s.IndexAtStart() {
		return ByteRange{Length: s.IndexSize()}
	}
	return ByteRange{Length: s.IndexSize(), Suffix: true}
}

// IndexBytes cuts the encoded index out of a whole shard of s.
func IndexBytes(s ShardLayout, shard []byte) ([]byte, error) {
	size := s.IndexSize()
	if int64(len(shard)) < size {
		return nil, errs.New(errs.DataLoss, "shard of %d bytes is shorter than its %d-byte index", len(shard), size)
	}
	if s.IndexAtStart() {
		return shard[:size], nil
	}
	return shard[int64(len(shard))-size:], nil
}

// InnerBytes returns inner chunk i's encoded bytes within a whole shard,
// nil for an empty entry. An entry pointing outside the shard is DataLoss.
func InnerBytes(shard []byte, x ShardIndex, i int) ([]byte, error) {
	e := x[i]
	if e.Empty() {
		return nil, nil
	}
	if e.Offset > uint64(len(shard)) || e.NBytes > uint64(len(shard))-e.Offset {
		return nil, errs.New(errs.DataLoss, "shard index entry %d (offset %d, %d bytes) points outside the %d-byte shard", i, e.Offset, e.NBytes, len(shard))
	}
	return shard[e.Offset : e.Offset+e.NBytes], nil
}

// Split returns the encoded inner chunks of a whole shard of s (nil for
// empty ones), as slices of shard, for Assemble to reuse without
// re-encoding.
func Split(s ShardLayout, shard []byte) ([][]byte, error) {
	ib, err := IndexBytes(s, shard)
	if err != nil {
		return nil, err
	}
	x, err := s.DecodeIndex(ib)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, s.NumInner())
	for i := range out {
		if out[i], err = InnerBytes(shard, x, i); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Assemble lays out a shard of s from NumInner encoded inner chunks (nil:
// empty), in order, with the index at its configured place. A shard whose
// inner chunks are all empty is still a valid shard (just an index);
// callers that do not store empty shards check ShardIndex.IsEmpty or the
// parts themselves.
func Assemble(s ShardLayout, parts [][]byte) ([]byte, error) {
	n, atStart := s.NumInner(), s.IndexAtStart()
	if len(parts) != n {
		return nil, errs.New(errs.InvalidArgument, "shard of %d inner chunks assembled from %d", n, len(parts))
	}
	x := make(ShardIndex, n)
	var pos, body int64
	if atStart {
		pos = s.IndexSize()
	}
	for i, p := range parts {
		if p == nil {
			x[i] = EmptyEntry
			continue
		}
		x[i] = IndexEntry{uint64(pos), uint64(len(p))}
		pos += int64(len(p))
		body += int64(len(p))
	}
	index, err := s.EncodeIndex(x)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, body+int64(len(index)))
	if atStart {
		out = append(out, index...)
	}
	for _, p := range parts {
		out = append(out, p...)
	}
	if !atStart {
		out = append(out, index...)
	}
	return out, nil
}

package codecsvc

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/zarr"
)

func shardChain(t testing.TB, config string, spec ChunkSpec) (*Chain, *Shard) {
	t.Helper()
	c := chain(t, `[{"name":"sharding_indexed","configuration":`+config+`}]`, spec)
	s := c.Shard()
	if s == nil {
		t.Fatal("Chain.Shard() = nil for a sharding chain")
	}
	return c, s
}

// fetch is what a store's ranged read returns for r.
func fetch(obj []byte, r codec.ByteRange) []byte {
	if r.Suffix {
		return obj[len(obj)-int(r.Length):]
	}
	return obj[r.Offset : r.Offset+r.Length]
}

// A hand-built shard, byte for byte: 4 uint16 in inner chunks of 2, the
// index (bytes little, crc32c) at the end; the second inner chunk holds
// only the fill value and is left out.
func TestShardKnownAnswer(t *testing.T) {
	spec := ChunkSpec{Shape: []int{4}, DataType: zarr.MustDataType("uint16"), FillValue: []byte{7, 0}}
	c, s := shardChain(t, `{"chunk_shape":[2],"codecs":[{"name":"bytes","configuration":{"endian":"big"}}],
		"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}],"index_location":"end"}`, spec)
	data := []byte{1, 2, 3, 4, 7, 0, 7, 0}
	want := []byte{2, 1, 4, 3} // inner chunk 0, big-endian
	index := binary.LittleEndian.AppendUint64(nil, 0)
	index = binary.LittleEndian.AppendUint64(index, 4)
	index = binary.LittleEndian.AppendUint64(index, ^uint64(0))
	index = binary.LittleEndian.AppendUint64(index, ^uint64(0))
	index = binary.LittleEndian.AppendUint32(index, crc32.Checksum(index, crc32.MakeTable(crc32.Castagnoli)))
	want = append(want, index...)
	enc, err := c.Encode(Chunk{Data: data})
	if err != nil || !bytes.Equal(enc, want) {
		t.Fatalf("encoded shard = % x, %v\nwant % x", enc, err, want)
	}
	if s.IndexSize() != 36 || codec.IndexRange(s) != (codec.ByteRange{Length: 36, Suffix: true}) {
		t.Errorf("index size %d, range %+v", s.IndexSize(), codec.IndexRange(s))
	}
	// Any layout is valid: inner chunks in reverse order with unused bytes
	// between them, both stored.
	body := []byte{0xee, 0, 7, 0, 7, 0xee, 0xee, 2, 1, 4, 3}
	x := codec.ShardIndex{{Offset: 7, NBytes: 4}, {Offset: 1, NBytes: 4}}
	ib, err := s.EncodeIndex(x)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := c.Decode(append(body, ib...))
	if err != nil || !bytes.Equal(dec.Data, data) {
		t.Errorf("decoded reordered shard = %v, %v", dec.Data, err)
	}
	// The specification's example: 4 inner chunks, bytes + crc32c, 68 bytes.
	_, s2 := shardChain(t, `{"chunk_shape":[32,32],"codecs":[{"name":"bytes","configuration":{"endian":"little"}}],
		"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}]}`,
		ChunkSpec{Shape: []int{64, 64}, DataType: zarr.MustDataType("float32")})
	if s2.IndexSize() != 68 {
		t.Errorf("index size of the specification's example = %d, want 68", s2.IndexSize())
	}
}

var shardConfigs = []string{
	`{"chunk_shape":[2,3],"codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1}}],"index_location":"end"}`,
	`{"chunk_shape":[2,3],"codecs":[{"name":"transpose","configuration":{"order":[1,0]}},{"name":"bytes","configuration":{"endian":"big"}},{"name":"gzip","configuration":{"level":1}}],
	  "index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}],"index_location":"start"}`,
	`{"chunk_shape":[2,3],"codecs":[{"name":"bytes","configuration":{"endian":"little"}}],"index_codecs":[{"name":"bytes","configuration":{"endian":"big"}}],"index_location":"start"}`,
	// Nested: inner chunks are themselves shards.
	`{"chunk_shape":[4,6],"codecs":[{"name":"sharding_indexed","configuration":{"chunk_shape":[2,3],"codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}],"index_location":"start"}}]}`,
}

// vlenInner replaces the bytes codec of a sharding configuration's inner
// chains (not its index chain) with vlen-utf8.
func vlenInner(t testing.TB, cfg string) string {
	var m map[string]any
	if err := json.Unmarshal([]byte(cfg), &m); err != nil {
		t.Fatal(err)
	}
	var walk func(m map[string]any)
	walk = func(m map[string]any) {
		for _, c := range m["codecs"].([]any) {
			c := c.(map[string]any)
			switch c["name"] {
			case "bytes":
				c["name"], c["configuration"] = "vlen-utf8", map[string]any{}
			case "sharding_indexed":
				walk(c["configuration"].(map[string]any))
			}
		}
	}
	walk(m)
	return mustJSON(m)
}

// Partial reads: the index by its range, then only the selected inner
// chunks by theirs, agree with decoding the whole shard.
func TestShardPartialRead(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	for _, dt := range []string{"int32", "float64", "uint8", "string"} {
		for _, cfg := range shardConfigs {
			spec := ChunkSpec{Shape: []int{8, 12}, DataType: zarr.MustDataType(dt)}
			if spec.DataType.VariableLength() {
				cfg = vlenInner(t, cfg)
			}
			c, s := shardChain(t, cfg, spec)
			in := sample(r, spec)
			// Leave one inner chunk all fill: it must be absent from the index.
			empty := s.NumInner() - 2
			if !spec.DataType.VariableLength() {
				s.forRows(s.InnerOrigin(empty), func(se, _, n int) { clear(in.Data[se*spec.DataType.Size : (se+n)*spec.DataType.Size]) })
			}
			enc, err := c.Encode(in)
			if err != nil {
				t.Fatal(err)
			}
			x, err := s.DecodeIndex(fetch(enc, codec.IndexRange(s)))
			if err != nil {
				t.Fatalf("%s %s: index: %v", dt, cfg, err)
			}
			if !spec.DataType.VariableLength() && !x[empty].Empty() {
				t.Errorf("%s %s: fill-only inner chunk stored at %+v", dt, cfg, x[empty])
			}
			for _, i := range []int{0, 1, empty, s.NumInner() - 1} {
				var b []byte
				if !x[i].Empty() {
					b = fetch(enc, x[i].Range())
				}
				got, err := s.DecodeInner(x[i], b)
				if err != nil {
					t.Fatalf("%s %s: inner chunk %d: %v", dt, cfg, i, err)
				}
				want := s.Extract(in, i)
				if !bytes.Equal(got.Data, want.Data) || !slices.Equal(got.Offsets, want.Offsets) {
					t.Errorf("%s %s: inner chunk %d differs", dt, cfg, i)
				}
			}
			// Nested: the inner layout reads its own inner chunks.
			if inner := s.InnerChain().Shard(); inner != nil && !x[0].Empty() {
				b := fetch(enc, x[0].Range())
				ix, err := inner.DecodeIndex(fetch(b, codec.IndexRange(inner)))
				if err != nil {
					t.Fatal(err)
				}
				got, err := inner.DecodeInner(ix[3], fetch(b, ix[3].Range()))
				if want := inner.Extract(s.Extract(in, 0), 3); err != nil || !bytes.Equal(got.Data, want.Data) || !slices.Equal(got.Offsets, want.Offsets) {
					t.Errorf("%s nested inner chunk: %v", dt, err)
				}
			}
		}
	}
}

// Rewriting some inner chunks keeps the others' encoded bytes as they
// were.
func TestShardRewrite(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for _, cfg := range shardConfigs {
		spec := ChunkSpec{Shape: []int{8, 12}, DataType: zarr.MustDataType("int16")}
		c, s := shardChain(t, cfg, spec)
		in := sample(r, spec)
		old, err := c.Encode(in)
		if err != nil {
			t.Fatal(err)
		}
		parts, err := codec.Split(s, old)
		if err != nil {
			t.Fatal(err)
		}
		kept := slices.Clone(parts)
		// One inner chunk gets new values, another becomes fill.
		changed, cleared := 1, s.NumInner()-1
		fresh := sample(r, s.InnerSpec())
		if parts[changed], err = s.EncodeInner(fresh); err != nil {
			t.Fatal(err)
		}
		if parts[cleared], err = s.EncodeInner(FillChunk(s.InnerSpec())); err != nil || parts[cleared] != nil {
			t.Fatalf("a fill-only inner chunk encodes to %v, %v; want nil", parts[cleared], err)
		}
		shard, err := codec.Assemble(s, parts)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range kept {
			if i != changed && i != cleared && !bytes.Contains(shard, p) {
				t.Errorf("%s: inner chunk %d's bytes are not in the rewritten shard", cfg, i)
			}
		}
		got, err := c.Decode(shard)
		if err != nil {
			t.Fatal(err)
		}
		inner := make([]Chunk, s.NumInner())
		for i := range inner {
			inner[i] = s.Extract(in, i)
		}
		inner[changed], inner[cleared] = fresh, FillChunk(s.InnerSpec())
		want, err := s.Gather(inner)
		if err != nil || !bytes.Equal(got.Data, want.Data) {
			t.Errorf("%s: rewritten shard decodes wrongly: %v", cfg, err)
		}
	}
}

func TestShardEmpty(t *testing.T) {
	for _, dt := range []string{"float32", "string"} {
		// NaN, or a string (valid UTF-8: strings that are not cannot be
		// written).
		fv := map[string][]byte{"float32": {0, 0, 0xc0, 0x7f}, "string": []byte("\x00\x00é")}[dt]
		spec := ChunkSpec{Shape: []int{4, 4}, DataType: zarr.MustDataType(dt), FillValue: fv}
		c, s := shardChain(t, `{"chunk_shape":[2,2],"codecs":[{"name":"`+map[string]string{"float32": "bytes", "string": "vlen-utf8"}[dt]+`"}],"index_location":"start"}`, spec)
		fill := FillChunk(spec)
		enc, err := c.Encode(fill)
		if err != nil || int64(len(enc)) != s.IndexSize() {
			t.Fatalf("%s: an all-fill shard encodes to %d bytes (%v), want only the %d-byte index", dt, len(enc), err, s.IndexSize())
		}
		x, err := s.DecodeIndex(enc)
		if err != nil || !x.IsEmpty() {
			t.Errorf("%s: index of an all-fill shard: %v %v", dt, x, err)
		}
		dec, err := c.Decode(enc)
		if err != nil || !bytes.Equal(dec.Data, fill.Data) || !slices.Equal(dec.Offsets, fill.Offsets) {
			t.Errorf("%s: empty shard decodes to %v, %v", dt, dec, err)
		}
	}
}

// The sharding storage transformer: raw 16-byte entries at the end.
func TestLegacyShard(t *testing.T) {
	chunk := ChunkSpec{Shape: []int{2, 2}, DataType: zarr.MustDataType("uint8")}
	var codecs []zarr.CodecSpec
	json.Unmarshal([]byte(`[{"name":"bytes"},{"name":"gzip","configuration":{"level":1}}]`), &codecs)
	s, err := NewLegacyShard(codecs, chunk, []int{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	if s.IndexSize() != 32 || codec.IndexRange(s) != (codec.ByteRange{Length: 32, Suffix: true}) || !slices.Equal(s.Spec().Shape, []int{2, 4}) {
		t.Fatalf("legacy layout: index %d %+v, shard shape %v", s.IndexSize(), codec.IndexRange(s), s.Spec().Shape)
	}
	// Chunk (0,1) stored first, chunk (0,0) absent.
	c1, err := s.InnerChain().Encode(Chunk{Data: []byte{1, 2, 3, 4}})
	if err != nil {
		t.Fatal(err)
	}
	shard := append([]byte(nil), c1...)
	shard = binary.LittleEndian.AppendUint64(shard, ^uint64(0))
	shard = binary.LittleEndian.AppendUint64(shard, ^uint64(0))
	shard = binary.LittleEndian.AppendUint64(shard, 0)
	shard = binary.LittleEndian.AppendUint64(shard, uint64(len(c1)))
	x, err := s.DecodeIndex(fetch(shard, codec.IndexRange(s)))
	if err != nil || !x[0].Empty() || x[1] != (codec.IndexEntry{Offset: 0, NBytes: uint64(len(c1))}) {
		t.Fatalf("legacy index %v, %v", x, err)
	}
	got, err := s.DecodeInner(x[1], fetch(shard, x[1].Range()))
	if err != nil || !bytes.Equal(got.Data, []byte{1, 2, 3, 4}) {
		t.Errorf("legacy inner chunk = %v, %v", got.Data, err)
	}
	whole, err := s.Decode(shard, s.Spec())
	if err != nil || !bytes.Equal(whole.Data, []byte{0, 0, 1, 2, 0, 0, 3, 4}) {
		t.Errorf("legacy shard = %v, %v", whole.Data, err)
	}
	again, err := s.Encode(whole, s.Spec())
	if err != nil || !bytes.Equal(again, shard) {
		t.Errorf("re-encoded legacy shard = % x, %v\nwant % x", again, err, shard)
	}
	if _, err := s.DecodeIndex(shard[:5]); !errors.Is(err, errs.DataLoss) {
		t.Errorf("short legacy index: %v", err)
	}
}

func TestShardBadInput(t *testing.T) {
	spec := ChunkSpec{Shape: []int{8, 12}, DataType: zarr.MustDataType("int32")}
	c, s := shardChain(t, shardConfigs[1], spec)
	enc, err := c.Encode(sample(rand.New(rand.NewPCG(6, 6)), spec))
	if err != nil {
		t.Fatal(err)
	}
	// A flipped bit in the index fails its checksum.
	bad := slices.Clone(enc)
	bad[3] ^= 1
	if _, err := s.DecodeIndex(fetch(bad, codec.IndexRange(s))); !errors.Is(err, errs.DataLoss) || !strings.Contains(err.Error(), "crc32c") {
		t.Errorf("corrupt index: %v", err)
	}
	if _, err := c.Decode(bad); !errors.Is(err, errs.DataLoss) {
		t.Errorf("shard with a corrupt index: %v", err)
	}
	// Entries pointing outside the shard, and fetched ranges of the wrong size.
	x, _ := s.DecodeIndex(fetch(enc, codec.IndexRange(s)))
	x[0] = codec.IndexEntry{Offset: uint64(len(enc)) - 2, NBytes: 10}
	if _, err := codec.InnerBytes(enc, x, 0); !errors.Is(err, errs.DataLoss) {
		t.Errorf("entry past the end: %v", err)
	}
	x[1] = codec.IndexEntry{Offset: ^uint64(0) - 5, NBytes: 10}
	if _, err := codec.InnerBytes(enc, x, 1); !errors.Is(err, errs.DataLoss) {
		t.Errorf("entry with an overflowing end: %v", err)
	}
	huge := make(codec.ShardIndex, s.NumInner())
	for i := range huge {
		huge[i] = codec.EmptyEntry
	}
	huge[3] = codec.IndexEntry{Offset: 1 << 63, NBytes: 1}
	ib, err := s.EncodeIndex(huge)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DecodeIndex(ib); !errors.Is(err, errs.DataLoss) {
		t.Errorf("index entry beyond 2^63: %v", err)
	}
	if _, err := s.DecodeInner(codec.IndexEntry{Offset: 0, NBytes: 10}, make([]byte, 9)); !errors.Is(err, errs.DataLoss) {
		t.Errorf("inner chunk shorter than its entry: %v", err)
	}
	if _, err := c.Decode(enc[:10]); !errors.Is(err, errs.DataLoss) {
		t.Errorf("truncated shard: %v", err)
	}
	// Configurations.
	for cfg, word := range map[string]string{
		`{"chunk_shape":[2,3],"codecs":[{"name":"bytes"}],"index_codecs":[{"name":"bytes"},{"name":"gzip"}]}`: "gzip",
		`{"chunk_shape":[2,3],"codecs":[{"name":"bytes"}],"index_location":"middle"}`:                         "index_location",
		`{"chunk_shape":[2],"codecs":[{"name":"bytes"}]}`:                                                     "chunk_shape",
		`{"chunk_shape":[3,3],"codecs":[{"name":"bytes"}]}`:                                                   "divide",
		`{"chunk_shape":[2,3],"codecs":[{"name":"bytes"}],"index_codecs":[{"name":"crc32c"}]}`:                "array-to-bytes",
		`{"chunk_shape":[2,3],"codecs":[{"name":"lzma"}]}`:                                                    "lzma",
	} {
		if _, err := NewShard(json.RawMessage(cfg), spec); err == nil || !strings.Contains(err.Error(), word) {
			t.Errorf("%s: %v, want an error naming %q", cfg, err, word)
		}
	}
	if _, err := NewLegacyShard([]zarr.CodecSpec{{Name: "bytes"}}, spec, []int{2}); !errors.Is(err, errs.InvalidArgument) {
		t.Errorf("legacy chunks_per_shard of the wrong rank: %v", err)
	}
	// Only a chain that is sharding alone exposes its layout.
	if chain(t, `[{"name":"sharding_indexed","configuration":{"chunk_shape":[2,3],"codecs":[{"name":"bytes"}]}},{"name":"crc32c"}]`, spec).Shard() != nil {
		t.Error("Shard() of sharding + crc32c is not nil")
	}
	if chain(t, `[{"name":"bytes"}]`, spec).Shard() != nil {
		t.Error("Shard() of bytes is not nil")
	}
}

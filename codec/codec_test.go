package codec_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/errs"
)

// rawLayout is a ShardLayout with a raw index (16-byte little-endian
// entries, no checksum), as the legacy sharding storage transformer has,
// here also at the start.
type rawLayout struct {
	n       int
	atStart bool
}

func (r rawLayout) NumInner() int      { return r.n }
func (r rawLayout) IndexSize() int64   { return 16 * int64(r.n) }
func (r rawLayout) IndexAtStart() bool { return r.atStart }

func (r rawLayout) DecodeIndex(b []byte) (codec.ShardIndex, error) {
	if len(b) != 16*r.n {
		return nil, errs.New(errs.DataLoss, "index of %d bytes", len(b))
	}
	x := make(codec.ShardIndex, r.n)
	for i := range x {
		x[i] = codec.IndexEntry{Offset: binary.LittleEndian.Uint64(b[16*i:]), NBytes: binary.LittleEndian.Uint64(b[16*i+8:])}
	}
	return x, nil
}

func (r rawLayout) EncodeIndex(x codec.ShardIndex) ([]byte, error) {
	b := make([]byte, 16*len(x))
	for i, e := range x {
		binary.LittleEndian.PutUint64(b[16*i:], e.Offset)
		binary.LittleEndian.PutUint64(b[16*i+8:], e.NBytes)
	}
	return b, nil
}

// TestAssembleSplit lays out shards with the index at either end, finds
// the index and every inner chunk where Split and the entries say, and
// gets the parts back.
func TestAssembleSplit(t *testing.T) {
	parts := [][]byte{[]byte("first"), nil, []byte("third!"), nil}
	for _, atStart := range []bool{false, true} {
		s := rawLayout{n: len(parts), atStart: atStart}
		shard, err := codec.Assemble(s, parts)
		if err != nil {
			t.Fatal(err)
		}
		if len(shard) != 11+64 {
			t.Fatalf("atStart %v: shard of %d bytes, want %d", atStart, len(shard), 11+64)
		}
		r := codec.IndexRange(s)
		if r.Length != 64 || r.Suffix == atStart {
			t.Fatalf("atStart %v: index range %+v", atStart, r)
		}
		ib, err := codec.IndexBytes(s, shard)
		if err != nil {
			t.Fatal(err)
		}
		want := shard[len(shard)-64:]
		if atStart {
			want = shard[:64]
		}
		if !bytes.Equal(ib, want) {
			t.Fatalf("atStart %v: IndexBytes cut the wrong bytes", atStart)
		}
		x, err := s.DecodeIndex(ib)
		if err != nil {
			t.Fatal(err)
		}
		if x.IsEmpty() || !x[1].Empty() || x[1] != codec.EmptyEntry || x[0].Empty() {
			t.Fatalf("atStart %v: index %v", atStart, x)
		}
		if e := x[2].Range(); !bytes.Equal(shard[e.Offset:e.Offset+e.Length], parts[2]) || e.Suffix {
			t.Fatalf("atStart %v: entry 2's range %+v", atStart, e)
		}
		got, err := codec.Split(s, shard)
		if err != nil {
			t.Fatal(err)
		}
		for i := range parts {
			if !bytes.Equal(got[i], parts[i]) || (got[i] == nil) != (parts[i] == nil) {
				t.Fatalf("atStart %v: part %d is %q, want %q", atStart, i, got[i], parts[i])
			}
		}
	}
	if _, err := codec.Assemble(rawLayout{n: 3}, parts); !errors.Is(err, errs.InvalidArgument) {
		t.Errorf("assembling 4 parts into a shard of 3: %v", err)
	}
	if x := make(codec.ShardIndex, 3); x.IsEmpty() {
		t.Errorf("zero entries (offset 0, 0 bytes) count as empty")
	}
	if !(codec.ShardIndex{codec.EmptyEntry, codec.EmptyEntry}).IsEmpty() {
		t.Errorf("an index of empty entries is not empty")
	}
}

// TestCorruptShard: a shard shorter than its index, or an entry pointing
// outside the shard, is DataLoss.
func TestCorruptShard(t *testing.T) {
	s := rawLayout{n: 2}
	if _, err := codec.IndexBytes(s, make([]byte, 31)); !errors.Is(err, errs.DataLoss) {
		t.Errorf("shard shorter than its index: %v", err)
	}
	shard, _ := codec.Assemble(s, [][]byte{[]byte("ab"), []byte("cd")})
	for _, e := range []codec.IndexEntry{{Offset: 3, NBytes: 40}, {Offset: 40, NBytes: 0}, {Offset: 1, NBytes: ^uint64(0)}} {
		x := codec.ShardIndex{{Offset: 0, NBytes: 2}, e}
		if _, err := codec.InnerBytes(shard, x, 1); !errors.Is(err, errs.DataLoss) {
			t.Errorf("entry %+v in a %d-byte shard: %v", e, len(shard), err)
		}
		bad := append(shard[:4:4], mustEncode(t, s, x)...)
		if _, err := codec.Split(s, bad); !errors.Is(err, errs.DataLoss) {
			t.Errorf("Split with entry %+v: %v", e, err)
		}
	}
	if b, err := codec.InnerBytes(shard, codec.ShardIndex{codec.EmptyEntry, codec.EmptyEntry}, 1); b != nil || err != nil {
		t.Errorf("empty entry: %q, %v", b, err)
	}
}

func mustEncode(t *testing.T, s codec.ShardLayout, x codec.ShardIndex) []byte {
	b, err := s.EncodeIndex(x)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRelease: a lent chunk's Release hands its buffer back (through any
// copy); a chunk that owns its memory is not lent and ignores Release.
func TestRelease(t *testing.T) {
	var own codec.Chunk = codec.Chunk{Data: []byte{1}}
	if own.Lent() {
		t.Fatal("a chunk built from its fields is lent")
	}
	own.Release() // no-op
	released := 0
	buf := []byte{1, 2, 3}
	c := codec.Lend(buf[:2], []int64{0, 2}, buf, func(b []byte) {
		if &b[0] != &buf[0] || len(b) != len(buf) {
			t.Errorf("handed back %v, not the lent buffer", b)
		}
		released++
	})
	if !c.Lent() || !bytes.Equal(c.Data, []byte{1, 2}) || len(c.Offsets) != 2 {
		t.Fatalf("lent chunk %+v", c)
	}
	cp := c
	cp.Release()
	if released != 1 {
		t.Fatalf("released %d times, want 1", released)
	}
}

func TestItemError(t *testing.T) {
	err := error(&codec.ItemError{Index: 3, Err: errs.New(errs.DataLoss, "bad")})
	var ie *codec.ItemError
	if !errors.As(err, &ie) || ie.Index != 3 || !errors.Is(err, errs.DataLoss) || err.Error() != "chunk 3 of the batch: bad" {
		t.Errorf("%v", err)
	}
}

package codecsvc

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"math/bits"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/zarr"
)

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

func init() {
	Register("bytes", newBytesCodec)
	Register("crc32c", func(cfg json.RawMessage, _ ChunkSpec) (any, error) {
		var c struct{}
		return crc32cCodec{}, configOf(cfg, &c)
	})
	Register("vlen-utf8", newVlen)
	Register("vlen-bytes", newVlen)
}

// bytesCodec is the v3 "bytes" codec: elements in little- or big-endian
// order.
type bytesCodec struct{ big bool }

func newBytesCodec(cfg json.RawMessage, in ChunkSpec) (any, error) {
	var c struct {
		Endian *string `json:"endian"`
	}
	if err := configOf(cfg, &c); err != nil {
		return nil, err
	}
	if in.DataType.VariableLength() {
		return nil, errs.New(errs.InvalidArgument, "the bytes codec cannot encode variable-length %s; use vlen-utf8 or vlen-bytes", in.DataType)
	}
	big := false
	if c.Endian != nil {
		switch *c.Endian {
		case "little":
		case "big":
			big = true
		default:
			return nil, errs.New(errs.InvalidArgument, "configuration.endian %q: want \"little\" or \"big\"", *c.Endian)
		}
	}
	// The specification requires endian for multi-byte types; zarr-python
	// reads a missing one as little-endian, and so do we.
	return bytesCodec{big: big && in.DataType.SwapUnit() > 1}, nil
}

// Raw reports whether a codec chain stores fixed-size elements of dt
// exactly as they are decoded (C order, little-endian): the bytes codec
// alone, swapping nothing. A whole chunk of such a chain needs no decoding,
// so it can be read straight into its destination.
func Raw(chain []zarr.CodecSpec, dt zarr.DataType) bool {
	if len(chain) != 1 || chain[0].Name != "bytes" {
		return false
	}
	c, err := newBytesCodec(chain[0].Configuration, ChunkSpec{DataType: dt})
	return err == nil && !c.(bytesCodec).big
}

// swapped returns a copy of b with every unit-byte group reversed.
func swapped(b []byte, unit int) []byte {
	out := make([]byte, len(b))
	swapInto(out, b, unit)
	return out
}

// swapInto writes src to dst (at least as long) with every unit-byte
// group reversed; dst may be src itself. Groups of 2, 4 and 8 bytes are
// swapped eight bytes at a time (a byte reversal and a rotation of a
// 64-bit word: about 4× the byte-by-byte loop).
func swapInto(dst, src []byte, unit int) {
	dst = dst[:len(src)]
	i := 0
	switch unit {
	case 2:
		for ; i+8 <= len(src); i += 8 {
			x := binary.LittleEndian.Uint64(src[i : i+8])
			binary.LittleEndian.PutUint64(dst[i:i+8], (x&0x00ff00ff00ff00ff)<<8|(x>>8)&0x00ff00ff00ff00ff)
		}
	case 4:
		for ; i+8 <= len(src); i += 8 {
			x := binary.LittleEndian.Uint64(src[i : i+8])
			binary.LittleEndian.PutUint64(dst[i:i+8], bits.RotateLeft64(bits.ReverseBytes64(x), 32))
		}
	case 8:
		for ; i+8 <= len(src); i += 8 {
			x := binary.LittleEndian.Uint64(src[i : i+8])
			binary.LittleEndian.PutUint64(dst[i:i+8], bits.ReverseBytes64(x))
		}
	}
	// What is left (a group or more under 8 bytes, other group sizes;
	// an odd group's middle byte stays, copied).
	for ; i+unit <= len(src); i += unit {
		for k := range (unit + 1) / 2 {
			dst[i+k], dst[i+unit-1-k] = src[i+unit-1-k], src[i+k]
		}
	}
}

func (c bytesCodec) Encode(ch Chunk, in ChunkSpec) ([]byte, error) {
	if c.big {
		return swapped(ch.Data, in.DataType.SwapUnit()), nil
	}
	return ch.Data, nil
}

func (c bytesCodec) Decode(b []byte, in ChunkSpec) (Chunk, error) {
	if int64(len(b)) != in.Bytes() {
		return Chunk{}, errs.New(errs.DataLoss, "bytes codec: chunk has %d bytes, want %d", len(b), in.Bytes())
	}
	if c.big {
		return Chunk{Data: swapped(b, in.DataType.SwapUnit())}, nil
	}
	return Chunk{Data: b}, nil
}

// decodeOwned is Decode of b that the chain may overwrite (a buffer a
// decoder before it filled): swapped where it lies, without a copy.
func (c bytesCodec) decodeOwned(b []byte, in ChunkSpec) (Chunk, error) {
	if int64(len(b)) != in.Bytes() {
		return Chunk{}, errs.New(errs.DataLoss, "bytes codec: chunk has %d bytes, want %d", len(b), in.Bytes())
	}
	if c.big {
		swapInto(b, b, in.DataType.SwapUnit())
	}
	return Chunk{Data: b}, nil
}

func (c bytesCodec) MaxEncodedSize(in ChunkSpec) int64 { return in.Bytes() }

// crc32cCodec appends a little-endian CRC32C of the bytes.
type crc32cCodec struct{}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (crc32cCodec) Encode(b []byte) ([]byte, error) {
	out := make([]byte, len(b), len(b)+4)
	copy(out, b)
	return binary.LittleEndian.AppendUint32(out, crc32.Checksum(b, castagnoli)), nil
}

func (crc32cCodec) Decode(b []byte, max int64) ([]byte, error) {
	if len(b) < 4 {
		return nil, errs.New(errs.DataLoss, "crc32c: %d bytes, too short for a checksum", len(b))
	}
	data := b[:len(b)-4]
	if got, want := crc32.Checksum(data, castagnoli), binary.LittleEndian.Uint32(b[len(b)-4:]); got != want {
		return nil, errs.New(errs.DataLoss, "crc32c checksum mismatch (stored %08x, computed %08x): the chunk is corrupt", want, got)
	}
	if max >= 0 && int64(len(data)) > max {
		return nil, errs.New(errs.DataLoss, "crc32c: %d bytes, more than the %d expected", len(data), max)
	}
	return data, nil
}

func (crc32cCodec) MaxEncodedSize(n int64) int64 { return n + 4 }

// vlen is numcodecs' VLenUTF8 / VLenBytes layout, which zarr-python 3's
// vlen-utf8 and vlen-bytes codecs use: a little-endian uint32 element count,
// then each element as a uint32 length and its bytes.
type vlen struct{}

func newVlen(cfg json.RawMessage, in ChunkSpec) (any, error) {
	var c struct{}
	if err := configOf(cfg, &c); err != nil {
		return nil, err
	}
	if !in.DataType.VariableLength() {
		return nil, errs.New(errs.InvalidArgument, "vlen codecs encode string or bytes arrays, not %s", in.DataType)
	}
	return vlen{}, nil
}

func (vlen) Encode(c Chunk, in ChunkSpec) ([]byte, error) {
	n := len(c.Offsets) - 1
	out := make([]byte, 0, 4+4*n+len(c.Data))
	out = binary.LittleEndian.AppendUint32(out, uint32(n))
	for i := range n {
		out = binary.LittleEndian.AppendUint32(out, uint32(c.Offsets[i+1]-c.Offsets[i]))
		out = append(out, c.Data[c.Offsets[i]:c.Offsets[i+1]]...)
	}
	return out, nil
}

func (vlen) Decode(b []byte, in ChunkSpec) (Chunk, error) {
	n := in.Elements()
	if len(b) < 4 {
		return Chunk{}, errs.New(errs.DataLoss, "vlen: %d bytes, too short for the header", len(b))
	}
	if got := binary.LittleEndian.Uint32(b); int64(got) != int64(n) {
		return Chunk{}, errs.New(errs.DataLoss, "vlen: header says %d elements, the chunk has %d", got, n)
	}
	if int64(len(b)-4) < 4*int64(n) {
		return Chunk{}, errs.New(errs.DataLoss, "vlen: %d bytes cannot hold %d elements", len(b), n)
	}
	offs := make([]int64, n+1)
	data := make([]byte, 0, len(b)-4-4*n)
	p := 4
	for i := range n {
		if p+4 > len(b) {
			return Chunk{}, errs.New(errs.DataLoss, "vlen: truncated at element %d", i)
		}
		l := int(binary.LittleEndian.Uint32(b[p:]))
		p += 4
		if l < 0 || l > len(b)-p {
			return Chunk{}, errs.New(errs.DataLoss, "vlen: element %d claims %d bytes past the end", i, l)
		}
		data = append(data, b[p:p+l]...)
		p += l
		offs[i+1] = int64(len(data))
	}
	if p != len(b) {
		return Chunk{}, errs.New(errs.DataLoss, "vlen: %d bytes left after the last element", len(b)-p)
	}
	return Chunk{Data: data, Offsets: offs}, nil
}

func (vlen) MaxEncodedSize(ChunkSpec) int64 { return -1 }

// variableBound: the element count, then a length and the bytes of each
// element.
func (vlen) variableBound(in ChunkSpec, varBytes int64) int64 {
	return 4 + 4*int64(in.Elements()) + varBytes
}

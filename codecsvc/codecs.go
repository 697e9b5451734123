package codecsvc

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"

	"github.com/zarrgate/zarrgate/errs"
)

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

func init() {
	Register("bytes", newBytesCodec)
	Register("transpose", newTranspose)
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

// swapped returns a copy of b with every unit-byte group reversed.
func swapped(b []byte, unit int) []byte {
	out := make([]byte, len(b))
	switch unit {
	case 2:
		for i := 0; i+2 <= len(b); i += 2 {
			out[i], out[i+1] = b[i+1], b[i]
		}
	case 4:
		for i := 0; i+4 <= len(b); i += 4 {
			binary.BigEndian.PutUint32(out[i:], binary.LittleEndian.Uint32(b[i:]))
		}
	case 8:
		for i := 0; i+8 <= len(b); i += 8 {
			binary.BigEndian.PutUint64(out[i:], binary.LittleEndian.Uint64(b[i:]))
		}
	default:
		for i := 0; i+unit <= len(b); i += unit {
			for k := range unit {
				out[i+k] = b[i+unit-1-k]
			}
		}
	}
	return out
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

// transpose permutes the dimensions: encoded dimension i is decoded
// dimension order[i].
type transpose struct{ order []int }

func newTranspose(cfg json.RawMessage, in ChunkSpec) (any, error) {
	var c struct {
		Order json.RawMessage `json:"order"`
	}
	if err := configOf(cfg, &c); err != nil {
		return nil, err
	}
	nd := len(in.Shape)
	var order []int
	var name string
	switch {
	case json.Unmarshal(c.Order, &order) == nil:
	case json.Unmarshal(c.Order, &name) == nil && name == "C":
		order = identity(nd)
	case json.Unmarshal(c.Order, &name) == nil && name == "F":
		order = make([]int, nd)
		for i := range order {
			order[i] = nd - 1 - i
		}
	default:
		return nil, errs.New(errs.InvalidArgument, "configuration.order: want a permutation of 0..%d", nd-1)
	}
	if len(order) != nd {
		return nil, errs.New(errs.InvalidArgument, "configuration.order %v: has %d entries, the chunk %d dimensions", order, len(order), nd)
	}
	seen := make([]bool, nd)
	for _, o := range order {
		if o < 0 || o >= nd || seen[o] {
			return nil, errs.New(errs.InvalidArgument, "configuration.order %v is not a permutation of 0..%d", order, nd-1)
		}
		seen[o] = true
	}
	return transpose{order: order}, nil
}

func identity(n int) []int {
	o := make([]int, n)
	for i := range o {
		o[i] = i
	}
	return o
}

func (t transpose) Resolve(in ChunkSpec) (ChunkSpec, error) {
	out := in
	out.Shape = make([]int, len(in.Shape))
	for i, o := range t.order {
		out.Shape[i] = in.Shape[o]
	}
	return out, nil
}

// permute returns, for every element of the encoded (transposed) layout in
// C order, its linear index in the decoded layout.
func (t transpose) sourceIndex(in ChunkSpec) []int {
	nd := len(in.Shape)
	strides := make([]int, nd)
	acc := 1
	for d := nd - 1; d >= 0; d-- {
		strides[d] = acc
		acc *= in.Shape[d]
	}
	n := in.Elements()
	idx := make([]int, n)
	outShape := make([]int, nd)
	outStride := make([]int, nd)
	for i, o := range t.order {
		outShape[i] = in.Shape[o]
		outStride[i] = strides[o]
	}
	k := make([]int, nd)
	src := 0
	for j := range n {
		idx[j] = src
		for d := nd - 1; d >= 0; d-- {
			k[d]++
			src += outStride[d]
			if k[d] < outShape[d] {
				break
			}
			src -= outStride[d] * outShape[d]
			k[d] = 0
		}
	}
	return idx
}

func (t transpose) Encode(c Chunk, in ChunkSpec) (Chunk, error) {
	idx := t.sourceIndex(in)
	if in.DataType.VariableLength() {
		out := Chunk{Offsets: make([]int64, 1, len(idx)+1), Data: make([]byte, 0, len(c.Data))}
		for _, s := range idx {
			out.Data = append(out.Data, c.Data[c.Offsets[s]:c.Offsets[s+1]]...)
			out.Offsets = append(out.Offsets, int64(len(out.Data)))
		}
		return out, nil
	}
	e := in.DataType.Size
	out := make([]byte, len(c.Data))
	for j, s := range idx {
		copy(out[j*e:(j+1)*e], c.Data[s*e:(s+1)*e])
	}
	return Chunk{Data: out}, nil
}

func (t transpose) Decode(c Chunk, in ChunkSpec) (Chunk, error) {
	idx := t.sourceIndex(in)
	if in.DataType.VariableLength() {
		if len(c.Offsets) != len(idx)+1 {
			return Chunk{}, errs.New(errs.DataLoss, "transpose: %d offsets for %d elements", len(c.Offsets), len(idx))
		}
		starts := make([]int64, len(idx))
		lens := make([]int64, len(idx))
		for j, s := range idx {
			starts[s] = c.Offsets[j]
			lens[s] = c.Offsets[j+1] - c.Offsets[j]
		}
		out := Chunk{Offsets: make([]int64, 1, len(idx)+1), Data: make([]byte, 0, len(c.Data))}
		for s := range idx {
			out.Data = append(out.Data, c.Data[starts[s]:starts[s]+lens[s]]...)
			out.Offsets = append(out.Offsets, int64(len(out.Data)))
		}
		return out, nil
	}
	e := in.DataType.Size
	out := make([]byte, len(c.Data))
	for j, s := range idx {
		copy(out[s*e:(s+1)*e], c.Data[j*e:(j+1)*e])
	}
	return Chunk{Data: out}, nil
}

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

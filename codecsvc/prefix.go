package codecsvc

import (
	"encoding/binary"
	"math/bits"

	"github.com/klauspost/compress/zstd"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/internal/bufpool"
)

// Partial decodes (issue 20: random 64×64 reads). A chunk stored as its
// elements in C order (the bytes codec, no byte swap) and compressed with
// zstd holds the elements a selection takes in the first bytes of its
// decoded form, up to the last selected element: a read of the top rows of
// a chunk needs only the zstd blocks that decode to those rows. zstd
// blocks decode to at most 128 KiB each (and encoders, libzstd's and
// klauspost's, fill each block but the last to that size), so a 256 × 256
// chunk of float32 (256 KiB, two blocks) read in its top half decodes one
// block instead of two.

// prefixChain reports whether the chunks of c decode to their elements in
// C order through one zstd stage alone (c.prefix: then decodeSelected
// decodes only the blocks a selection needs).
func prefixChain(c *Chain) bool {
	if len(c.aa) != 0 || c.variable || len(c.bb) != 1 {
		return false
	}
	bc, ok := c.ab.(bytesCodec)
	if !ok || bc.big {
		return false
	}
	_, ok = c.bb[0].(zstdCodec)
	return ok
}

// decodeSelected decodes the elements s selects of one encoded chunk of
// spec (the chain's, which Local.Chain built it for),
// packed in C order in a pooled buffer lent with the chunk: from the
// first bytes of the chunk alone when the chain allows it (prefixChain)
// and the frame lets zstdPrefix stop early, from the whole chunk
// otherwise.
func (c *Chain) decodeSelected(encoded []byte, spec *codec.BatchSpec, s codec.Selection) (Chunk, error) {
	if s.Whole() {
		return c.Decode(encoded)
	}
	elem := spec.DataType.Size
	n, err := codec.CheckSelection(s, spec.Shape, elem)
	if err != nil {
		return Chunk{}, err
	}
	if c.prefix {
		whole := c.spec.Bytes()
		if data, ok := zstdPrefix(encoded, selectionEnd(s, spec.Shape, elem), whole); ok {
			buf := bufpool.Get(int(n))
			codec.Pack(buf, data, spec.Shape, elem, s)
			bufpool.Put(data)
			return codec.Lend(buf, nil, buf, bufpool.Put), nil
		}
	}
	ch, err := c.Decode(encoded)
	if err != nil {
		return Chunk{}, err
	}
	return selectChunk(ch, spec, s)
}

// selectionEnd is the byte offset just past the last element s selects
// in a chunk of shape (C order, elem bytes each): codec.Pack reads no
// byte at or past it.
func selectionEnd(s codec.Selection, shape []int64, elem int) int64 {
	off, stride := int64(0), int64(1)
	for d := len(shape) - 1; d >= 0; d-- {
		off += (s.Start[d] + (s.Count[d]-1)*s.Step[d]) * stride
		stride *= shape[d]
	}
	return (off + 1) * int64(elem)
}

// zstdPrefix decodes at least the first need bytes of the zstd frame b
// into a pooled buffer (returned with ok; its length is need or more) by
// decoding a copy of the frame cut after the blocks that hold them. ok is
// false whenever that cannot be done or would save nothing, and the caller
// then decodes b whole (which reports any damage as DataLoss): a frame
// that is not one plain frame (skippable, with a dictionary or a content
// checksum, whose check needs every block, or whose declared content size
// is not whole, the chunk's size), when the blocks needed are all of
// them, or when the cut frame fails to decode or decodes to fewer than
// need bytes (blocks smaller than their maximum). Damage to the blocks
// after the cut goes unnoticed by such a read, as a ranged read of an
// uncompressed chunk does not notice damage outside its range.
func zstdPrefix(b []byte, need, whole int64) (_ []byte, ok bool) {
	if recoverPanics {
		defer func() {
			if p := recover(); p != nil { // as Chain.decode: the whole decode reports the damage
				ok = false
			}
		}()
	}
	var h zstd.Header
	rest, err := h.DecodeAndStrip(b)
	if err != nil || h.Skippable || h.DictionaryID != 0 || h.HasCheckSum || !h.HasFCS ||
		h.FrameContentSize != uint64(whole) || need <= 0 || need >= whole {
		return nil, false
	}
	window := h.WindowSize
	if h.SingleSegment {
		window = h.FrameContentSize
	}
	maxBlock := min(window, zstdMaxBlock)
	// The blocks up to the one that brings the decoded size to need,
	// counting a compressed block at its maximum.
	var got uint64
	cut, lastAt := 0, 0 // bytes of rest kept; where the last kept block's header is
	for {
		if len(rest[cut:]) < 3 {
			return nil, false
		}
		bh := uint32(rest[cut]) | uint32(rest[cut+1])<<8 | uint32(rest[cut+2])<<16
		last, typ, size := bh&1 != 0, (bh>>1)&3, int(bh>>3)
		in := size
		switch typ {
		case 0: // raw
			got += uint64(size)
		case 1: // RLE
			in = 1
			got += uint64(size)
		case 2: // compressed
			got += maxBlock
		default:
			return nil, false
		}
		if last || cut+3+in > len(rest) {
			return nil, false // every block is needed (or the frame is damaged)
		}
		lastAt = cut
		cut += 3 + in
		if got >= uint64(need) {
			break
		}
	}
	// The cut frame: a header with a window descriptor (a window at least
	// the frame's own, so that every back-reference stays in it, but no
	// larger than the chunk: no reference reaches further back than the
	// whole content, and a damaged header's window of gigabytes must not
	// size the decoder's history) and no content size or checksum, then
	// the kept blocks, the last marked so.
	exp := max(bits.Len64(min(window, uint64(whole))-1), 10) // min(window, whole) ≤ 1 << exp
	if exp-10 > 31 {
		return nil, false
	}
	frame := bufpool.Get(6 + cut)
	defer bufpool.Put(frame)
	binary.LittleEndian.PutUint32(frame, 0xFD2FB528)
	frame[4] = 0                 // no content size, not single-segment, no checksum, no dictionary
	frame[5] = byte(exp-10) << 3 // Window_Descriptor: exponent, mantissa 0
	copy(frame[6:], rest[:cut])
	frame[6+lastAt] |= 1 // the last kept block: Last_Block
	out := bufpool.Get(int(whole))
	if cZstdDecode != nil {
		n, _, err := cZstdDecode(out[:whole], frame[:6+cut])
		if err != nil || int64(n) < need {
			bufpool.Put(out)
			return nil, false
		}
		return out[:n], true
	}
	dec, err := zstdDecoder().DecodeAll(frame[:6+cut], out[:0:whole])
	if err != nil || int64(len(dec)) < need || len(dec) == 0 || &dec[0] != &out[0] {
		bufpool.Put(out)
		return nil, false
	}
	return out[:len(dec)], true
}

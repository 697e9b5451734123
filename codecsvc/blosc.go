package codecsvc

import (
	"encoding/json"

	"github.com/zarrgate/zarrgate/codecsvc/blosc"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/bufpool"
)

func init() { Register("blosc", newBlosc) }

// bloscCodec is v3 "blosc", over our pure-Go Blosc.
type bloscCodec struct{ o blosc.Options }

func newBlosc(cfg json.RawMessage, in ChunkSpec) (any, error) {
	c := struct {
		Cname     string          `json:"cname"`
		Clevel    *int            `json:"clevel"`
		Shuffle   json.RawMessage `json:"shuffle"`
		Typesize  *int            `json:"typesize"`
		Blocksize int             `json:"blocksize"`
	}{Cname: "lz4"}
	if err := lenient(cfg, &c); err != nil {
		return nil, err
	}
	o := blosc.Options{Cname: c.Cname, Clevel: 5, Typesize: max(in.DataType.Size, 1), Blocksize: c.Blocksize, Shuffle: blosc.NoShuffle}
	if c.Clevel != nil {
		o.Clevel = *c.Clevel
	}
	if c.Typesize != nil && *c.Typesize > 0 {
		o.Typesize = *c.Typesize
	}
	var name string
	var num int
	switch {
	case len(c.Shuffle) == 0:
		o.Shuffle = blosc.ByteShuffle
	case json.Unmarshal(c.Shuffle, &name) == nil:
		switch name {
		case "noshuffle":
		case "shuffle":
			o.Shuffle = blosc.ByteShuffle
		case "bitshuffle":
			o.Shuffle = blosc.BitShuffle
		default:
			return nil, errs.New(errs.InvalidArgument, "configuration.shuffle %q: want noshuffle, shuffle or bitshuffle", name)
		}
	case json.Unmarshal(c.Shuffle, &num) == nil && num >= -1 && num <= 2:
		o.Shuffle = blosc.Shuffle(num)
		if num == -1 {
			o.Shuffle = blosc.ByteShuffle
			if o.Typesize == 1 {
				o.Shuffle = blosc.BitShuffle
			}
		}
	default:
		return nil, errs.New(errs.InvalidArgument, "configuration.shuffle %s: want noshuffle, shuffle or bitshuffle", c.Shuffle)
	}
	switch o.Cname {
	case "blosclz", "lz4", "lz4hc", "zstd", "zlib", "snappy":
	default:
		return nil, errs.New(errs.InvalidArgument, "configuration.cname %q: want blosclz, lz4, lz4hc, zstd, zlib or snappy", o.Cname)
	}
	if o.Clevel < 0 || o.Clevel > 9 {
		return nil, errs.New(errs.InvalidArgument, "configuration.clevel %d: want 0 to 9", o.Clevel)
	}
	return bloscCodec{o}, nil
}

func (b bloscCodec) Encode(in []byte) ([]byte, error) { return blosc.Compress(in, b.o) }

func (bloscCodec) Decode(in []byte, limit int64) ([]byte, error) {
	if limit < 0 || limit > 1<<31-1 {
		limit = 1<<31 - 1
	}
	if nbytes, cbytes, blocksize, err := blosc.Info(in); err == nil {
		if int64(nbytes) > limit {
			return nil, errs.New(errs.DataLoss, "blosc: frame decodes to %d bytes, more than the %d expected%w", nbytes, limit, errOverBound)
		}
		if cbytes != len(in) {
			return nil, errs.New(errs.DataLoss, "blosc: the frame says %d bytes, the chunk has %d", cbytes, len(in))
		}
		// c-blosc never makes a block larger than the content: a header
		// that does is corrupt (the decoder itself would only size its
		// scratch space by the content).
		if blocksize > max(nbytes, 64<<10) {
			return nil, errs.New(errs.DataLoss, "blosc: block size %d exceeds the %d-byte content", blocksize, nbytes)
		}
	}
	// A pooled buffer, not zeroed (DecompressWith writes every byte of it or
	// fails), taken once the frame's streams are known to be able to fill it.
	var buf []byte
	out, err := blosc.DecompressWith(in, int(limit), func(n int) []byte {
		buf = bufpool.Get(n)
		return buf
	})
	if err != nil {
		if buf != nil {
			bufpool.Put(buf)
		}
		return nil, err
	}
	return out, nil
}

// decodesIntoPool: Decode's result is a whole bufpool buffer.
func (bloscCodec) decodesIntoPool() {}

func (bloscCodec) MaxEncodedSize(n int64) int64 { return bound(n, blosc.HeaderSize+n/64+64) }

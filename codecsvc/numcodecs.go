package codecsvc

import (
	"encoding/binary"
	"encoding/json"
	"math"

	"github.com/zarrgate/zarrgate/codecsvc/blosc"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/zarr"
)

func init() {
	Register("numcodecs.shuffle", newShuffle)
	Register("numcodecs.delta", newDelta)
}

// shuffleCodec is numcodecs Shuffle: byte k of every element goes to the
// k-th plane. Trailing bytes that do not fill an element stay in place.
type shuffleCodec struct{ size int }

func newShuffle(cfg json.RawMessage, in ChunkSpec) (any, error) {
	c := struct {
		Elementsize *int `json:"elementsize"`
	}{}
	if err := lenient(cfg, &c); err != nil {
		return nil, err
	}
	size := 4
	if c.Elementsize != nil {
		size = *c.Elementsize
	}
	if size <= 0 {
		return nil, errs.New(errs.InvalidArgument, "configuration.elementsize %d must be positive", size)
	}
	return shuffleCodec{size}, nil
}

func (s shuffleCodec) Encode(b []byte) ([]byte, error) {
	out := make([]byte, len(b))
	blosc.ShuffleBytes(s.size, b, out)
	return out, nil
}

func (s shuffleCodec) Decode(b []byte, max int64) ([]byte, error) {
	if max >= 0 && int64(len(b)) > max {
		return nil, errs.New(errs.DataLoss, "shuffle: %d bytes, more than the %d expected", len(b), max)
	}
	out := make([]byte, len(b))
	blosc.UnshuffleBytes(s.size, b, out)
	return out, nil
}

func (s shuffleCodec) MaxEncodedSize(n int64) int64 { return n }

// deltaCodec is numcodecs Delta: the first element, then the differences
// of consecutive elements (flattened), computed in dtype and stored as
// astype.
type deltaCodec struct{ dtype, astype zarr.DataType }

func newDelta(cfg json.RawMessage, in ChunkSpec) (any, error) {
	c := struct {
		Dtype  string `json:"dtype"`
		Astype string `json:"astype"`
	}{}
	if err := lenient(cfg, &c); err != nil {
		return nil, err
	}
	dt, astype := in.DataType, in.DataType
	var err error
	if c.Dtype != "" {
		if dt, _, err = zarr.ParseV2DataType(c.Dtype); err != nil {
			return nil, errs.New(errs.InvalidArgument, "configuration.dtype %q: %v", c.Dtype, err)
		}
	}
	if c.Astype != "" {
		if astype, _, err = zarr.ParseV2DataType(c.Astype); err != nil {
			return nil, errs.New(errs.InvalidArgument, "configuration.astype %q: %v", c.Astype, err)
		}
	}
	for _, d := range []zarr.DataType{dt, astype} {
		if d.Kind != zarr.KindInt && d.Kind != zarr.KindUint && !(d.Kind == zarr.KindFloat && d.Size >= 4) {
			return nil, errs.New(errs.Unimplemented, "numcodecs.delta on %s is not supported (integers, float32, float64)", d)
		}
	}
	if dt.Size != in.DataType.Size || dt.Kind != in.DataType.Kind {
		return nil, errs.New(errs.InvalidArgument, "configuration.dtype %s does not match the array's %s", dt, in.DataType)
	}
	return deltaCodec{dtype: dt, astype: astype}, nil
}

func (d deltaCodec) Resolve(in ChunkSpec) (ChunkSpec, error) {
	out := in
	out.DataType = d.astype
	out.FillValue = convert(in.fill(), d.dtype, d.astype)
	return out, nil
}

// get reads element i of b as an int64 (two's complement) or float64.
func get(b []byte, i int, t zarr.DataType) (int64, float64) {
	switch t.Kind {
	case zarr.KindFloat:
		if t.Size == 4 {
			return 0, float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
		}
		return 0, math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
	var u uint64
	switch t.Size {
	case 1:
		u = uint64(b[i])
	case 2:
		u = uint64(binary.LittleEndian.Uint16(b[2*i:]))
	case 4:
		u = uint64(binary.LittleEndian.Uint32(b[4*i:]))
	default:
		u = binary.LittleEndian.Uint64(b[8*i:])
	}
	if t.Kind == zarr.KindInt {
		shift := 64 - 8*t.Size
		return int64(u<<shift) >> shift, 0
	}
	return int64(u), 0
}

// put writes an integer (wrapping) or float element.
func put(b []byte, i int, t zarr.DataType, iv int64, fv float64) {
	if t.Kind == zarr.KindFloat {
		if t.Size == 4 {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(fv)))
		} else {
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(fv))
		}
		return
	}
	switch t.Size {
	case 1:
		b[i] = byte(iv)
	case 2:
		binary.LittleEndian.PutUint16(b[2*i:], uint16(iv))
	case 4:
		binary.LittleEndian.PutUint32(b[4*i:], uint32(iv))
	default:
		binary.LittleEndian.PutUint64(b[8*i:], uint64(iv))
	}
}

func convert(one []byte, from, to zarr.DataType) []byte {
	out := make([]byte, to.Size)
	iv, fv := get(one, 0, from)
	if from.Kind == zarr.KindFloat && to.Kind != zarr.KindFloat {
		iv = int64(fv)
	} else if from.Kind != zarr.KindFloat && to.Kind == zarr.KindFloat {
		fv = float64(iv)
	}
	put(out, 0, to, iv, fv)
	return out
}

func (d deltaCodec) Encode(c Chunk, in ChunkSpec) (Chunk, error) {
	n := in.Elements()
	out := make([]byte, n*d.astype.Size)
	float := d.dtype.Kind == zarr.KindFloat
	var pi int64
	var pf float64
	for i := range n {
		iv, fv := get(c.Data, i, d.dtype)
		di, df := iv-pi, fv-pf
		if float && d.dtype.Size == 4 {
			df = float64(float32(fv) - float32(pf))
		}
		if i == 0 {
			di, df = iv, fv
		}
		if float != (d.astype.Kind == zarr.KindFloat) {
			if float {
				di = int64(df)
			} else {
				df = float64(di)
			}
		}
		put(out, i, d.astype, di, df)
		pi, pf = iv, fv
	}
	return Chunk{Data: out}, nil
}

func (d deltaCodec) Decode(c Chunk, in ChunkSpec) (Chunk, error) {
	n := in.Elements()
	if len(c.Data) != n*d.astype.Size {
		return Chunk{}, errs.New(errs.DataLoss, "delta: %d bytes for %d elements of %s", len(c.Data), n, d.astype)
	}
	out := make([]byte, n*d.dtype.Size)
	float := d.dtype.Kind == zarr.KindFloat
	var si int64
	var sf float64
	var sf32 float32
	for i := range n {
		iv, fv := get(c.Data, i, d.astype)
		if float != (d.astype.Kind == zarr.KindFloat) {
			if float {
				fv = float64(iv)
			} else {
				iv = int64(fv)
			}
		}
		si += iv
		sf += fv
		sf32 += float32(fv)
		if float && d.dtype.Size == 4 {
			put(out, i, d.dtype, 0, float64(sf32))
		} else {
			put(out, i, d.dtype, si, sf)
		}
	}
	return Chunk{Data: out}, nil
}

package codecsvc

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"strconv"
	"strings"

	"github.com/x448/float16"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/zarr"
)

// The numcodecs filters that work element by element (fixedscaleoffset,
// quantize, bitround, astype), packbits and categorize, as array-to-array
// codecs; numcodecs' own configuration, as zarr-python 3 names them
// ("numcodecs.<id>") and as zarr.CodecSpec normalises v2 filters. Their
// arithmetic follows NumPy 2 exactly, so that our encoding of a chunk is
// numcodecs' byte for byte, lossy codecs included: a Python number meeting
// an array takes the array's type (NEP 50), so float32 data is scaled in
// float32; integer data with an integer offset and scale stays integer
// (wrapping), and becomes float64 as soon as a float takes part.
func init() {
	Register("numcodecs.fixedscaleoffset", newFixedScaleOffset)
	Register("numcodecs.quantize", newQuantize)
	Register("numcodecs.bitround", newBitRound)
	Register("numcodecs.astype", newAsType)
	Register("numcodecs.packbits", newPackBits)
	Register("numcodecs.categorize", newCategorize)
}

// dtypes reads a filter's dtype (which must be the array's, as the chain
// has it) and astype (the stored type; dtype when absent), each one kind
// accepts.
func dtypes(dtype, astype string, in ChunkSpec, accept func(zarr.DataType) bool) (dt, at zarr.DataType, err error) {
	if dt, err = numericType("dtype", dtype, in.DataType, accept); err != nil {
		return dt, at, err
	}
	if err = sameType("dtype", dt, in); err != nil {
		return dt, at, err
	}
	at = dt
	if astype != "" {
		at, err = numericType("astype", astype, dt, accept)
	}
	return dt, at, err
}

// numericType parses a numcodecs dtype field (a NumPy typestring such as
// "<f8"; the byte order is the bytes codec's business) that must be one of
// the given kinds, defaulting to def when absent.
func numericType(field, s string, def zarr.DataType, ok func(zarr.DataType) bool) (zarr.DataType, error) {
	if s == "" {
		if !ok(def) {
			return def, errs.New(errs.InvalidArgument, "configuration.%s: the array's %s is not supported", field, def)
		}
		return def, nil
	}
	t, _, err := zarr.ParseV2DataType(s)
	if err != nil {
		return t, errs.New(errs.InvalidArgument, "configuration.%s %q: %v", field, s, err)
	}
	if !ok(t) {
		return t, errs.New(errs.InvalidArgument, "configuration.%s %q is not supported", field, s)
	}
	return t, nil
}

func isInt(t zarr.DataType) bool { return t.Kind == zarr.KindInt || t.Kind == zarr.KindUint }

// isNum: integers, float32 and float64 (float16 arithmetic would need
// NumPy's per-operation rounding through float32, not worth it for codecs
// meant to shrink data).
func isNum(t zarr.DataType) bool { return isInt(t) || t.Kind == zarr.KindFloat && t.Size >= 4 }
func isFloat(t zarr.DataType) bool {
	return t.Kind == zarr.KindFloat && t.Size >= 4
}
func isCastable(t zarr.DataType) bool {
	return isInt(t) || t.Kind == zarr.KindFloat || t.Kind == zarr.KindBool
}

// sameType checks that a codec's decoded dtype is the array's: numcodecs
// would reinterpret the bytes (ndarray.view), never what anyone means.
func sameType(field string, t zarr.DataType, in ChunkSpec) error {
	if t.Kind != in.DataType.Kind || t.Size != in.DataType.Size {
		return errs.New(errs.InvalidArgument, "configuration.%s %s does not match the array's %s", field, t, in.DataType)
	}
	return nil
}

// loadBits reads an integer element: sign-extended for signed types,
// zero-extended (uint64: the bits) otherwise.
func loadBits(b []byte, t zarr.DataType) int64 {
	var u uint64
	switch t.Size {
	case 1:
		u = uint64(b[0])
	case 2:
		u = uint64(binary.LittleEndian.Uint16(b))
	case 4:
		u = uint64(binary.LittleEndian.Uint32(b))
	default:
		u = binary.LittleEndian.Uint64(b)
	}
	if t.Kind == zarr.KindInt {
		s := 64 - 8*t.Size
		return int64(u<<s) >> s
	}
	return int64(u)
}

func storeBits(b []byte, t zarr.DataType, v int64) {
	switch t.Size {
	case 1:
		b[0] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(b, uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(b, uint32(v))
	default:
		binary.LittleEndian.PutUint64(b, uint64(v))
	}
}

// wrap reduces v to t's range, as NumPy's integer arithmetic wraps.
func wrap(v int64, t zarr.DataType) int64 {
	var b [8]byte
	storeBits(b[:], t, v)
	return loadBits(b[:], t)
}

// intFloat is an integer element's value as a float64.
func intFloat(v int64, t zarr.DataType) float64 {
	if t.Kind == zarr.KindUint && t.Size == 8 {
		return float64(uint64(v))
	}
	return float64(v)
}

func loadFloat(b []byte, t zarr.DataType) float64 {
	switch {
	case t.Kind == zarr.KindBool:
		if b[0] != 0 {
			return 1
		}
		return 0
	case isInt(t):
		return intFloat(loadBits(b, t), t)
	case t.Size == 2:
		return float64(float16.Frombits(binary.LittleEndian.Uint16(b)).Float32())
	case t.Size == 4:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(b))
}

// half rounds f to the nearest float16 once, as NumPy does (going through
// float32 with round-to-nearest twice can be off by one unit): float32
// rounding to odd keeps the information the second rounding needs.
func half(f float64) uint16 {
	t := float32(f)
	if float64(t) != f && !math.IsNaN(f) && !math.IsInf(float64(t), 0) {
		bits := math.Float32bits(t)
		if math.Abs(float64(t)) > math.Abs(f) {
			bits--
		}
		t = math.Float32frombits(bits | 1)
	}
	return float16.Fromfloat32(t).Bits()
}

// storeFloat stores a float as t with NumPy's cast: floats round to
// nearest, integers truncate toward zero and wrap, bools are f != 0.
func storeFloat(b []byte, t zarr.DataType, f float64) {
	switch {
	case t.Kind == zarr.KindBool:
		b[0] = 0
		if f != 0 {
			b[0] = 1
		}
	case isInt(t):
		if t.Kind == zarr.KindUint && t.Size == 8 && f >= 1<<63 {
			storeBits(b, t, int64(uint64(f)))
		} else {
			storeBits(b, t, int64(f))
		}
	case t.Size == 2:
		binary.LittleEndian.PutUint16(b, half(f))
	case t.Size == 4:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(f)))
	default:
		binary.LittleEndian.PutUint64(b, math.Float64bits(f))
	}
}

// cast converts one element from one type to another as ndarray.astype.
func cast(dst []byte, to zarr.DataType, src []byte, from zarr.DataType) {
	switch {
	case from.Kind == zarr.KindBool || isInt(from):
		var v int64
		if from.Kind == zarr.KindBool {
			v = int64(min(src[0], 1))
		} else {
			v = loadBits(src, from)
		}
		switch {
		case isInt(to):
			storeBits(dst, to, v)
		case to.Kind == zarr.KindBool:
			dst[0] = 0
			if v != 0 {
				dst[0] = 1
			}
		case to.Size == 4: // one rounding, not two through float64
			if from.Kind == zarr.KindUint && from.Size == 8 {
				binary.LittleEndian.PutUint32(dst, math.Float32bits(float32(uint64(v))))
			} else {
				binary.LittleEndian.PutUint32(dst, math.Float32bits(float32(v)))
			}
		default:
			storeFloat(dst, to, intFloat(v, from))
		}
	default:
		storeFloat(dst, to, loadFloat(src, from))
	}
}

// roundTo rounds an intermediate result to the precision of float type t.
func roundTo(f float64, t zarr.DataType) float64 {
	if t.Size == 4 {
		return float64(float32(f))
	}
	return f
}

// elementCodec is an array-to-array codec that maps each element of the
// decoded type to one of the encoded type.
type elementCodec struct {
	name           string
	dec, enc       zarr.DataType
	encode, decode func(dst, src []byte)
}

func (e elementCodec) Resolve(in ChunkSpec) (ChunkSpec, error) {
	out := in
	out.DataType = e.enc
	out.FillValue = make([]byte, e.enc.Size)
	e.encode(out.FillValue, in.fill())
	return out, nil
}

func (e elementCodec) Encode(c Chunk, in ChunkSpec) (Chunk, error) {
	n, ds, es := in.Elements(), e.dec.Size, e.enc.Size
	out := make([]byte, n*es)
	for i := range n {
		e.encode(out[i*es:(i+1)*es], c.Data[i*ds:(i+1)*ds])
	}
	return Chunk{Data: out}, nil
}

func (e elementCodec) Decode(c Chunk, in ChunkSpec) (Chunk, error) {
	n, ds, es := in.Elements(), e.dec.Size, e.enc.Size
	if len(c.Data) != n*es {
		return Chunk{}, errs.New(errs.DataLoss, "%s: %d bytes for %d elements of %s", e.name, len(c.Data), n, e.enc)
	}
	out := make([]byte, n*ds)
	for i := range n {
		e.decode(out[i*ds:(i+1)*ds], c.Data[i*es:(i+1)*es])
	}
	return Chunk{Data: out}, nil
}

// number is a JSON number from a configuration, remembering whether
// Python reads it as an int or a float (which decides NumPy's arithmetic).
type number struct {
	f     float64
	i     int64
	isInt bool
}

func parseNumber(field string, raw json.RawMessage) (number, error) {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return number{}, errs.New(errs.InvalidArgument, "configuration.%s: missing", field)
	}
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return number{f: float64(i), i: i, isInt: true}, nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		return number{}, errs.New(errs.InvalidArgument, "configuration.%s: %s is not a number", field, s)
	}
	return number{f: f}, nil
}

// fits reports whether an integer is in t's range: NumPy 2 refuses to
// combine an array with a Python int it cannot hold (OverflowError).
func fits(v int64, t zarr.DataType) bool {
	if t.Kind == zarr.KindUint {
		return v >= 0 && (t.Size == 8 || v < 1<<(8*t.Size))
	}
	return t.Size == 8 || v >= -(1<<(8*t.Size-1)) && v < 1<<(8*t.Size-1)
}

// newFixedScaleOffset is numcodecs FixedScaleOffset: encoded =
// around((x - offset) * scale) as astype; decoded = encoded / scale +
// offset as dtype.
func newFixedScaleOffset(cfg json.RawMessage, in ChunkSpec) (any, error) {
	c := struct {
		Offset json.RawMessage `json:"offset"`
		Scale  json.RawMessage `json:"scale"`
		Dtype  string          `json:"dtype"`
		Astype string          `json:"astype"`
	}{}
	if err := lenient(cfg, &c); err != nil {
		return nil, err
	}
	offset, err := parseNumber("offset", c.Offset)
	if err != nil {
		return nil, err
	}
	scale, err := parseNumber("scale", c.Scale)
	if err != nil {
		return nil, err
	}
	dt, at, err := dtypes(c.Dtype, c.Astype, in, isNum)
	if err != nil {
		return nil, err
	}
	e := elementCodec{name: "numcodecs.fixedscaleoffset", dec: dt, enc: at}
	switch {
	case isFloat(dt): // float32 stays float32: the Python numbers are cast to it
		off, sc := roundTo(offset.f, dt), roundTo(scale.f, dt)
		e.encode = func(dst, src []byte) {
			v := roundTo(roundTo(loadFloat(src, dt)-off, dt)*sc, dt)
			storeFloat(dst, at, math.RoundToEven(v))
		}
	case offset.isInt && scale.isInt: // integer arithmetic in dtype, wrapping
		if !fits(offset.i, dt) {
			return nil, errs.New(errs.InvalidArgument, "configuration.offset %d does not fit %s", offset.i, dt)
		}
		if !fits(scale.i, dt) {
			return nil, errs.New(errs.InvalidArgument, "configuration.scale %d does not fit %s", scale.i, dt)
		}
		e.encode = func(dst, src []byte) {
			var v [8]byte
			storeBits(v[:], dt, (loadBits(src, dt)-offset.i)*scale.i)
			cast(dst, at, v[:dt.Size], dt)
		}
	case offset.isInt: // x - offset in dtype, then float64
		if !fits(offset.i, dt) {
			return nil, errs.New(errs.InvalidArgument, "configuration.offset %d does not fit %s", offset.i, dt)
		}
		e.encode = func(dst, src []byte) {
			d := wrap(loadBits(src, dt)-offset.i, dt)
			storeFloat(dst, at, math.RoundToEven(intFloat(d, dt)*scale.f))
		}
	default:
		e.encode = func(dst, src []byte) {
			storeFloat(dst, at, math.RoundToEven((loadFloat(src, dt)-offset.f)*scale.f))
		}
	}
	// Decoding divides: integers become float64, float32 stays float32.
	if at.Kind == zarr.KindFloat && at.Size == 4 {
		off, sc := roundTo(offset.f, at), roundTo(scale.f, at)
		e.decode = func(dst, src []byte) {
			storeFloat(dst, dt, roundTo(roundTo(loadFloat(src, at)/sc, at)+off, at))
		}
	} else {
		e.decode = func(dst, src []byte) {
			storeFloat(dst, dt, loadFloat(src, at)/scale.f+offset.f)
		}
	}
	return e, nil
}

// newQuantize is numcodecs Quantize: x rounded to a multiple of a power of
// two fine enough for the requested decimal digits.
func newQuantize(cfg json.RawMessage, in ChunkSpec) (any, error) {
	c := struct {
		Digits json.RawMessage `json:"digits"`
		Dtype  string          `json:"dtype"`
		Astype string          `json:"astype"`
	}{}
	if err := lenient(cfg, &c); err != nil {
		return nil, err
	}
	d, err := parseNumber("digits", c.Digits)
	if err != nil {
		return nil, err
	}
	if !d.isInt || d.i < -300 || d.i > 300 {
		return nil, errs.New(errs.InvalidArgument, "configuration.digits %s: want an integer from -300 to 300", c.Digits)
	}
	dt, at, err := dtypes(c.Dtype, c.Astype, in, isFloat)
	if err != nil {
		return nil, err
	}
	// numcodecs: exp = floor/ceil(log10(10**-digits)), which is -digits;
	// bits = ceil(log2(10**-exp)); scale = 2**bits.
	bits := math.Ceil(math.Log2(math.Pow(10, float64(d.i))))
	scale := roundTo(math.Pow(2, bits), dt)
	if math.IsInf(scale, 0) || scale == 0 {
		return nil, errs.New(errs.InvalidArgument, "configuration.digits %d: the scale 2**%v does not fit %s", d.i, bits, dt)
	}
	return elementCodec{name: "numcodecs.quantize", dec: dt, enc: at,
		encode: func(dst, src []byte) {
			v := math.RoundToEven(roundTo(scale*loadFloat(src, dt), dt))
			storeFloat(dst, at, roundTo(v/scale, dt))
		},
		decode: func(dst, src []byte) { cast(dst, dt, src, at) },
	}, nil
}

// newBitRound is numcodecs BitRound: the mantissa rounded (to nearest,
// ties to even) to keepbits bits; decoding is the identity.
func newBitRound(cfg json.RawMessage, in ChunkSpec) (any, error) {
	c := struct {
		Keepbits json.RawMessage `json:"keepbits"`
	}{}
	if err := lenient(cfg, &c); err != nil {
		return nil, err
	}
	k, err := parseNumber("keepbits", c.Keepbits)
	if err != nil {
		return nil, err
	}
	t := in.DataType
	if t.Kind != zarr.KindFloat {
		return nil, errs.New(errs.InvalidArgument, "numcodecs.bitround rounds float arrays, not %s", t)
	}
	mant := map[int]int64{2: 10, 4: 23, 8: 52}[t.Size]
	if !k.isInt || k.i < 0 || k.i > mant {
		return nil, errs.New(errs.InvalidArgument, "configuration.keepbits %s: want an integer from 0 to %d for %s", c.Keepbits, mant, t)
	}
	mask := uint64(math.MaxUint64) << (mant - k.i)
	var half uint64
	if k.i < mant {
		half = 1<<(mant-k.i-1) - 1
	}
	drop := uint(mant - k.i)
	round := func(dst, src []byte) {
		u := uint64(loadBits(src, zarr.DataType{Kind: zarr.KindUint, Size: t.Size}))
		if drop > 0 {
			u = (u + (u>>drop)&1 + half) & mask
		}
		storeBits(dst, t, int64(u))
	}
	return elementCodec{name: "numcodecs.bitround", dec: t, enc: t, encode: round,
		decode: func(dst, src []byte) { copy(dst, src) }}, nil
}

// newAsType is numcodecs AsType: elements cast from decode_dtype (the
// array's) to encode_dtype.
func newAsType(cfg json.RawMessage, in ChunkSpec) (any, error) {
	c := struct {
		Encode string `json:"encode_dtype"`
		Decode string `json:"decode_dtype"`
	}{}
	if err := lenient(cfg, &c); err != nil {
		return nil, err
	}
	if c.Encode == "" {
		return nil, errs.New(errs.InvalidArgument, "configuration.encode_dtype: missing")
	}
	et, err := numericType("encode_dtype", c.Encode, in.DataType, isCastable)
	if err != nil {
		return nil, err
	}
	dt, err := numericType("decode_dtype", c.Decode, in.DataType, isCastable)
	if err != nil {
		return nil, err
	}
	if err := sameType("decode_dtype", dt, in); err != nil {
		return nil, err
	}
	return elementCodec{name: "numcodecs.astype", dec: dt, enc: et,
		encode: func(dst, src []byte) { cast(dst, et, src, dt) },
		decode: func(dst, src []byte) { cast(dst, dt, src, et) },
	}, nil
}

// packBits is numcodecs PackBits: a bool chunk as one byte giving the
// number of padding bits in the last byte, then the bits, most significant
// first (numpy.packbits).
type packBits struct{}

func newPackBits(cfg json.RawMessage, in ChunkSpec) (any, error) {
	var c struct{}
	if err := lenient(cfg, &c); err != nil {
		return nil, err
	}
	if in.DataType.Kind != zarr.KindBool {
		return nil, errs.New(errs.InvalidArgument, "numcodecs.packbits packs bool arrays, not %s", in.DataType)
	}
	return packBits{}, nil
}

func (packBits) Resolve(in ChunkSpec) (ChunkSpec, error) {
	n := in.Elements()
	return ChunkSpec{Shape: []int{1 + (n+7)/8}, DataType: zarr.MustDataType("uint8")}, nil
}

func (packBits) Encode(c Chunk, in ChunkSpec) (Chunk, error) {
	n := in.Elements()
	out := make([]byte, 1+(n+7)/8)
	out[0] = byte((8 - n%8) % 8)
	for i, v := range c.Data[:n] {
		if v != 0 {
			out[1+i/8] |= 0x80 >> (i % 8)
		}
	}
	return Chunk{Data: out}, nil
}

func (packBits) Decode(c Chunk, in ChunkSpec) (Chunk, error) {
	n := in.Elements()
	if len(c.Data) != 1+(n+7)/8 {
		return Chunk{}, errs.New(errs.DataLoss, "numcodecs.packbits: %d bytes for %d bits", len(c.Data), n)
	}
	if pad := int(c.Data[0]); pad != (8-n%8)%8 {
		return Chunk{}, errs.New(errs.DataLoss, "numcodecs.packbits: header says %d padding bits, %d elements need %d", pad, n, (8-n%8)%8)
	}
	out := make([]byte, n)
	for i := range out {
		out[i] = c.Data[1+i/8] >> (7 - i%8) & 1
	}
	return Chunk{Data: out}, nil
}

// categorize is numcodecs Categorize: each string as its 1-based index in
// labels, 0 for any other string (which decodes to ""). String arrays are
// v3 "string" (numcodecs dtype "|O") or v2 "<U<n>" (UTF-32).
type categorize struct {
	// labels are compared with the elements (UTF-8, or for "<U<n>" the
	// UTF-32 code units); a decoded label is cut to the array's width.
	labels, cut [][]byte
	dt, at      zarr.DataType
}

func newCategorize(cfg json.RawMessage, in ChunkSpec) (any, error) {
	c := struct {
		Labels *[]string `json:"labels"`
		Dtype  string    `json:"dtype"`
		Astype string    `json:"astype"`
	}{}
	if err := lenient(cfg, &c); err != nil {
		return nil, err
	}
	if c.Labels == nil {
		return nil, errs.New(errs.InvalidArgument, "configuration.labels: missing")
	}
	dt := in.DataType
	switch {
	case dt.Kind == zarr.KindString:
		if c.Dtype != "" && c.Dtype != "|O" && c.Dtype != "<O" && c.Dtype != ">O" {
			return nil, errs.New(errs.InvalidArgument, "configuration.dtype %q does not match the array's %s (want \"|O\")", c.Dtype, dt)
		}
	case dt.Kind == zarr.KindFixedUnicode:
		if c.Dtype != "" {
			t, _, err := zarr.ParseV2DataType(c.Dtype)
			if err != nil || t.Kind != dt.Kind || t.Size != dt.Size {
				return nil, errs.New(errs.InvalidArgument, "configuration.dtype %q does not match the array's %s", c.Dtype, dt)
			}
		}
	default:
		return nil, errs.New(errs.InvalidArgument, "numcodecs.categorize encodes string arrays, not %s", dt)
	}
	astype := c.Astype
	if astype == "" {
		astype = "|u1"
	}
	at, err := numericType("astype", astype, dt, isInt)
	if err != nil {
		return nil, err
	}
	if !fits(int64(len(*c.Labels)), at) {
		return nil, errs.New(errs.InvalidArgument, "configuration.labels: %d labels do not fit configuration.astype %s", len(*c.Labels), at)
	}
	k := categorize{dt: dt, at: at}
	longest := 0
	for _, l := range *c.Labels {
		b, cut := []byte(l), []byte(l)
		if dt.Kind == zarr.KindFixedUnicode {
			// NumPy compares strings without trailing NULs, and cuts a
			// label to the width of the array's strings when it assigns
			// it (so a longer label matches nothing, but decodes cut).
			b = nil
			for _, r := range strings.TrimRight(l, "\x00") {
				b = binary.LittleEndian.AppendUint32(b, uint32(r))
			}
			cut = b[:min(len(b), dt.Size)]
		}
		k.labels, k.cut = append(k.labels, b), append(k.cut, cut)
		longest = max(longest, len(cut))
	}
	// Decoded strings are at most the longest label each: metadata, not
	// the chunk, decides their size; it must be within the default limit
	// on a chunk's string bytes (decoders are not told the limits).
	if dt.Kind == zarr.KindString && int64(longest)*int64(max(in.Elements(), 0)) > DefaultMaxVariableBytes {
		return nil, errs.New(errs.ResourceExhausted, "numcodecs.categorize: %d elements of labels up to %d bytes could decode to more than %s", in.Elements(), longest, sizeOf(DefaultMaxVariableBytes))
	}
	return k, nil
}

// code is the encoded value of one string.
func (k categorize) code(s []byte) int64 {
	if k.dt.Kind == zarr.KindFixedUnicode {
		for len(s) >= 4 && binary.LittleEndian.Uint32(s[len(s)-4:]) == 0 {
			s = s[:len(s)-4]
		}
	}
	for i, l := range k.labels {
		if string(l) == string(s) {
			return int64(i + 1)
		}
	}
	return 0
}

func (k categorize) Resolve(in ChunkSpec) (ChunkSpec, error) {
	out := in
	out.DataType = k.at
	out.FillValue = make([]byte, k.at.Size)
	storeBits(out.FillValue, k.at, k.code(in.fill()))
	return out, nil
}

func (k categorize) Encode(c Chunk, in ChunkSpec) (Chunk, error) {
	n := in.Elements()
	out := make([]byte, n*k.at.Size)
	for i := range n {
		var s []byte
		if k.dt.Kind == zarr.KindString {
			s = c.Data[c.Offsets[i]:c.Offsets[i+1]]
		} else {
			s = c.Data[i*k.dt.Size : (i+1)*k.dt.Size]
		}
		storeBits(out[i*k.at.Size:], k.at, k.code(s))
	}
	return Chunk{Data: out}, nil
}

func (k categorize) Decode(c Chunk, in ChunkSpec) (Chunk, error) {
	n := in.Elements()
	if len(c.Data) != n*k.at.Size {
		return Chunk{}, errs.New(errs.DataLoss, "numcodecs.categorize: %d bytes for %d elements of %s", len(c.Data), n, k.at)
	}
	label := func(i int) []byte {
		v := loadBits(c.Data[i*k.at.Size:], k.at)
		if v >= 1 && v <= int64(len(k.cut)) {
			return k.cut[v-1]
		}
		return nil // numcodecs: any other value is ""
	}
	if k.dt.Kind == zarr.KindFixedUnicode {
		out := make([]byte, n*k.dt.Size)
		for i := range n {
			copy(out[i*k.dt.Size:], label(i))
		}
		return Chunk{Data: out}, nil
	}
	offs := make([]int64, n+1)
	size := 0
	for i := range n {
		size += len(label(i))
	}
	data := make([]byte, 0, size)
	for i := range n {
		data = append(data, label(i)...)
		offs[i+1] = int64(len(data))
	}
	return Chunk{Data: data, Offsets: offs}, nil
}

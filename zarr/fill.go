package zarr

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/x448/float16"
)

// Canonical NaN bit patterns ("NaN" in fill values): sign 0, quiet bit set,
// rest of the mantissa zero.
const (
	nan16 = 0x7e00
	nan32 = 0x7fc00000
	nan64 = 0x7ff8000000000000
)

// MaxElementSize bounds the element size of the fixed-size types this
// package reads (r<bits>, |S<n>, <U<n>, |V<n>), so that a document cannot
// make it allocate without bound.
const MaxElementSize = 1 << 20

// ParseFillValue decodes a v3 fill_value for data type d. The result is one
// element in the decoded-chunk layout (little-endian, Size bytes), or for
// string and bytes the value's bytes. null reports a JSON null (no fill
// value), in which case the bytes are nil.
func ParseFillValue(d DataType, raw json.RawMessage) (value []byte, null bool, err error) {
	return parseFill(d, raw, false)
}

// ParseFillValueV2 is ParseFillValue for the fill_value of a v2 .zarray:
// byte strings (|S, |V) are base64, unicode strings (<U) JSON strings.
func ParseFillValueV2(d DataType, raw json.RawMessage) (value []byte, null bool, err error) {
	return parseFill(d, raw, true)
}

func fillErr(d DataType, raw json.RawMessage, why string) error {
	s := string(raw)
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return newError(ErrInvalid, "fill_value: %s is not a valid %s value: %s", s, d.Name, why)
}

func parseFill(d DataType, raw json.RawMessage, v2 bool) ([]byte, bool, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return nil, true, nil
	}
	var v any
	if err := decodeNumber(raw, &v); err != nil {
		return nil, false, newError(ErrInvalid, "fill_value: not valid JSON")
	}
	if d.Size < 0 || d.Size > MaxElementSize {
		return nil, false, newError(ErrInvalid, "fill_value: data type %q: elements larger than %d bytes are not supported", d.Name, MaxElementSize)
	}
	out := make([]byte, d.Size)
	switch d.Kind {
	case KindBool:
		switch x := v.(type) {
		case bool:
			if x {
				out[0] = 1
			}
			return out, false, nil
		case json.Number:
			if v2 && (x == "0" || x == "1") {
				out[0] = byte(x[0] - '0')
				return out, false, nil
			}
		}
		return nil, false, fillErr(d, raw, "want true or false")
	case KindInt, KindUint:
		n, ok := v.(json.Number)
		if !ok {
			if b, isBool := v.(bool); isBool && v2 {
				if b {
					n = "1"
				} else {
					n = "0"
				}
			} else {
				return nil, false, fillErr(d, raw, "want an integer")
			}
		}
		if err := putInt(d, string(n), out); err != nil {
			return nil, false, fillErr(d, raw, err.Error())
		}
		return out, false, nil
	case KindFloat:
		if err := putFloat(d.Size, v, out); err != nil {
			return nil, false, fillErr(d, raw, err.Error())
		}
		return out, false, nil
	case KindComplex:
		pair, ok := v.([]any)
		if !ok || len(pair) != 2 {
			return nil, false, fillErr(d, raw, "want [real, imaginary]")
		}
		h := d.Size / 2
		for i := range 2 {
			if err := putFloat(h, pair[i], out[i*h:(i+1)*h]); err != nil {
				return nil, false, fillErr(d, raw, err.Error())
			}
		}
		return out, false, nil
	case KindRaw, KindBytes:
		b, err := bytesFill(v)
		if err != nil {
			return nil, false, fillErr(d, raw, err.Error())
		}
		if d.Kind == KindBytes {
			return b, false, nil
		}
		if len(b) != d.Size {
			return nil, false, fillErr(d, raw, fmt.Sprintf("want %d bytes, have %d", d.Size, len(b)))
		}
		return b, false, nil
	case KindFixedBytes:
		b, err := bytesFill(v)
		if err != nil {
			return nil, false, fillErr(d, raw, err.Error())
		}
		if len(b) > d.Size {
			return nil, false, fillErr(d, raw, fmt.Sprintf("longer than %d bytes", d.Size))
		}
		copy(out, b)
		return out, false, nil
	case KindString:
		switch x := v.(type) {
		case string:
			return []byte(x), false, nil
		case json.Number:
			// zarr-python 2 records 0 as the fill value of object arrays.
			if v2 {
				return []byte{}, false, nil
			}
		}
		return nil, false, fillErr(d, raw, "want a string")
	case KindFixedUnicode:
		s, ok := v.(string)
		if !ok {
			if _, num := v.(json.Number); num && v2 {
				return out, false, nil
			}
			return nil, false, fillErr(d, raw, "want a string")
		}
		n := 0
		for _, r := range s {
			if n+4 > len(out) {
				return nil, false, fillErr(d, raw, fmt.Sprintf("longer than %d characters", d.Size/4))
			}
			binary.LittleEndian.PutUint32(out[n:], uint32(r))
			n += 4
		}
		return out, false, nil
	}
	return nil, false, newError(ErrUnsupported, "fill_value: data type %q is not supported", d.Name)
}

// bytesFill reads a byte string given as base64 or as a list of integers
// in [0, 255].
func bytesFill(v any) ([]byte, error) {
	switch x := v.(type) {
	case string:
		b, err := base64.StdEncoding.DecodeString(x)
		if err != nil {
			return nil, fmt.Errorf("not base64")
		}
		return b, nil
	case json.Number:
		// zarr-python 2 records 0 as the fill value of object arrays.
		if x == "0" {
			return []byte{}, nil
		}
	case []any:
		b := make([]byte, len(x))
		for i, e := range x {
			n, ok := e.(json.Number)
			if !ok {
				return nil, fmt.Errorf("element %d is not an integer", i)
			}
			u, err := strconv.ParseUint(string(n), 10, 8)
			if err != nil {
				return nil, fmt.Errorf("element %d is not in [0, 255]", i)
			}
			b[i] = byte(u)
		}
		return b, nil
	}
	return nil, fmt.Errorf("want base64 or a list of bytes")
}

func putInt(d DataType, s string, out []byte) error {
	bits := d.Size * 8
	var u uint64
	if d.Kind == KindInt {
		i, err := strconv.ParseInt(s, 10, bits)
		if err != nil {
			f, ferr := strconv.ParseFloat(s, 64)
			if ferr != nil || f != math.Trunc(f) || f < -math.Ldexp(1, bits-1) || f >= math.Ldexp(1, bits-1) {
				return fmt.Errorf("want an integer in the range of %s", d.Name)
			}
			i = int64(f)
		}
		u = uint64(i)
	} else {
		var err error
		u, err = strconv.ParseUint(s, 10, bits)
		if err != nil {
			f, ferr := strconv.ParseFloat(s, 64)
			if ferr != nil || f != math.Trunc(f) || f < 0 || f >= math.Ldexp(1, bits) {
				return fmt.Errorf("want an integer in the range of %s", d.Name)
			}
			u = uint64(f)
		}
	}
	putUint(out, u)
	return nil
}

func putUint(out []byte, u uint64) {
	for i := range out {
		out[i] = byte(u >> (8 * i))
	}
}

func getUint(b []byte) uint64 {
	var u uint64
	for i := range b {
		u |= uint64(b[i]) << (8 * i)
	}
	return u
}

// putFloat stores a JSON float (number, "NaN", "Infinity", "-Infinity" or
// "0x" bit pattern) of size bytes.
func putFloat(size int, v any, out []byte) error {
	if size != 2 && size != 4 && size != 8 {
		return fmt.Errorf("unsupported float size %d", size)
	}
	switch x := v.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil && !isRangeErr(err) {
			return fmt.Errorf("not a number")
		}
		switch size {
		case 2:
			f32, _ := strconv.ParseFloat(string(x), 32)
			putUint(out, uint64(float16.Fromfloat32(float32(f32)).Bits()))
		case 4:
			f32, _ := strconv.ParseFloat(string(x), 32)
			putUint(out, uint64(math.Float32bits(float32(f32))))
		case 8:
			putUint(out, math.Float64bits(f))
		}
		return nil
	case string:
		switch x {
		case "NaN":
			putUint(out, [...]uint64{2: nan16, 4: nan32, 8: nan64}[size])
			return nil
		case "Infinity", "-Infinity":
			f := math.Inf(1)
			if x[0] == '-' {
				f = math.Inf(-1)
			}
			putFloatValue(size, f, out)
			return nil
		}
		if h, ok := strings.CutPrefix(x, "0x"); ok && len(h) > 0 && len(h) <= 2*size {
			u, err := strconv.ParseUint(h, 16, 8*size)
			if err == nil {
				putUint(out, u)
				return nil
			}
		}
		return fmt.Errorf(`want a number, "NaN", "Infinity", "-Infinity" or "0x" and %d hex digits`, 2*size)
	}
	return fmt.Errorf("want a number")
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

func putFloatValue(size int, f float64, out []byte) {
	switch size {
	case 2:
		putUint(out, uint64(float16.Fromfloat32(float32(f)).Bits()))
	case 4:
		putUint(out, uint64(math.Float32bits(float32(f))))
	case 8:
		putUint(out, math.Float64bits(f))
	}
}

// EncodeFillValue is the v3 JSON form of a fill value as zarr-python 3
// writes it: numbers, "NaN"/"Infinity"/"-Infinity", "0x…" for NaNs other
// than the canonical one, [re, im] for complex numbers, a list of integers
// for raw types, base64 for bytes and a string for string. null gives JSON
// null.
func EncodeFillValue(d DataType, value []byte, null bool) (json.RawMessage, error) {
	return encodeFill(d, value, null, false)
}

// EncodeFillValueV2 is EncodeFillValue for a v2 .zarray, as zarr-python 2
// writes it.
func EncodeFillValueV2(d DataType, value []byte, null bool) (json.RawMessage, error) {
	return encodeFill(d, value, null, true)
}

func encodeFill(d DataType, b []byte, null, v2 bool) (json.RawMessage, error) {
	if null {
		return json.RawMessage("null"), nil
	}
	if !d.VariableLength() && len(b) != d.Size {
		if len(b) != 0 {
			return nil, newError(ErrInvalid, "fill_value: %s needs %d bytes, have %d", d.Name, d.Size, len(b))
		}
		b = make([]byte, d.Size) // unset: zero
	}
	switch d.Kind {
	case KindBool:
		return mustJSON(b[0] != 0), nil
	case KindInt:
		u := getUint(b)
		shift := 64 - 8*d.Size
		return json.RawMessage(strconv.FormatInt(int64(u<<shift)>>shift, 10)), nil
	case KindUint:
		return json.RawMessage(strconv.FormatUint(getUint(b), 10)), nil
	case KindFloat:
		return encodeFloat(b), nil
	case KindComplex:
		h := d.Size / 2
		return json.RawMessage("[" + string(encodeFloat(b[:h])) + ", " + string(encodeFloat(b[h:])) + "]"), nil
	case KindRaw:
		if v2 {
			return mustJSON(base64.StdEncoding.EncodeToString(b)), nil
		}
		ints := make([]int, len(b))
		for i, x := range b {
			ints[i] = int(x)
		}
		return mustJSON(ints), nil
	case KindBytes:
		return mustJSON(base64.StdEncoding.EncodeToString(b)), nil
	case KindFixedBytes:
		return mustJSON(base64.StdEncoding.EncodeToString(bytes.TrimRight(b, "\x00"))), nil
	case KindString:
		if !utf8.Valid(b) {
			return nil, newError(ErrInvalid, "fill_value: string is not valid UTF-8")
		}
		return mustJSON(string(b)), nil
	case KindFixedUnicode:
		var sb strings.Builder
		for i := 0; i+4 <= len(b); i += 4 {
			r := rune(binary.LittleEndian.Uint32(b[i:]))
			if r == 0 {
				break
			}
			if !utf8.ValidRune(r) {
				return nil, newError(ErrInvalid, "fill_value: invalid code point %#x", uint32(r))
			}
			sb.WriteRune(r)
		}
		return mustJSON(sb.String()), nil
	}
	return nil, newError(ErrUnsupported, "fill_value: data type %q is not supported", d.Name)
}

func encodeFloat(b []byte) json.RawMessage {
	u := getUint(b)
	var f float64
	var canonNaN bool
	switch len(b) {
	case 2:
		h := float16.Frombits(uint16(u))
		f = float64(h.Float32())
		canonNaN = u == nan16
	case 4:
		f = float64(math.Float32frombits(uint32(u)))
		canonNaN = u == nan32
	default:
		f = math.Float64frombits(u)
		canonNaN = u == nan64
	}
	switch {
	case math.IsNaN(f) && canonNaN:
		return json.RawMessage(`"NaN"`)
	case math.IsNaN(f):
		return json.RawMessage(fmt.Sprintf(`"0x%0*x"`, 2*len(b), u))
	case math.IsInf(f, 1):
		return json.RawMessage(`"Infinity"`)
	case math.IsInf(f, -1):
		return json.RawMessage(`"-Infinity"`)
	}
	return json.RawMessage(pyFloat(f))
}

// pyFloat formats f as Python's repr does, which is what zarr-python
// writes: shortest round-trip digits, a ".0" on integral values, exponent
// form outside [1e-4, 1e16).
func pyFloat(f float64) string {
	if f == 0 {
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	a := math.Abs(f)
	if a >= 1e16 || a < 1e-4 {
		s := strconv.FormatFloat(f, 'e', -1, 64)
		return s
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}
